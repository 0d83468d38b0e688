-- Issue 26: webhook deliveries (POST /hooks/{wf}/{name}). An accepted
-- delivery's id is accepted once: a retry of it is a duplicate.
CREATE TABLE IF NOT EXISTS deliveries (
  id BIGSERIAL PRIMARY KEY,
  workflow TEXT NOT NULL,
  webhook TEXT NOT NULL,
  delivery_id TEXT NOT NULL,
  status TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  inputs INTEGER NOT NULL DEFAULT 0,
  events INTEGER NOT NULL DEFAULT 0,
  received_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS deliveries_accepted ON deliveries (workflow, webhook, delivery_id) WHERE status = 'accepted';
CREATE INDEX IF NOT EXISTS deliveries_recent ON deliveries (workflow, webhook, id);
