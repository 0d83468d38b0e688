-- /metrics' keep_reconcile_attempts_total summed reconcile_attempts over
-- every mutation the ledger ever recorded: the one statement of a scrape
-- that read the ledger's rows themselves (payloads and results included),
-- not an index. Only a mutation that went through reconciliation has
-- attempts, so the sum reads those (Counts says reconcile_attempts > 0 in
-- its text).
CREATE INDEX IF NOT EXISTS mutations_reconciled ON mutations (reconcile_attempts) WHERE reconcile_attempts > 0;
