-- Issue 11 #5: when a call went out and when a reconcile first said "not
-- found", so that one early "not found" is not taken as proof.
ALTER TABLE mutations ADD COLUMN sent_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE mutations ADD COLUMN not_found_at INTEGER NOT NULL DEFAULT 0;
