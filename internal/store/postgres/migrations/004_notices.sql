-- Issue 16: the notices keep sent a person (a blocked run, a daily
-- digest), so a restart does not send one again.
CREATE TABLE IF NOT EXISTS notices (
  key TEXT NOT NULL,
  channel TEXT NOT NULL,
  sent_at BIGINT NOT NULL,
  PRIMARY KEY (key, channel)
);
