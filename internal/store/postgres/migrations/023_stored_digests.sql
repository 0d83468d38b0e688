-- Issue 44: what keep executes or trusts is written with a digest
-- (SHA-256 of its fields, kt.StoredDigest) and checked whenever it is read.
-- The rows already stored get theirs in Go, in this migration's
-- transaction (sqldb.AfterMigration): the same code as SQLite's, so both compute one digest.
ALTER TABLE versions ADD COLUMN digest TEXT NOT NULL DEFAULT '';
ALTER TABLE grants ADD COLUMN digest TEXT NOT NULL DEFAULT '';
ALTER TABLE workflows ADD COLUMN digest TEXT NOT NULL DEFAULT '';
ALTER TABLE secrets ADD COLUMN digest TEXT NOT NULL DEFAULT '';
ALTER TABLE repairs ADD COLUMN digest TEXT NOT NULL DEFAULT '';
