-- Issue 38 #4: a secret goes only to the hosts a person scoped it to
-- (keep secret set NAME --host HOST). hosts is a JSON array of hosts as a
-- grant names them; '[]' (every secret set before) goes nowhere until a
-- person names its hosts: a call that would send it waits with a card
-- that says keep secret scope NAME --host HOST.
ALTER TABLE secrets ADD COLUMN hosts TEXT NOT NULL DEFAULT '[]';
