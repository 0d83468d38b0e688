-- Issue 43: PostgreSQL's share of a run.
--
-- (workflow, created_at) of runs, mutations and items is a prefix of the
-- paged reads' (workflow, created_at, id) of migration 024: every read
-- the shorter index served (the activity tally's ranges, the lists in
-- order) goes along the longer one, and each of these indexes cost every
-- insert, and every update that is not HOT, a b-tree entry of its own.
DROP INDEX IF EXISTS runs_workflow;
DROP INDEX IF EXISTS mutations_workflow;
DROP INDEX IF EXISTS items_created;

-- The tally triggers' work in one statement per row changed: a changed
-- row moves its count from its old key to its new one in one multi-row
-- upsert (the keys differ, or the trigger returned already), rather than
-- through keep_tally once per key, each call a statement that runs
-- another. What is counted is unchanged.
CREATE OR REPLACE FUNCTION keep_tally_row() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  k text := TG_ARGV[0];
  old_topic text := '';
  new_topic text := '';
  old_status text := '';
  new_status text := '';
BEGIN
  IF TG_OP <> 'INSERT' THEN
    IF k = 'event' THEN
      old_topic := OLD.topic;
      old_status := CASE WHEN OLD.status = 'pending' AND OLD.reserved_by <> '' THEN 'reserved' ELSE OLD.status END;
    ELSIF k <> 'input' THEN
      old_status := OLD.status;
    END IF;
  END IF;
  IF TG_OP <> 'DELETE' THEN
    IF k = 'event' THEN
      new_topic := NEW.topic;
      new_status := CASE WHEN NEW.status = 'pending' AND NEW.reserved_by <> '' THEN 'reserved' ELSE NEW.status END;
    ELSIF k <> 'input' THEN
      new_status := NEW.status;
    END IF;
  END IF;
  IF TG_OP = 'INSERT' THEN
    INSERT INTO tallies AS t (workflow, kind, topic, status, n) VALUES (NEW.workflow, k, new_topic, new_status, 1)
      ON CONFLICT (workflow, kind, topic, status) DO UPDATE SET n = t.n + 1;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO tallies AS t (workflow, kind, topic, status, n) VALUES (OLD.workflow, k, old_topic, old_status, -1)
      ON CONFLICT (workflow, kind, topic, status) DO UPDATE SET n = t.n - 1;
  ELSIF OLD.workflow IS DISTINCT FROM NEW.workflow OR old_topic IS DISTINCT FROM new_topic OR old_status IS DISTINCT FROM new_status THEN
    INSERT INTO tallies AS t (workflow, kind, topic, status, n)
      VALUES (OLD.workflow, k, old_topic, old_status, -1), (NEW.workflow, k, new_topic, new_status, 1)
      ON CONFLICT (workflow, kind, topic, status) DO UPDATE SET n = t.n + excluded.n;
  END IF;
  RETURN NULL;
END
$$;

-- A row updated without a change to what is counted (a run's phase, an
-- event's payload) no longer calls the function at all: the trigger's
-- WHEN says so before PostgreSQL starts PL/pgSQL for it.
DROP TRIGGER tally_items ON items;
DROP TRIGGER tally_runs ON runs;
DROP TRIGGER tally_mutations ON mutations;
DROP TRIGGER tally_events ON events;
CREATE TRIGGER tally_items_change AFTER INSERT OR DELETE ON items
  FOR EACH ROW EXECUTE FUNCTION keep_tally_row('input');
CREATE TRIGGER tally_items_move AFTER UPDATE OF workflow ON items
  FOR EACH ROW WHEN (OLD.workflow IS DISTINCT FROM NEW.workflow) EXECUTE FUNCTION keep_tally_row('input');
CREATE TRIGGER tally_runs_change AFTER INSERT OR DELETE ON runs
  FOR EACH ROW EXECUTE FUNCTION keep_tally_row('run');
CREATE TRIGGER tally_runs_move AFTER UPDATE OF workflow, status ON runs
  FOR EACH ROW WHEN (OLD.workflow IS DISTINCT FROM NEW.workflow OR OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION keep_tally_row('run');
CREATE TRIGGER tally_mutations_change AFTER INSERT OR DELETE ON mutations
  FOR EACH ROW EXECUTE FUNCTION keep_tally_row('mutation');
CREATE TRIGGER tally_mutations_move AFTER UPDATE OF workflow, status ON mutations
  FOR EACH ROW WHEN (OLD.workflow IS DISTINCT FROM NEW.workflow OR OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION keep_tally_row('mutation');
CREATE TRIGGER tally_events_change AFTER INSERT OR DELETE ON events
  FOR EACH ROW EXECUTE FUNCTION keep_tally_row('event');
CREATE TRIGGER tally_events_move AFTER UPDATE OF workflow, topic, status, reserved_by ON events
  FOR EACH ROW WHEN (OLD.workflow IS DISTINCT FROM NEW.workflow OR OLD.topic IS DISTINCT FROM NEW.topic
    OR OLD.status IS DISTINCT FROM NEW.status OR (OLD.reserved_by <> '') IS DISTINCT FROM (NEW.reserved_by <> ''))
  EXECUTE FUNCTION keep_tally_row('event');
