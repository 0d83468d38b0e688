-- Issue 42: time blocked, exact. runs.blocked_at is when the run began
-- waiting for a person (engine.WhoActs says a person acts), 0 when it does
-- not wait; blocked_spans keeps each wait that ended, from when it began
-- to when a person acted or the run ended (engine: putRun). The activity
-- chart reads both. Old rows: a run waiting now counts from its last
-- write (updated_at: nothing writes a run that waits for a person, so it
-- is when it began to wait); waits that ended before this migration have
-- no span, and count nothing.
ALTER TABLE runs ADD COLUMN blocked_at INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET blocked_at = updated_at WHERE open = 1 AND action = '' AND status IN ('paused:approval', 'paused:reconciliation', 'failed:logic', 'failed:internal');
CREATE TABLE IF NOT EXISTS blocked_spans (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workflow TEXT NOT NULL,
  run_id TEXT NOT NULL,
  handler TEXT NOT NULL,
  from_at INTEGER NOT NULL,
  to_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS blocked_spans_to ON blocked_spans (workflow, to_at);
CREATE INDEX IF NOT EXISTS runs_blocked ON runs (workflow, blocked_at) WHERE blocked_at > 0;
-- The deliveries a workflow received from a time on (the drawn workflow's
-- webhook boxes count today's): an index, so that the count reads today's.
CREATE INDEX IF NOT EXISTS deliveries_received ON deliveries (workflow, received_at);
