-- Issue 11 #15: every durable commit bumps this number, and keep also notes
-- it in keep.db.seq beside the database. A database whose number is behind
-- that note lost committed transactions (a deleted -wal).
CREATE TABLE IF NOT EXISTS commit_seq (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL);
INSERT OR IGNORE INTO commit_seq (id, seq) VALUES (1, 0);
