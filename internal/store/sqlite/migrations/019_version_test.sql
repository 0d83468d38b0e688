-- Issue 26 #4: the workflow's test file (workflow.test.js beside the
-- script) as it was at the version's deploy; a Maintainer repair must pass
-- it before it is activated. '' when the workflow had none.
ALTER TABLE versions ADD COLUMN test TEXT NOT NULL DEFAULT '';
