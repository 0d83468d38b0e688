-- Issue 17: the Maintainer's repairs of failed:logic runs: every attempt,
-- what it proposed, why it was refused, held or activated, and its cost.
CREATE TABLE IF NOT EXISTS repairs (
  id TEXT PRIMARY KEY,
  workflow TEXT NOT NULL,
  run_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  status TEXT NOT NULL,
  from_version INTEGER NOT NULL,
  to_version INTEGER NOT NULL DEFAULT 0,
  script TEXT NOT NULL DEFAULT '',
  explanation TEXT NOT NULL DEFAULT '',
  reason TEXT NOT NULL DEFAULT '',
  tokens INTEGER NOT NULL DEFAULT 0,
  decided_by TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS repairs_by_workflow ON repairs(workflow, created_at);
