-- Issue 16: what a person granted each workflow (connector methods as
-- "tool.method", input sources as "source:NAME"). Workflows deployed
-- before grants existed keep working: they are granted everything ("*").
CREATE TABLE IF NOT EXISTS grants (
  workflow TEXT NOT NULL,
  item TEXT NOT NULL,
  granted_by TEXT NOT NULL DEFAULT '',
  granted_at BIGINT NOT NULL,
  PRIMARY KEY (workflow, item)
);
INSERT INTO grants(workflow, item, granted_by, granted_at) SELECT name, '*', 'upgrade', 0 FROM workflows;
