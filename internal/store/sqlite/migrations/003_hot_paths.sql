-- Indexes for the queries every scheduler step makes, so that their cost
-- stays flat as the ledgers grow (found by keep bench, issue 6).
-- The open run of a workflow: without this, RunOpen walked every run the
-- workflow ever had (runs_workflow), which grew with each run.
CREATE INDEX IF NOT EXISTS runs_open_oldest ON runs (workflow, created_at) WHERE open = 1;
-- A run's mutations, newest first, without a sort.
CREATE INDEX IF NOT EXISTS mutations_run_created ON mutations (run_id, created_at);
-- Made redundant by the two above; every index is one more page written per commit.
DROP INDEX IF EXISTS runs_open;
DROP INDEX IF EXISTS mutations_run;
