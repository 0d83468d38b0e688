CREATE TABLE IF NOT EXISTS workflows (
  name TEXT PRIMARY KEY,
  active_version INTEGER NOT NULL DEFAULT 0,
  paused INTEGER NOT NULL DEFAULT 0,
  paused_reason TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
  workflow TEXT NOT NULL,
  id INTEGER NOT NULL,
  major INTEGER NOT NULL,
  minor INTEGER NOT NULL,
  script TEXT NOT NULL,
  file TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL,
  PRIMARY KEY (workflow, id)
);
CREATE TABLE IF NOT EXISTS handlers (
  workflow TEXT NOT NULL,
  name TEXT NOT NULL,
  type TEXT NOT NULL,
  state TEXT,
  dirty INTEGER NOT NULL DEFAULT 0,
  wake_at INTEGER NOT NULL DEFAULT 0,
  next_run_at INTEGER NOT NULL DEFAULT 0,
  queued INTEGER NOT NULL DEFAULT 0,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (workflow, name)
);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workflow TEXT NOT NULL,
  topic TEXT NOT NULL,
  message_id TEXT NOT NULL,
  payload TEXT NOT NULL,
  status TEXT NOT NULL,
  reserved_by TEXT NOT NULL DEFAULT '',
  created_by TEXT NOT NULL DEFAULT '',
  caused_by TEXT NOT NULL DEFAULT '[]',
  attempt INTEGER NOT NULL DEFAULT 1,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  UNIQUE (workflow, topic, message_id)
);
CREATE INDEX IF NOT EXISTS events_pending ON events (workflow, topic, status, reserved_by, id);
CREATE INDEX IF NOT EXISTS events_reserved ON events (reserved_by);
CREATE TABLE IF NOT EXISTS event_causes (
  event_id INTEGER NOT NULL,
  input_id TEXT NOT NULL,
  PRIMARY KEY (input_id, event_id)
);
CREATE TABLE IF NOT EXISTS items (
  id TEXT PRIMARY KEY,
  workflow TEXT NOT NULL,
  key TEXT NOT NULL,
  kind TEXT NOT NULL,
  source TEXT NOT NULL DEFAULT '',
  type TEXT NOT NULL DEFAULT '',
  external_id TEXT NOT NULL DEFAULT '',
  title TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT '',
  current_attempt INTEGER NOT NULL DEFAULT 1,
  created_by TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  UNIQUE (workflow, key)
);
CREATE TABLE IF NOT EXISTS runs (
  id TEXT PRIMARY KEY,
  workflow TEXT NOT NULL,
  version INTEGER NOT NULL,
  handler TEXT NOT NULL,
  handler_type TEXT NOT NULL,
  phase TEXT NOT NULL,
  status TEXT NOT NULL,
  retry_of TEXT NOT NULL DEFAULT '',
  retry_count INTEGER NOT NULL DEFAULT 0,
  prepare_result TEXT,
  mutation_result TEXT,
  pending_call TEXT,
  approved_hash TEXT NOT NULL DEFAULT '',
  action TEXT NOT NULL DEFAULT '',
  error_class TEXT NOT NULL DEFAULT '',
  error_message TEXT NOT NULL DEFAULT '',
  trace TEXT,
  next_attempt_at INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  finished_at INTEGER NOT NULL DEFAULT 0,
  open INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS runs_open ON runs (workflow, open);
CREATE INDEX IF NOT EXISTS runs_status ON runs (status);
CREATE INDEX IF NOT EXISTS runs_workflow ON runs (workflow, created_at);
CREATE TABLE IF NOT EXISTS mutations (
  id TEXT PRIMARY KEY,
  workflow TEXT NOT NULL,
  run_id TEXT NOT NULL,
  handler TEXT NOT NULL,
  item_keys TEXT NOT NULL DEFAULT '[]',
  attempt INTEGER NOT NULL DEFAULT 1,
  tool TEXT NOT NULL,
  method TEXT NOT NULL,
  params TEXT NOT NULL,
  target TEXT NOT NULL DEFAULT '',
  identity_key TEXT NOT NULL UNIQUE,
  payload_hash TEXT NOT NULL,
  idempotency_key TEXT NOT NULL,
  status TEXT NOT NULL,
  result TEXT,
  error_class TEXT NOT NULL DEFAULT '',
  error_message TEXT NOT NULL DEFAULT '',
  can_reconcile INTEGER NOT NULL DEFAULT 0,
  reconcile_attempts INTEGER NOT NULL DEFAULT 0,
  next_reconcile_at INTEGER NOT NULL DEFAULT 0,
  resolved_by TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS mutations_run ON mutations (run_id);
CREATE INDEX IF NOT EXISTS mutations_workflow ON mutations (workflow, created_at);
CREATE INDEX IF NOT EXISTS mutations_status ON mutations (status);
