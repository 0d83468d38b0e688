-- Issue 44: every read is paged and bounded.
--
-- The lists of inputs, runs and outputs are read a page at a time, newest
-- first, from a position (created_at, id) of the previous page (keyset,
-- never OFFSET): these indexes serve each page with work in proportion to
-- the page, whatever the history.
CREATE INDEX IF NOT EXISTS items_page ON items (workflow, created_at, id);
CREATE INDEX IF NOT EXISTS runs_page ON runs (workflow, created_at, id);
CREATE INDEX IF NOT EXISTS mutations_page ON mutations (workflow, created_at, id);
-- The first committed task run of a major version (RunFirstOf: where the
-- look for orphaned items starts) among a million consumer runs.
CREATE INDEX IF NOT EXISTS runs_first_of ON runs (workflow, handler_type, status, created_at, id);

-- tallies counts a workflow's inputs, its runs and its mutations by status,
-- and its events by topic and state (pending, reserved, consumed, skipped):
-- what /metrics, the topics view, the workflow list and its summary show,
-- read in a few rows instead of counted over the history. Triggers keep
-- it in the very transaction that changes the rows, so it is right after
-- any crash (a transaction commits both or neither).
CREATE TABLE IF NOT EXISTS tallies (
  workflow TEXT NOT NULL,
  kind TEXT NOT NULL,
  topic TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL DEFAULT '',
  n INTEGER NOT NULL,
  PRIMARY KEY (workflow, kind, topic, status)
) WITHOUT ROWID;

INSERT INTO tallies (workflow, kind, topic, status, n)
  SELECT workflow, 'input', '', '', count(*) FROM items GROUP BY workflow;
INSERT INTO tallies (workflow, kind, topic, status, n)
  SELECT workflow, 'run', '', status, count(*) FROM runs GROUP BY workflow, status;
INSERT INTO tallies (workflow, kind, topic, status, n)
  SELECT workflow, 'mutation', '', status, count(*) FROM mutations GROUP BY workflow, status;
INSERT INTO tallies (workflow, kind, topic, status, n)
  SELECT workflow, 'event', topic, CASE WHEN status = 'pending' AND reserved_by <> '' THEN 'reserved' ELSE status END, count(*)
  FROM events GROUP BY 1, 2, 3, 4;

CREATE TRIGGER IF NOT EXISTS tally_items_insert AFTER INSERT ON items BEGIN
  INSERT INTO tallies (workflow, kind, topic, status, n) VALUES (NEW.workflow, 'input', '', '', 1)
    ON CONFLICT (workflow, kind, topic, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS tally_items_delete AFTER DELETE ON items BEGIN
  UPDATE tallies SET n = n - 1 WHERE workflow = OLD.workflow AND kind = 'input' AND topic = '' AND status = '';
END;
CREATE TRIGGER IF NOT EXISTS tally_items_update AFTER UPDATE OF workflow ON items WHEN OLD.workflow IS NOT NEW.workflow BEGIN
  UPDATE tallies SET n = n - 1 WHERE workflow = OLD.workflow AND kind = 'input' AND topic = '' AND status = '';
  INSERT INTO tallies (workflow, kind, topic, status, n) VALUES (NEW.workflow, 'input', '', '', 1)
    ON CONFLICT (workflow, kind, topic, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER IF NOT EXISTS tally_runs_insert AFTER INSERT ON runs BEGIN
  INSERT INTO tallies (workflow, kind, topic, status, n) VALUES (NEW.workflow, 'run', '', NEW.status, 1)
    ON CONFLICT (workflow, kind, topic, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS tally_runs_delete AFTER DELETE ON runs BEGIN
  UPDATE tallies SET n = n - 1 WHERE workflow = OLD.workflow AND kind = 'run' AND topic = '' AND status = OLD.status;
END;
CREATE TRIGGER IF NOT EXISTS tally_runs_update AFTER UPDATE OF workflow, status ON runs
  WHEN OLD.workflow IS NOT NEW.workflow OR OLD.status IS NOT NEW.status BEGIN
  UPDATE tallies SET n = n - 1 WHERE workflow = OLD.workflow AND kind = 'run' AND topic = '' AND status = OLD.status;
  INSERT INTO tallies (workflow, kind, topic, status, n) VALUES (NEW.workflow, 'run', '', NEW.status, 1)
    ON CONFLICT (workflow, kind, topic, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER IF NOT EXISTS tally_mutations_insert AFTER INSERT ON mutations BEGIN
  INSERT INTO tallies (workflow, kind, topic, status, n) VALUES (NEW.workflow, 'mutation', '', NEW.status, 1)
    ON CONFLICT (workflow, kind, topic, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS tally_mutations_delete AFTER DELETE ON mutations BEGIN
  UPDATE tallies SET n = n - 1 WHERE workflow = OLD.workflow AND kind = 'mutation' AND topic = '' AND status = OLD.status;
END;
CREATE TRIGGER IF NOT EXISTS tally_mutations_update AFTER UPDATE OF workflow, status ON mutations
  WHEN OLD.workflow IS NOT NEW.workflow OR OLD.status IS NOT NEW.status BEGIN
  UPDATE tallies SET n = n - 1 WHERE workflow = OLD.workflow AND kind = 'mutation' AND topic = '' AND status = OLD.status;
  INSERT INTO tallies (workflow, kind, topic, status, n) VALUES (NEW.workflow, 'mutation', '', NEW.status, 1)
    ON CONFLICT (workflow, kind, topic, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER IF NOT EXISTS tally_events_insert AFTER INSERT ON events BEGIN
  INSERT INTO tallies (workflow, kind, topic, status, n)
    VALUES (NEW.workflow, 'event', NEW.topic, CASE WHEN NEW.status = 'pending' AND NEW.reserved_by <> '' THEN 'reserved' ELSE NEW.status END, 1)
    ON CONFLICT (workflow, kind, topic, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS tally_events_delete AFTER DELETE ON events BEGIN
  UPDATE tallies SET n = n - 1 WHERE workflow = OLD.workflow AND kind = 'event' AND topic = OLD.topic
    AND status = CASE WHEN OLD.status = 'pending' AND OLD.reserved_by <> '' THEN 'reserved' ELSE OLD.status END;
END;
CREATE TRIGGER IF NOT EXISTS tally_events_update AFTER UPDATE OF workflow, topic, status, reserved_by ON events
  WHEN OLD.workflow IS NOT NEW.workflow OR OLD.topic IS NOT NEW.topic
    OR (CASE WHEN OLD.status = 'pending' AND OLD.reserved_by <> '' THEN 'reserved' ELSE OLD.status END)
       IS NOT (CASE WHEN NEW.status = 'pending' AND NEW.reserved_by <> '' THEN 'reserved' ELSE NEW.status END) BEGIN
  UPDATE tallies SET n = n - 1 WHERE workflow = OLD.workflow AND kind = 'event' AND topic = OLD.topic
    AND status = CASE WHEN OLD.status = 'pending' AND OLD.reserved_by <> '' THEN 'reserved' ELSE OLD.status END;
  INSERT INTO tallies (workflow, kind, topic, status, n)
    VALUES (NEW.workflow, 'event', NEW.topic, CASE WHEN NEW.status = 'pending' AND NEW.reserved_by <> '' THEN 'reserved' ELSE NEW.status END, 1)
    ON CONFLICT (workflow, kind, topic, status) DO UPDATE SET n = n + 1;
END;

-- /metrics no longer sums the ledger's reconcile attempts (it counts each
-- reconcile question as it is asked): the index that served the sum goes.
DROP INDEX IF EXISTS mutations_reconciled;
