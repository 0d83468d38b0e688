-- Issues 22 and 23: named secrets (keep secret set NAME), which scripts
-- name as {secret:NAME} and webhooks are verified with. Sealed by package
-- account before they get here.
CREATE TABLE IF NOT EXISTS secrets (
  name TEXT PRIMARY KEY,
  sealed BLOB NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
