-- keep's ledgers on PostgreSQL: the same tables and columns as the SQLite
-- backend (after its migrations 001-008), with 64-bit integers for times.
CREATE TABLE IF NOT EXISTS workflows (
  name TEXT PRIMARY KEY,
  active_version BIGINT NOT NULL DEFAULT 0,
  paused INTEGER NOT NULL DEFAULT 0,
  paused_reason TEXT NOT NULL DEFAULT '',
  files_root TEXT NOT NULL DEFAULT '',
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
  workflow TEXT NOT NULL,
  id BIGINT NOT NULL,
  major INTEGER NOT NULL,
  minor INTEGER NOT NULL,
  script TEXT NOT NULL,
  file TEXT NOT NULL DEFAULT '',
  created_at BIGINT NOT NULL,
  PRIMARY KEY (workflow, id)
);
CREATE TABLE IF NOT EXISTS handlers (
  workflow TEXT NOT NULL,
  name TEXT NOT NULL,
  type TEXT NOT NULL,
  state TEXT,
  dirty INTEGER NOT NULL DEFAULT 0,
  wake_at BIGINT NOT NULL DEFAULT 0,
  next_run_at BIGINT NOT NULL DEFAULT 0,
  queued INTEGER NOT NULL DEFAULT 0,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (workflow, name)
);
CREATE TABLE IF NOT EXISTS events (
  id BIGSERIAL PRIMARY KEY,
  workflow TEXT NOT NULL,
  topic TEXT NOT NULL,
  message_id TEXT NOT NULL,
  payload TEXT NOT NULL,
  status TEXT NOT NULL,
  reserved_by TEXT NOT NULL DEFAULT '',
  created_by TEXT NOT NULL DEFAULT '',
  caused_by TEXT NOT NULL DEFAULT '[]',
  attempt INTEGER NOT NULL DEFAULT 1,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  UNIQUE (workflow, topic, message_id)
);
CREATE INDEX IF NOT EXISTS events_pending ON events (workflow, topic, status, reserved_by, id);
CREATE INDEX IF NOT EXISTS events_reserved ON events (reserved_by);
CREATE TABLE IF NOT EXISTS event_causes (
  event_id BIGINT NOT NULL,
  input_id TEXT NOT NULL,
  PRIMARY KEY (input_id, event_id)
);
CREATE INDEX IF NOT EXISTS event_causes_event ON event_causes (event_id);
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
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  last_run TEXT NOT NULL DEFAULT '',
  last_version BIGINT NOT NULL DEFAULT 0,
  UNIQUE (workflow, key)
);
CREATE TABLE IF NOT EXISTS item_attempts (
  item_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  status TEXT NOT NULL,
  version BIGINT NOT NULL DEFAULT 0,
  started_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (item_id, attempt)
);
CREATE TABLE IF NOT EXISTS runs (
  id TEXT PRIMARY KEY,
  workflow TEXT NOT NULL,
  version BIGINT NOT NULL,
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
  next_attempt_at BIGINT NOT NULL DEFAULT 0,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  finished_at BIGINT NOT NULL DEFAULT 0,
  open INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS runs_status ON runs (status);
CREATE INDEX IF NOT EXISTS runs_workflow ON runs (workflow, created_at);
CREATE INDEX IF NOT EXISTS runs_open_oldest ON runs (workflow, created_at) WHERE open = 1;
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
  next_reconcile_at BIGINT NOT NULL DEFAULT 0,
  resolved_by TEXT NOT NULL DEFAULT '',
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  sent_at BIGINT NOT NULL DEFAULT 0,
  not_found_at BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS mutations_workflow ON mutations (workflow, created_at);
CREATE INDEX IF NOT EXISTS mutations_status ON mutations (status);
CREATE INDEX IF NOT EXISTS mutations_run_created ON mutations (run_id, created_at);
CREATE TABLE IF NOT EXISTS decisions (
  id BIGSERIAL PRIMARY KEY,
  workflow TEXT NOT NULL,
  run_id TEXT NOT NULL DEFAULT '',
  mutation_id TEXT NOT NULL DEFAULT '',
  item_id TEXT NOT NULL DEFAULT '',
  action TEXT NOT NULL,
  by TEXT NOT NULL,
  detail TEXT NOT NULL DEFAULT '',
  at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS decisions_run ON decisions (workflow, run_id, id);
