-- Issue 44: every read is paged and bounded (see SQLite's
-- 029_paged_reads.sql for the why).
CREATE INDEX IF NOT EXISTS items_page ON items (workflow, created_at, id);
CREATE INDEX IF NOT EXISTS runs_page ON runs (workflow, created_at, id);
CREATE INDEX IF NOT EXISTS mutations_page ON mutations (workflow, created_at, id);
-- The first committed task run of a major version (RunFirstOf: where the
-- look for orphaned items starts) among a million consumer runs.
CREATE INDEX IF NOT EXISTS runs_first_of ON runs (workflow, handler_type, status, created_at, id);

CREATE TABLE IF NOT EXISTS tallies (
  workflow TEXT NOT NULL,
  kind TEXT NOT NULL,
  topic TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL DEFAULT '',
  n BIGINT NOT NULL,
  PRIMARY KEY (workflow, kind, topic, status)
);

INSERT INTO tallies (workflow, kind, topic, status, n)
  SELECT workflow, 'input', '', '', count(*) FROM items GROUP BY workflow;
INSERT INTO tallies (workflow, kind, topic, status, n)
  SELECT workflow, 'run', '', status, count(*) FROM runs GROUP BY workflow, status;
INSERT INTO tallies (workflow, kind, topic, status, n)
  SELECT workflow, 'mutation', '', status, count(*) FROM mutations GROUP BY workflow, status;
INSERT INTO tallies (workflow, kind, topic, status, n)
  SELECT workflow, 'event', topic, CASE WHEN status = 'pending' AND reserved_by <> '' THEN 'reserved' ELSE status END, count(*)
  FROM events GROUP BY 1, 2, 3, 4;

-- keep_tally adds d to one count; the triggers below call it in the
-- transaction that changes the row counted.
CREATE FUNCTION keep_tally(wf text, k text, tp text, st text, d bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO tallies AS t (workflow, kind, topic, status, n) VALUES (wf, k, tp, st, d)
    ON CONFLICT (workflow, kind, topic, status) DO UPDATE SET n = t.n + d;
END
$$;

CREATE FUNCTION keep_tally_row() RETURNS trigger
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
  IF TG_OP = 'UPDATE' AND OLD.workflow IS NOT DISTINCT FROM NEW.workflow
     AND old_topic IS NOT DISTINCT FROM new_topic AND old_status IS NOT DISTINCT FROM new_status THEN
    RETURN NULL;
  END IF;
  IF TG_OP <> 'INSERT' THEN
    PERFORM keep_tally(OLD.workflow, k, old_topic, old_status, -1);
  END IF;
  IF TG_OP <> 'DELETE' THEN
    PERFORM keep_tally(NEW.workflow, k, new_topic, new_status, 1);
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER tally_items AFTER INSERT OR DELETE OR UPDATE OF workflow ON items
  FOR EACH ROW EXECUTE FUNCTION keep_tally_row('input');
CREATE TRIGGER tally_runs AFTER INSERT OR DELETE OR UPDATE OF workflow, status ON runs
  FOR EACH ROW EXECUTE FUNCTION keep_tally_row('run');
CREATE TRIGGER tally_mutations AFTER INSERT OR DELETE OR UPDATE OF workflow, status ON mutations
  FOR EACH ROW EXECUTE FUNCTION keep_tally_row('mutation');
CREATE TRIGGER tally_events AFTER INSERT OR DELETE OR UPDATE OF workflow, topic, status, reserved_by ON events
  FOR EACH ROW EXECUTE FUNCTION keep_tally_row('event');

-- /metrics no longer sums the ledger's reconcile attempts (it counts each
-- reconcile question as it is asked): the index that served the sum goes.
DROP INDEX IF EXISTS mutations_reconciled;
