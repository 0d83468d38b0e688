-- Issue 25: a write's ledger row is inserted in_flight and settled (to
-- applied, most often) by UPDATE … WHERE id=? AND status=?. PostgreSQL
-- planned that statement on the index of statuses rather than the primary
-- key: the generic plan it keeps for a prepared statement is made while
-- the table is small, where the two cost the same, and once ANALYZE has
-- run it believes in_flight rare. But every settled row leaves a dead
-- in_flight entry in that index until VACUUM, so each settlement read
-- dozens of dead entries and their heap pages (pg_stat_user_indexes over
-- one peer benchmark: 76 per UPDATE, 3 UPDATEs in 4 planned so).
-- The index now holds only the statuses keep looks rows up by and that
-- are not on that path: needs_reconcile (the scheduler) and the others
-- Recover reads at start-up; in_flight rows are found at start-up by one
-- sequential scan. The statuses are keeptype's MutationStatus values.
DROP INDEX IF EXISTS mutations_status;
CREATE INDEX IF NOT EXISTS mutations_unsettled ON mutations (status, created_at)
  WHERE status NOT IN ('in_flight', 'applied', 'skipped');
