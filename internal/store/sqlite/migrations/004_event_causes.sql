-- Issue 11: looking up an event's causes scanned the whole table (the
-- primary key starts with input_id): 100k events took minutes to publish.
CREATE INDEX IF NOT EXISTS event_causes_event ON event_causes (event_id);
