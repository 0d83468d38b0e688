-- Issue 15: the accounts keep acts with (keep connect google). The
-- credentials are sealed by package account before they get here.
CREATE TABLE IF NOT EXISTS connections (
  provider TEXT PRIMARY KEY,
  account TEXT NOT NULL DEFAULT '',
  scopes TEXT NOT NULL DEFAULT '',
  sealed BLOB NOT NULL,
  broken TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
