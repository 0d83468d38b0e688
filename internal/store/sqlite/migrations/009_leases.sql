-- Issue 14: a node's right to step a workflow (fencing token), and the
-- nodes that share a store. SQLite has one node; the tables keep the two
-- backends' schemas alike.
CREATE TABLE IF NOT EXISTS leases (
  workflow TEXT PRIMARY KEY,
  node TEXT NOT NULL,
  token INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS nodes (
  id TEXT PRIMARY KEY,
  addr TEXT NOT NULL DEFAULT '',
  started_at INTEGER NOT NULL,
  seen_at INTEGER NOT NULL
);
