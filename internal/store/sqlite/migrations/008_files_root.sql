-- Issue 12 #3: the folder a workflow's files connector is rooted at, chosen
-- when it is deployed (the script's folder, or --files-root), so that
-- keep run and keep serve read and write the same files. '' for
-- workflows deployed before: keep serve's own root.
ALTER TABLE workflows ADD COLUMN files_root TEXT NOT NULL DEFAULT '';
