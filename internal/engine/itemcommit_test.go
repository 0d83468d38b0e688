package engine_test

import (
	"database/sql"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
)

// withItem's transaction (the run, the item, its attempt) fails at its
// end — here the attempt's row, refused by the database, a write
// PostgreSQL is sent with the COMMIT — after the run's write was queued.
// Nothing of it is stored, so the run keeps the revision it had: its
// failure is saved without keep taking the failed write for a person's
// decision that came in meanwhile (none did).
func TestAWithItemWhoseCommitFailsLeavesTheRunAsStored(t *testing.T) {
	url := pgtest.FreshSchema(t)
	e := newEnvOn(t, testPolicy, nil, url)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE FUNCTION refuse_attempt() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF EXISTS (SELECT 1 FROM item_attempts WHERE item_id <> NEW.item_id) THEN RAISE EXCEPTION 'item_attempts refused by the test'; END IF; RETURN NEW; END $$;
CREATE TRIGGER refuse_attempt BEFORE INSERT ON item_attempts FOR EACH ROW EXECUTE FUNCTION refuse_attempt()`); err != nil {
		t.Fatal(err)
	}
	writeInbox(t, e, "a", "b") // the second item's attempt is refused
	wf := e.deploy(itemScript("", `return`))
	e.settle()
	var runs []kt.Run
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		var err error
		runs, err = tx.RunList(wf, 10)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(runs) == 0 {
		t.Fatal("no run")
	}
	for _, r := range runs {
		if strings.Contains(string(r.Trace), "a person's decision") {
			t.Errorf("run %s (%s, %s): its trace says a person decided while it ran; no one did:\n%s", r.ID, r.Status, r.ErrorMessage, r.Trace)
		}
		t.Logf("run %s %s %s", r.ID, r.Status, r.ErrorMessage)
	}
}
