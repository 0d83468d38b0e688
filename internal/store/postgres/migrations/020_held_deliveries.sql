-- Issue 40 #1: a webhook delivery keep cannot take for a reason of its own
-- (the webhook not deployed yet, its secret not set, its source not
-- granted) is held: status 'held', what it waits for, and the request as
-- received, taken once the reason is gone. The takers find the workflows
-- that hold any by the partial index.
ALTER TABLE deliveries ADD COLUMN IF NOT EXISTS held_for TEXT NOT NULL DEFAULT '';
ALTER TABLE deliveries ADD COLUMN IF NOT EXISTS request TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS deliveries_held ON deliveries (workflow, webhook, id) WHERE status = 'held';
