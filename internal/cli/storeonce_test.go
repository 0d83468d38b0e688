package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/store/backend"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
)

// TestACommandOpensTheStoreOnce: a command run without keep serve opens
// the data directory's store once — the action, the engine that carries
// it out and the read after share it (issue 41: resume, run-now and
// resolve opened it three times, keep grant four). Opening a store runs
// its migrations' checks and starts a pool; each command here is counted
// on the real keep.db (backend.Opens).
func TestACommandOpensTheStoreOnce(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		dir, data := quickstart(t)
		opensOnce(t, dir, []string{"--data", data}, backend.Default(data))

		// keep run owns its engine; a blocked run resolved from the CLI.
		_, _, data, r := blockedHook(t, "")
		if r.code != ExitBlocked {
			t.Fatalf("keep run: exit %d\n%s%s", r.code, r.out, r.err)
		}
		db := backend.Default(data)
		if n := backend.Opens(db); n != 1 {
			t.Errorf("keep run opened the store %d times, want once", n)
		}
		once := counter(t, []string{"--data", data}, db)
		var st []struct{ BlockedRunID string }
		if err := json.Unmarshal([]byte(once(0, "status", "--json").out), &st); err != nil || len(st) != 1 || st[0].BlockedRunID == "" {
			t.Fatalf("keep status --json: %+v %v", st, err)
		}
		if r := once(0, "resolve", st[0].BlockedRunID, "--skip"); !strings.Contains(r.out, "carried out; hook is idle") {
			t.Fatalf("keep resolve did not carry the run out:\n%s", r.out)
		}
	})
	// On PostgreSQL an open is a pool of connections; the engine that
	// carries a decision out follows the database's clock and listens for
	// other nodes' commits on the same store.
	t.Run("postgres", func(t *testing.T) {
		pg := pgtest.FreshSchema(t)
		dir, data := quickstart(t)
		loc, err := backend.Parse(pg, data)
		if err != nil {
			t.Fatal(err)
		}
		opensOnce(t, dir, []string{"--data", data, "--store", pg}, loc)
	})
}

// counter runs a command with flags (the data directory, the store) and
// checks that it opened the store at db once, and exited with want.
func counter(t *testing.T, flags []string, db backend.Location) func(want int, args ...string) result {
	return func(want int, args ...string) result {
		t.Helper()
		before := backend.Opens(db)
		r := keep(t, append(args, flags...)...)
		if r.code != want {
			t.Fatalf("keep %s: exit %d, want %d\n%s%s", strings.Join(args, " "), r.code, want, r.out, r.err)
		}
		if n := backend.Opens(db) - before; n != 1 {
			t.Errorf("keep %s opened the store %d times, want once", strings.Join(args, " "), n)
		}
		return r
	}
}

// opensOnce runs the quick start's workflow through deploy, a grant and
// people's actions, each opening the store once.
func opensOnce(t *testing.T, dir string, flags []string, db backend.Location) {
	once := counter(t, flags, db)
	once(0, "deploy", filepath.Join(dir, "workflow.js"))
	once(0, "status")
	// The first call waits for a grant: carried out, and blocked.
	once(ExitBlocked, "run-now", "quickstart-orders")
	// The preview of what it grants, the grant, the blocked run carried
	// out, where it stands.
	if r := once(0, "grant", "quickstart-orders", "--yes"); !strings.Contains(r.out, "carried out; quickstart-orders is idle") {
		t.Fatalf("keep grant did not carry the run out:\n%s", r.out)
	}
	once(0, "pause", "quickstart-orders")
	once(0, "resume", "quickstart-orders")
	once(0, "prune", "--dry-run")
	once(0, "runs", "quickstart-orders")
}
