-- The inputs a workflow registered in a time range (issue 42: the page's activity chart): an index, so that counting them reads the range, not every input.
CREATE INDEX IF NOT EXISTS items_created ON items (workflow, created_at);
