-- Issue 25: events_pending holds pending events only. It held every event
-- the workflow ever had, so counting a workflow's pending events (the
-- status of every workflow, on every refresh of the page) and listing its
-- held ones read its whole history: 20,032 rows for one held event at
-- 20,000 runs (a helper's scale attack). The queries that use it say
-- status='pending' in their text (the pending page a consumer peeks at,
-- the oldest pending event, the count; EventList writes the status it is
-- asked for into its statement). A consumed event leaves the index, so a
-- run also writes one index entry fewer.
DROP INDEX IF EXISTS events_pending;
CREATE INDEX IF NOT EXISTS events_pending ON events (workflow, topic, reserved_by, id) WHERE status = 'pending';
