-- Issue 43: (workflow, created_at) of runs, mutations and items is a
-- prefix of the paged reads' (workflow, created_at, id) of migration 029:
-- every read the shorter index served (the activity tally's ranges, the
-- lists in order) goes along the longer one, and each cost every insert,
-- and every update of its columns, a b-tree entry of its own.
DROP INDEX IF EXISTS runs_workflow;
DROP INDEX IF EXISTS mutations_workflow;
DROP INDEX IF EXISTS items_created;
