-- A node's right to step a workflow (fencing token), and the nodes that
-- share the database.
CREATE TABLE IF NOT EXISTS leases (
  workflow TEXT PRIMARY KEY,
  node TEXT NOT NULL,
  token BIGINT NOT NULL,
  expires_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS nodes (
  id TEXT PRIMARY KEY,
  addr TEXT NOT NULL DEFAULT '',
  started_at BIGINT NOT NULL,
  seen_at BIGINT NOT NULL
);
