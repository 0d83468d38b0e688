-- Issue 44 #1: history bounded by a policy ([retention] in keep.toml). The
-- bodies of finished work (a run's trace and results, an event's payload,
-- a ledger row's params and result) are dropped past the horizon; the row
-- stays (its identity: what makes work idempotent) with pruned_at set. The
-- pruner finds what is left to prune by the partial indexes, oldest first,
-- without reading the rows it pruned before.
ALTER TABLE runs ADD COLUMN pruned_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN pruned_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE mutations ADD COLUMN pruned_at INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS runs_unpruned ON runs (finished_at, id) WHERE pruned_at = 0;
CREATE INDEX IF NOT EXISTS events_unpruned ON events (updated_at, id) WHERE pruned_at = 0;
CREATE INDEX IF NOT EXISTS mutations_unpruned ON mutations (updated_at, id) WHERE pruned_at = 0;
CREATE INDEX IF NOT EXISTS deliveries_with_request ON deliveries (received_at, id) WHERE request <> '';
