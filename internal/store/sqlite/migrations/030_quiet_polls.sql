-- Issue 44: a poll that finds nothing new leaves a counter and its last
-- trace, not a row of its own. A producer run that registered nothing
-- new and published nothing new is folded into the handler's row of
-- quiet polls (handlers.quiet_run): that run's row counts them
-- (quiet_polls), says when the first of them started (quiet_since), and
-- holds the last one's trace and times. 0 and '': an ordinary run, and a
-- handler with no quiet poll since its last run that found something.
ALTER TABLE runs ADD COLUMN quiet_polls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN quiet_since INTEGER NOT NULL DEFAULT 0;
ALTER TABLE handlers ADD COLUMN quiet_run TEXT NOT NULL DEFAULT '';
