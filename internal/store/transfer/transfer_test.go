package transfer_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/postgres"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/store/sqlite"
	"github.com/keep-run/keep/internal/store/transfer"
)

// notCarried are the store's tables keep migrate leaves behind, each with
// why. Any other table must be carried: a table added to the store and
// not to transfer fails TestEveryTableIsCarried.
var notCarried = map[string]string{
	"leases":            "the old store's nodes' leases: the new store's nodes take the workflows afresh",
	"nodes":             "the old store's running nodes",
	"schema_migrations": "each store's own schema history",
	"commit_seq":        "the SQLite store's own commit counter (its lost-transaction check)",
}

// fill puts at least one row into every table a store has.
func fill(t *testing.T, s store.Store) {
	t.Helper()
	raw := json.RawMessage(`{"a":1}`)
	err := s.Update(context.Background(), func(tx store.Tx) error {
		v := kt.Version{Workflow: "w", Major: 1, Script: "export default 1", CreatedAt: 1}
		if err := tx.VersionInsert(&v); err != nil {
			return err
		}
		steps := []func() error{
			func() error {
				return tx.WorkflowPut(kt.Workflow{Name: "w", ActiveVersion: v.ID, FilesRoot: "/srv", CreatedAt: 1, UpdatedAt: 2})
			},
			func() error {
				return tx.HandlerPut(kt.Handler{Workflow: "w", Name: "p", Type: kt.HandlerType("producer"), State: raw, UpdatedAt: 1})
			},
			func() error {
				return tx.InputPut(kt.Input{ID: "in-1", Workflow: "w", Key: "files:file:a", Source: "files", Type: "file", ExternalID: "a", Title: "A", CurrentAttempt: 1})
			},
			func() error {
				return tx.ItemAttemptPut(kt.ItemAttempt{ItemID: "in-1", Attempt: 1, Version: v.ID, StartedAt: 1, UpdatedAt: 1})
			},
			func() error {
				_, err := tx.EventPublish(&kt.Event{Workflow: "w", Topic: "t", MessageID: "m1", Payload: raw, Status: kt.EventStatus("pending"), CausedBy: []string{"in-1"}, Attempt: 1, CreatedAt: 1, UpdatedAt: 1})
				return err
			},
			func() error {
				return tx.RunPut(kt.Run{ID: "run-1", Workflow: "w", Version: v.ID, Handler: "p", HandlerType: kt.HandlerType("producer"), Status: kt.Status("done")})
			},
			func() error {
				return tx.MutationPut(kt.Mutation{ID: "mut-1", Workflow: "w", RunID: "run-1", Handler: "p", Tool: "http", Method: "request", Params: raw, Target: "POST http://x/"})
			},
			func() error {
				return tx.DecisionAdd(kt.Decision{Workflow: "w", RunID: "run-1", Action: "approve", By: "alice", Detail: "approved", At: 3})
			},
			func() error {
				return tx.BlockedSpanAdd("w", store.BlockedSpan{RunID: "run-1", Handler: "p", From: 2, To: 3})
			},
			func() error {
				return tx.GrantAdd(kt.Grant{Workflow: "w", Item: "http.request", GrantedBy: "alice", GrantedAt: 4})
			},
			func() error {
				return tx.RepairPut(kt.Repair{ID: "rep-1", Workflow: "w", RunID: "run-1", Attempt: 1, Status: kt.RepairStatus("held"), FromVersion: v.ID, Script: "x", CreatedAt: 5, UpdatedAt: 5})
			},
			func() error {
				return tx.DeliveryAdd(&kt.Delivery{Workflow: "w", Webhook: "github", DeliveryID: "d-1", Status: kt.DeliveryAccepted, Inputs: 1, Events: 1, ReceivedAt: 6})
			},
			func() error {
				return tx.DeliveryAdd(&kt.Delivery{Workflow: "w", Webhook: "github", DeliveryID: "d-2", Status: kt.DeliveryHeld, HeldFor: kt.HeldForSecret + ":S", Request: json.RawMessage(`{"body":"e30="}`), ReceivedAt: 7})
			},
			func() error {
				return tx.ConnectionPut(kt.Connection{Provider: "google", Account: "a@example.com", Sealed: []byte{1, 2}, CreatedAt: 1, UpdatedAt: 1})
			},
			func() error {
				return tx.SecretPut(kt.Secret{Name: "crm_token", Sealed: []byte{3, 4}, Hosts: []string{"api.crm.example"}, CreatedAt: 1, UpdatedAt: 1})
			},
			func() error { return tx.NoticePut("run-1", "webhook", 6) },
			func() error { return tx.LeasePut(kt.Lease{Workflow: "w", Node: "n1", Token: 1, ExpiresAt: 9}) },
			func() error { return tx.NodePut(kt.Node{ID: "n1", SeenAt: 9}) },
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// rowsPerTable lists a store's tables, as its database lists them, and
// counts each one's rows.
func rowsPerTable(t *testing.T, db *sql.DB, list string) map[string]int {
	t.Helper()
	rows, err := db.Query(list)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		rows.Scan(&name)
		tables = append(tables, name)
	}
	rows.Close()
	if len(tables) < 10 {
		t.Fatalf("the store lists only %v", tables)
	}
	out := map[string]int{}
	for _, table := range tables {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM "` + table + `"`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[table] = n
	}
	return out
}

const sqliteTables = `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`
const pgTables = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`

// keep migrate carries every table of the store (issue 23 #8: grants,
// repairs and notices were dropped, so every workflow blocked after the
// move and notices went out again), into SQLite and into PostgreSQL.
func TestEveryTableIsCarried(t *testing.T) {
	dir := t.TempDir()
	srcPath := filepath.Join(dir, "keep.db")
	src, err := sqlite.Open(srcPath)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	fill(t, src)
	srcDB, err := sql.Open("sqlite", srcPath)
	if err != nil {
		t.Fatal(err)
	}
	defer srcDB.Close()
	before := rowsPerTable(t, srcDB, sqliteTables)
	var names []string
	for table, n := range before {
		names = append(names, table)
		if _, skip := notCarried[table]; !skip && n == 0 {
			t.Errorf("the store's table %s has no row in this test's source: fill it in fill(), and carry it in transfer.Copy (or say in notCarried why not)", table)
		}
	}
	sort.Strings(names)

	check := func(t *testing.T, dst store.Store, db *sql.DB, list string) {
		if _, err := transfer.Copy(context.Background(), src, dst); err != nil {
			t.Fatal(err)
		}
		// The installation keeps its id (its idempotency keys stay its own).
		var ids [2]string
		for i, st := range []store.Store{src, dst} {
			if err := st.View(context.Background(), func(tx store.Tx) error {
				var err error
				ids[i], err = tx.InstallationID()
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		if ids[0] != ids[1] {
			t.Errorf("installation id %q after keep migrate, the source's is %q", ids[1], ids[0])
		}
		// A secret keeps the hosts it may go to (issue 38 #4).
		if err := dst.View(context.Background(), func(tx store.Tx) error {
			x, err := tx.SecretGet("crm_token")
			if err == nil && (len(x.Hosts) != 1 || x.Hosts[0] != "api.crm.example") {
				t.Errorf("the secret's hosts after keep migrate: %v", x.Hosts)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		// A held delivery comes with its request: the copy takes it.
		if err := dst.View(context.Background(), func(tx store.Tx) error {
			held, err := tx.DeliveryHeld("w", "", 0)
			if err != nil || len(held) != 1 {
				return fmt.Errorf("held deliveries after keep migrate: %+v %v", held, err)
			}
			d, err := tx.DeliveryHeldGet(held[0].ID)
			if err != nil || string(d.Request) != `{"body":"e30="}` || d.HeldFor != kt.HeldForSecret+":S" {
				return fmt.Errorf("the held delivery after keep migrate: %+v %v", d, err)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
		after := rowsPerTable(t, db, list)
		for _, table := range names {
			if _, skip := notCarried[table]; skip {
				continue
			}
			if after[table] != before[table] {
				t.Errorf("table %s: %d rows in the source, %d after keep migrate", table, before[table], after[table])
			}
		}
		for table := range after {
			if _, known := before[table]; !known {
				if _, skip := notCarried[table]; !skip {
					t.Errorf("table %s exists only in the destination's store: fill and carry it too", table)
				}
			}
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(dir, "dest.db")
		dst, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer dst.Close()
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		check(t, dst, db, sqliteTables)
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.FreshSchema(t)
		dst, err := postgres.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer dst.Close()
		db, err := sql.Open("pgx", url)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		check(t, dst, db, pgTables)
	})
}
