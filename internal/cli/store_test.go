package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/daemon"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
)

// --store names the store in one place: another SQLite file is used by
// every command (the data directory keeps no keep.db), and a store this
// version cannot open is refused with what to do, nothing written.
func TestStoreURLChoosesTheStore(t *testing.T) {
	t.Parallel()
	dir, data := quickstart(t)
	db := filepath.Join(t.TempDir(), "elsewhere.db")
	r := keep(t, "run", "--data", data, "--store", "sqlite://"+db, filepath.Join(dir, "workflow.js"))
	if r.code != 0 || strings.Count(r.out, "applied") != 3 {
		t.Fatalf("run on --store: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("the store file was not used: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "keep.db")); err == nil {
		t.Fatal("keep.db was created in the data directory although --store names another file")
	}
	r = keep(t, "status", "--data", data, "--store", "sqlite://"+db)
	if r.code != 0 || !strings.Contains(r.out, "quickstart") {
		t.Fatalf("status on --store: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	r = keep(t, "status", "--data", data, "--store", "mysql://root@localhost/keep")
	if r.code == 0 || !strings.Contains(r.err, `unknown kind of store "mysql"`) {
		t.Fatalf("an unknown store: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	r = keep(t, "run", "--data", data, "--store", "postgres://keep:pw@db.invalid/test", filepath.Join(dir, "workflow.js"))
	if r.code == 0 || !strings.Contains(r.err, "cannot be reached") || strings.Contains(r.err, ":pw@") {
		t.Fatalf("an unreachable postgres: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
}

// The quick start on PostgreSQL: the same commands, the same outputs;
// several engines may share the database (issue 14).
func TestQuickstartOnPostgres(t *testing.T) {
	t.Parallel()
	pg := pgtest.FreshSchema(t)
	dir, data := quickstart(t)
	r := keep(t, "run", "--data", data, "--store", pg, filepath.Join(dir, "workflow.js"))
	if r.code != 0 || strings.Count(r.out, "applied") != 3 {
		t.Fatalf("run on PostgreSQL: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if _, err := os.Stat(filepath.Join(data, "keep.db")); err == nil {
		t.Fatal("keep.db was created although the store is PostgreSQL")
	}
	r = keep(t, "run", "--data", data, "--store", pg, filepath.Join(dir, "workflow.js"))
	if r.code != 0 || strings.Count(r.out, "applied") != 3 {
		t.Fatalf("a second run wrote again: %s", r.out)
	}
	if out, _ := os.ReadDir(filepath.Join(dir, "out")); len(out) != 3 {
		t.Fatalf("%d confirmations, want 3", len(out))
	}
	// Several engines share a PostgreSQL database (each steps what it
	// holds the lease of).
	for i := 0; i < 2; i++ {
		k, err := daemon.Open(daemon.Options{DataDir: t.TempDir(), Store: pg})
		if err != nil {
			t.Fatalf("engine %d on one PostgreSQL database: %v", i+1, err)
		}
		defer k.Close()
		if err := k.Scheduler.Heartbeat(context.Background(), kt.Node{Addr: fmt.Sprintf("127.0.0.1:%d", 9000+i), StartedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// keep status and the API list the nodes.
	if r := keep(t, "status", "--data", data, "--store", pg); !strings.Contains(r.out, "NODES") || !strings.Contains(r.out, "127.0.0.1:9000") || !strings.Contains(r.out, "127.0.0.1:9001") {
		t.Fatalf("status does not list the nodes:\n%s", r.out)
	}
	r = keep(t, "status", "--data", data, "--store", pg)
	if r.code != 0 || !strings.Contains(r.out, "quickstart-orders") {
		t.Fatalf("status beside a running engine: %d %s %s", r.code, r.out, r.err)
	}
}

// keep run, keep deploy and keep serve use one files root per workflow:
// the script's folder (or --files-root), recorded at deploy; keep serve
// reads and writes there too, not in DATA/files (issue 12 #3).
func TestTheFilesRootIsRecordedAtDeployAndUsedByServe(t *testing.T) {
	t.Parallel()
	dir, data := quickstart(t)
	r := keep(t, "deploy", "--grant", "--data", data, filepath.Join(dir, "workflow.js"))
	if r.code != 0 || !strings.Contains(r.out, "its files connector reads and writes "+dir) {
		t.Fatalf("deploy: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	// What keep serve does: the engine on the data directory with its own
	// default root, DATA/files.
	k, err := daemon.Open(daemon.Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Scheduler.RunUntilIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	k.Close()
	if out, _ := os.ReadDir(filepath.Join(dir, "out")); len(out) != 3 {
		t.Fatalf("keep serve wrote %d confirmations in the script's folder, want 3", len(out))
	}
	if in, err := os.ReadDir(filepath.Join(data, "files")); err == nil && len(in) > 0 {
		t.Fatalf("keep serve used DATA/files: %v", in)
	}
	r = keep(t, "status", "--data", data)
	if r.code != 0 || !strings.Contains(r.out, dir) {
		t.Fatalf("status does not show the files root:\n%s", r.out)
	}
	// --files-root moves it, for both.
	other := t.TempDir()
	r = keep(t, "deploy", "--grant", "--data", data, "--files-root", other, "--json", filepath.Join(dir, "workflow.js"))
	var rep struct {
		Unchanged bool
		FilesRoot string
	}
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil || !rep.Unchanged || rep.FilesRoot != other {
		t.Fatalf("deploy --files-root: %v %s", err, r.out)
	}
}

// keep migrate moves an installation from its SQLite file to PostgreSQL:
// everything is there, nothing is done twice afterwards, the source is
// left as it was; a source a keep serve holds, a non-empty destination and
// the same store twice are refused (issue 14).
func TestMigrateFromSQLiteToPostgres(t *testing.T) {
	t.Parallel()
	pg := pgtest.FreshSchema(t)
	dir, data := quickstart(t)
	wf := filepath.Join(dir, "workflow.js")
	if r := keep(t, "run", "--data", data, wf); r.code != 0 {
		t.Fatalf("run: %s %s", r.out, r.err)
	}
	key := "files:file:incoming/order-1001.json"
	if r := keep(t, "reprocess", "--data", data, "--by", "alice", key); r.code != 0 {
		t.Fatalf("reprocess: %s %s", r.out, r.err)
	}
	before := keep(t, "outputs", "--data", data, "quickstart-orders", "--json").out
	if r := keepIn(t, "tok-carried-1234", "secret", "set", "--data", data, "api"); r.code != 0 {
		t.Fatalf("secret set: %s %s", r.out, r.err)
	}

	// A running engine holds the source.
	k, err := daemon.Open(daemon.Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	if r := keep(t, "migrate", "--data", data, "--to", pg); r.code == 0 || !strings.Contains(r.err, "another keep process") {
		k.Close()
		t.Fatalf("migrate beside a running engine: %d %s %s", r.code, r.out, r.err)
	}
	k.Close()
	r := keep(t, "migrate", "--data", data, "--to", pg, "--json")
	var n struct{ Workflows, Versions, Items, Attempts, Events, Runs, Mutations, Decisions int }
	if err := json.Unmarshal([]byte(r.out), &n); r.code != 0 || err != nil || n.Workflows != 1 || n.Items != 3 || n.Attempts != 4 || n.Mutations != 4 || n.Decisions < 1 {
		t.Fatalf("migrate: exit %d %v\n%s\n%s", r.code, err, r.out, r.err)
	}
	if r := keep(t, "migrate", "--data", data, "--to", pg); r.code == 0 || !strings.Contains(r.err, "not empty") {
		t.Fatalf("migrate into a non-empty store: %d %s", r.code, r.err)
	}
	if r := keep(t, "migrate", "--data", data, "--to", "sqlite://"+filepath.Join(data, "keep.db")); r.code != exitUsageCode {
		t.Fatalf("migrate into itself: %d %s", r.code, r.err)
	}
	if r := keep(t, "secret", "list", "--data", data, "--store", pg); r.code != 0 || !strings.Contains(r.out, "api") {
		t.Fatalf("the secrets after the move: %d %s %s", r.code, r.out, r.err)
	}
	// On PostgreSQL: the same outputs, and running again writes nothing.
	if after := keep(t, "outputs", "--data", data, "--store", pg, "quickstart-orders", "--json").out; after != before {
		t.Fatalf("the outputs differ after the move:\n%s\nvs\n%s", before, after)
	}
	r = keep(t, "run", "--data", data, "--store", pg, wf)
	if r.code != 0 || strings.Count(r.out, "applied") != 4 {
		t.Fatalf("run on PostgreSQL after the move: %d\n%s\n%s", r.code, r.out, r.err)
	}
	if out, _ := os.ReadDir(filepath.Join(dir, "out")); len(out) != 3 {
		t.Fatalf("%d confirmation files, want 3", len(out))
	}
	if r := keep(t, "events", "--data", data, "--store", pg, "quickstart-orders"); !strings.Contains(r.out, "order.received") {
		t.Fatalf("events after the move: %s", r.out)
	}
}
