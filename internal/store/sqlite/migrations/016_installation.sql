-- Issue 24 #9: the installation's own id, made when the store is created
-- (or upgraded), mixed into every new write's idempotency key: two
-- installations writing to one service no longer send the same keys (the
-- service would drop the second one's writes as repeats). Ledger rows keep
-- the key they were created with, so a write in flight at the upgrade is
-- reconciled and re-sent under its old key. keep migrate carries it.
CREATE TABLE IF NOT EXISTS installation (id TEXT NOT NULL);
INSERT INTO installation(id) SELECT lower(hex(randomblob(16))) WHERE NOT EXISTS (SELECT 1 FROM installation);
