-- The append-only decision log (issue 10 #4): every decision a person takes.
CREATE TABLE IF NOT EXISTS decisions (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workflow TEXT NOT NULL,
  run_id TEXT NOT NULL DEFAULT '',
  mutation_id TEXT NOT NULL DEFAULT '',
  item_id TEXT NOT NULL DEFAULT '',
  action TEXT NOT NULL,
  by TEXT NOT NULL,
  detail TEXT NOT NULL DEFAULT '',
  at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS decisions_run ON decisions (workflow, run_id, id);
