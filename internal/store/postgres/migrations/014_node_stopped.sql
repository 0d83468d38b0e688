-- Issue 25: a node that stopped cleanly says so (0 while it runs), so the
-- others stop counting it alive at once instead of three heartbeats later.
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS stopped_at BIGINT NOT NULL DEFAULT 0;
