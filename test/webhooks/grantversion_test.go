package webhooks

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/testbin"
)

// A delivery held for a grant its handler was refused (grant:ITEM) is
// taken once a new version is active, as a delivery held for a failed
// handler is: a version whose handler no longer needs that grant takes
// it (accepted, written once at the sink) — it is not held for ever for
// a grant nothing asks for any more; one that still needs it holds it
// again, still saying the grant (issue 41, after ak3). A hold written
// before holds named their version ("grant:ITEM" alone) keeps the old
// rule: held until the grant is given.
func TestADeliveryHeldForAGrantIsTakenByANewVersion(t *testing.T) {
	t.Run("no longer needs it", func(t *testing.T) { heldForAGrantThenDeployed(t, false, false) })
	t.Run("still needs it", func(t *testing.T) { heldForAGrantThenDeployed(t, true, false) })
	t.Run("held before holds named their version", func(t *testing.T) { heldForAGrantThenDeployed(t, false, true) })
}

func heldForAGrantThenDeployed(t *testing.T, stillNeeds, old bool) {
	k, good := heldServedWithItsSecret(t)
	k.wantHeld(k.to("gh", "g", good), "source:http")
	first := k.held()
	if len(first.Held) != 1 || !strings.HasPrefix(first.Held[0].HeldFor, "grant:source:http@") {
		t.Fatalf("held before the deploy: %+v", first.Held)
	}
	if old {
		k.heldForAsBefore(first.Held[0].Record, "grant:source:http")
	}
	src := k.heldSource(false) + "\n// version 2\n"
	deploy := []string{"deploy", k.path("wf2.js")}
	if !stillNeeds {
		// The handler registers its inputs from another source, which the
		// deploy grants with the rest of the version's uses; source:http
		// is never granted.
		src = strings.NewReplacer(`source: "http"`, `source: "email"`, `type: "webhook"`, `type: "message"`).Replace(src)
		deploy = []string{"deploy", "--grant", k.path("wf2.js")}
	}
	k.write("wf2.js", src)
	if out, err := k.keep("", deploy...); err != nil {
		t.Fatalf("keep deploy: %v\n%s", err, out)
	}
	if stillNeeds {
		// Taken with the new version, refused the grant again: held again
		// for it, under the new version.
		if !within(func() bool {
			v := k.held()
			return len(v.Held) == 1 && v.Held[0].HeldFor != first.Held[0].HeldFor
		}) {
			t.Fatalf("the delivery held for source:http was not taken with the new version: %+v", k.held().Held)
		}
		v := k.held()
		if h := v.Held[0]; !strings.HasPrefix(h.HeldFor, "grant:source:http") || !strings.Contains(h.Reason, "source:http") {
			t.Fatalf("held again, but not for the grant the new version still needs: %+v", h)
		}
		if st, _ := v.statusOf("d-g"); st != "held" {
			t.Fatalf("status %q, want held", st)
		}
		time.Sleep(2 * time.Second) // a take would write by now
		if n := k.writesTo("/write/g"); n != 0 {
			t.Fatalf("written %d times while its grant is not given", n)
		}
		return
	}
	if old {
		if within(func() bool { st, _ := k.held().statusOf("d-g"); return st != "held" }) {
			st, reason := k.held().statusOf("d-g")
			t.Fatalf("a delivery held grant:source:http (no version) was taken without its grant: %s %q", st, reason)
		}
		if v := k.held(); len(v.Held) != 1 || v.Held[0].HeldFor != "grant:source:http" {
			t.Fatalf("held: %+v", v.Held)
		}
		if out, err := k.keep("", "grant", "held", "source:http"); err != nil {
			t.Fatalf("keep grant: %v\n%s", err, out)
		}
	}
	if !within(func() bool { st, _ := k.held().statusOf("d-g"); return st == "accepted" }) {
		st, reason := k.held().statusOf("d-g")
		t.Fatalf("the delivery held for source:http, which the deployed version no longer needs, was not taken: %s %q; held: %+v", st, reason, k.held().Held)
	}
	if v := k.held(); len(v.Held) != 0 {
		t.Fatalf("still held: %+v", v.Held)
	}
	testbin.WaitFor(t, "its write", func() bool { return k.writesTo("/write/g") >= 1 }, k.logs)
	time.Sleep(2 * time.Second) // a second take would write by now
	if n := k.writesTo("/write/g"); n != 1 {
		t.Fatalf("written %d times", n)
	}
}

// heldForAsBefore writes held_for of held record rec as keep wrote it
// before holds for a grant named their version.
func (k *keep) heldForAsBefore(rec int64, heldFor string) {
	k.t.Helper()
	db, err := sql.Open("sqlite", "file:"+k.path("data/keep.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		k.t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(`UPDATE deliveries SET held_for=? WHERE id=? AND status='held'`, heldFor, rec)
	if err != nil {
		k.t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		k.t.Fatalf("rewrote %d held deliveries (record %d), want 1", n, rec)
	}
}
