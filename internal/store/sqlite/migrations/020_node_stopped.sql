-- Issue 25: a node that stopped cleanly says so (0 while it runs), so the
-- others stop counting it alive at once instead of three heartbeats later.
ALTER TABLE nodes ADD COLUMN stopped_at INTEGER NOT NULL DEFAULT 0;
