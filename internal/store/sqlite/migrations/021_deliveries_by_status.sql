-- Issue 25: a delivery that is not accepted makes room for itself by
-- forgetting the oldest of its webhook's deliveries of that status
-- (DeliveryPrune). Accepted deliveries are never forgotten, so without an
-- index that leads with the status that DELETE read the webhook's whole
-- history on every refused or duplicate delivery (200,000 accepted rows:
-- 62 ms each).
CREATE INDEX IF NOT EXISTS deliveries_by_status ON deliveries (workflow, webhook, status, id);
