-- Issue 25: a step's transaction takes its locks and checks its lease in
-- one statement that fails when the lease is no longer the step's, so the
-- check needs no answer of its own: it is sent in one pipeline with the
-- transaction's first reads, or with its writes and COMMIT, and a fenced
-- step's transaction is aborted by PostgreSQL itself (its COMMIT becomes a
-- ROLLBACK). The writers' lock is taken shared first, then the workflow's
-- lease row (FOR NO KEY UPDATE: a workflow's writers are serialized on it).
-- SQLSTATE KEEPF is how keep tells this failure from others.
CREATE FUNCTION keep_fence(writer_lock integer, wf text, want_node text, want_token bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  held_node text;
  held_token bigint;
BEGIN
  PERFORM pg_advisory_xact_lock_shared(writer_lock, hashtext(current_schema()));
  SELECT node, token INTO held_node, held_token FROM leases WHERE workflow = wf FOR NO KEY UPDATE;
  IF NOT FOUND OR held_node <> want_node OR held_token <> want_token THEN
    RAISE EXCEPTION USING ERRCODE = 'KEEPF',
      MESSAGE = format('%s: this node holds token %s, the store %s held by %s', wf, want_token, coalesce(held_token, 0), coalesce(held_node, ''));
  END IF;
END
$$;

-- keep_changed fails a transaction whose conditional write changed no row
-- (a run written since its writer read it: store.ErrConflict), so that
-- write needs no answer of its own either and goes with the COMMIT.
-- SQLSTATE KEEPC.
CREATE FUNCTION keep_changed(n bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF n = 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'KEEPC', MESSAGE = 'the row was changed by another writer';
  END IF;
END
$$;
