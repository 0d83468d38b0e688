-- Issue 24: every write of a run is conditional on the revision its writer
-- read (RunSetIfRev), so a step never writes over a person's decision that
-- arrived while it was under way.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS rev BIGINT NOT NULL DEFAULT 0;
