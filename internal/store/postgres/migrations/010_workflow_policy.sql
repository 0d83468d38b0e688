-- Issue 24 #5: the [policy] a workflow was deployed under, recorded with
-- it, so that a decision carried out for it runs under its own policy,
-- wherever the command is typed and whatever was deployed since.
ALTER TABLE workflows ADD COLUMN policy TEXT NOT NULL DEFAULT '';
