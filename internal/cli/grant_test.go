package cli

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/daemon"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/testsink"
)

// A version never gets more than a person granted (issue 16): deployed
// without --grant, the quick start's first call waits with a card that
// says what to grant; keep grant allows it and the run goes on by itself;
// a later version that uses something new waits for that one only.
func TestAWorkflowCallsOnlyWhatWasGranted(t *testing.T) {
	dir, data := quickstart(t)
	wf := filepath.Join(dir, "workflow.js")
	r := keep(t, "deploy", "--data", data, wf)
	if r.code != 0 || !strings.Contains(r.out, "not yet granted: files.list, files.read, files.write, source:files") || !strings.Contains(r.out, "keep grant quickstart-orders") {
		t.Fatalf("deploy: %d %s %s", r.code, r.out, r.err)
	}
	r = keep(t, "status", "quickstart-orders", "--data", data)
	if !strings.Contains(r.out, "not yet granted: files.list") {
		t.Fatalf("status does not say what waits for a grant:\n%s", r.out)
	}
	r = keep(t, "run-now", "quickstart-orders", "--data", data)
	if r.code != ExitBlocked || !strings.Contains(r.out, "ctx.files.list is not granted to quickstart-orders") || !strings.Contains(r.out, "keep grant quickstart-orders") {
		t.Fatalf("the first call: %d\n%s%s", r.code, r.out, r.err)
	}
	if files, _ := os.ReadDir(filepath.Join(dir, "out")); len(files) != 0 {
		t.Fatalf("%d files written before anything was granted", len(files))
	}
	r = keep(t, "grant", "quickstart-orders", "--data", data)
	if r.code == 0 || !strings.Contains(r.err, "pass --yes") || !strings.Contains(r.out, "files.write") {
		t.Fatalf("keep grant without a terminal or --yes: %d %s %s", r.code, r.out, r.err)
	}
	r = keep(t, "grant", "quickstart-orders", "--yes", "--by", "ann", "--data", data)
	if r.code != 0 || !strings.Contains(r.out, "granted quickstart-orders: files.list, files.read, files.write, source:files") {
		t.Fatalf("keep grant: %d %s %s", r.code, r.out, r.err)
	}
	if files, _ := os.ReadDir(filepath.Join(dir, "out")); len(files) != 3 {
		t.Fatalf("%d confirmations after the grant, want 3 (the blocked run tries again by itself)", len(files))
	}
	// A new version that also calls http waits for that one only.
	src, _ := os.ReadFile(wf)
	os.WriteFile(wf, []byte(strings.Replace(string(src), "async mutate(ctx, prepared) {", "async mutate(ctx, prepared) {\n    if (false) await ctx.http.request({ url: \"http://127.0.0.1:9/x\", method: \"POST\" });", 1)), 0o644)
	r = keep(t, "deploy", "--data", data, wf)
	if r.code != 0 || !strings.Contains(r.out, "not yet granted: http.request POST 127.0.0.1:9 —") {
		t.Fatalf("the new version: %d %s %s", r.code, r.out, r.err)
	}
}

// Issue 23, findings 6 and 7: a grant names what a call reaches. A
// request whose URL is computed at run time is refused naming the method
// and host it reached; the grant the card offers lets exactly that
// through — a POST to another host is still refused — and a revoked
// grant blocks again. An old grant of the method alone still allows every
// host. Through the CLI against two real HTTP servers.
func TestAGrantLetsThroughExactlyWhatItNames(t *testing.T) {
	t.Parallel()
	a, b := testsink.New(), testsink.New()
	defer a.Close()
	defer b.Close()
	dir := t.TempDir()
	data, cfg := filepath.Join(dir, "data"), filepath.Join(dir, "keep.toml")
	os.WriteFile(cfg, []byte("[connectors.http]\nallow = [\""+a.Host()+"\", \""+b.Host()+"\"]\n"), 0o644)
	wf := filepath.Join(dir, "wf.js")
	os.WriteFile(wf, []byte(`export default Keep.workflow({ name: "reach", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    for (const [id, host] of [["a", "`+a.Host()+`"], ["b", "`+b.Host()+`"], ["c", "`+a.Host()+`"], ["d", "`+a.Host()+`"]]) {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id, title: "Job " + id })
      await ctx.publish("job", { messageId: id, inputId, payload: { host } })
    }
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: { url: ["http:/", e.payload.host, "write", e.messageId].join("/") } } },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: p.data.url, json: {} }) } }) } })`), 0o644)
	hostA, hostB := a.Host(), b.Host()
	r := keep(t, "deploy", "--data", data, "--config", cfg, wf)
	if r.code != 0 || strings.Contains(r.out, "http.request") {
		t.Fatalf("deploy: the reading cannot name the host, so nothing of http is offered: %d %s %s", r.code, r.out, r.err)
	}
	// Granting what the version names (its input source) lets it run, to
	// the request, whose grant is refused naming the host.
	r = keep(t, "grant", "reach", "--yes", "--data", data, "--config", cfg)
	wantA := "keep grant reach 'http.request POST " + hostA + "'"
	if !strings.Contains(r.out, "granted reach: source:system") || !strings.Contains(r.out, "ctx.http.request POST "+hostA+" is not granted to reach") || !strings.Contains(r.out, wantA) {
		t.Fatalf("the first call: %d\n%s%s", r.code, r.out, r.err)
	}
	if n := len(a.Writes()); n != 0 {
		t.Fatalf("%d writes before the grant", n)
	}
	card := keep(t, "status", "reach", "--json", "--data", data)
	if !strings.Contains(card.out, `"grantItem": "http.request POST `+hostA+`"`) {
		t.Fatalf("the card does not name the grant:\n%s", card.out)
	}
	// keep grant without names grants what the run was refused, exactly.
	r = keep(t, "grant", "reach", "--yes", "--by", "ann", "--data", data, "--config", cfg)
	if r.code != ExitBlocked || !strings.Contains(r.out, "granted reach: http.request POST "+hostA+"\n") {
		t.Fatalf("keep grant: %d %s %s", r.code, r.out, r.err)
	}
	// a's write went through; b's POST to the other host is refused.
	if n := len(a.Writes()); n != 1 {
		t.Fatalf("%d writes at %s after the grant, want 1", n, hostA)
	}
	r = keep(t, "status", "reach", "--data", data)
	if !strings.Contains(r.out, "ctx.http.request POST "+hostB+" is not granted") || len(b.Writes()) != 0 {
		t.Fatalf("a POST to another host (%d writes there):\n%s", len(b.Writes()), r.out)
	}
	// A typo is refused before anything changes.
	if r := keep(t, "grant", "reach", "--yes", "--data", data, "http.request post "+hostB); r.code == 0 || !strings.Contains(r.err, "capitals") {
		t.Fatalf("a method in lower case: %d %s %s", r.code, r.out, r.err)
	}
	if r := keep(t, "grant", "reach", "--data", data, "--revoke", "http.request POST nowhere.example"); r.code == 0 || !strings.Contains(r.err, "has no grant 'http.request POST nowhere.example'") || !strings.Contains(r.err, hostA) {
		t.Fatalf("revoking what was not granted: %d %s %s", r.code, r.out, r.err)
	}
	// Revoke a's grant, grant b's by name: b goes through, c (to a) blocks again.
	if r := keep(t, "grant", "reach", "--by", "ann", "--data", data, "--config", cfg, "--revoke", "http.request POST "+hostA); r.code != 0 || !strings.Contains(r.out, "revoked reach: http.request POST "+hostA) {
		t.Fatalf("revoke: %d %s %s", r.code, r.out, r.err)
	}
	if r := keep(t, "grant", "reach", "--yes", "--data", data, "--config", cfg, "http.request POST "+hostB); r.code != ExitBlocked {
		t.Fatalf("grant b: %d %s %s", r.code, r.out, r.err)
	}
	r = keep(t, "status", "reach", "--data", data)
	if len(b.Writes()) != 1 || len(a.Writes()) != 1 || !strings.Contains(r.out, "ctx.http.request POST "+hostA+" is not granted") {
		t.Fatalf("after the revoke: %d writes at a, %d at b (want 1, 1), and c blocked:\n%s", len(a.Writes()), len(b.Writes()), r.out)
	}
	// A grant of the method alone (the form of grants made before they
	// named targets) allows every host: c and d go through.
	if r := keep(t, "grant", "reach", "--yes", "--data", data, "--config", cfg, "http.request"); r.code != 0 {
		t.Fatalf("the old form: %d %s %s", r.code, r.out, r.err)
	}
	if n := len(a.Writes()); n != 3 {
		t.Fatalf("%d writes at a after the method was granted whole, want 3", n)
	}
	// A new version that no longer calls http shows the grants it leaves, with how to revoke them.
	src, _ := os.ReadFile(wf)
	os.WriteFile(wf, []byte(strings.Replace(string(src), `await ctx.http.request({ method: "POST", url: p.data.url, json: {} })`, `ctx.log(p.data.url)`, 1)), 0o644)
	r = keep(t, "deploy", "--data", data, "--config", cfg, wf)
	if r.code != 0 || !strings.Contains(r.out, "no longer used by this version, still granted: http.request — revoke it: keep grant reach --revoke 'http.request'") ||
		!strings.Contains(r.out, "still granted: http.request POST "+hostB) || strings.Contains(r.out, "still granted: source:system") {
		t.Fatalf("the version without http: %d %s %s", r.code, r.out, r.err)
	}
	// The decision log holds each grant and the revoke, with who decided.
	k, err := daemon.Open(daemon.Options{DataDir: data, ConfigFile: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	var ds []kt.Decision
	if err := k.Store.View(context.Background(), func(tx store.Tx) error {
		var err error
		ds, err = tx.DecisionList("reach", "")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var log []string
	for _, d := range ds {
		log = append(log, d.By+" "+d.Action+" "+d.Detail)
	}
	got := strings.Join(log, "\n")
	if !strings.Contains(got, "ann grant granted http.request POST "+hostA) || !strings.Contains(got, "ann revoke revoked http.request POST "+hostA) {
		t.Fatalf("the decision log:\n%s", got)
	}
}

// Issue 23 #7 for sql: an exec granted on one database reaches no other.
// The database comes from the event, so the run is refused naming it;
// `sql.exec a` lets the writes on a through, and the one on b waits.
// Through the CLI against two real SQLite databases.
func TestAnSQLGrantReachesOneDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data, cfg := filepath.Join(dir, "data"), filepath.Join(dir, "keep.toml")
	dbs := map[string]string{"a": filepath.Join(dir, "a.db"), "b": filepath.Join(dir, "b.db")}
	for _, p := range dbs {
		db, err := sql.Open("sqlite", p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`CREATE TABLE shipped (id TEXT)`); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	os.WriteFile(cfg, []byte("[connectors.sql.databases]\na = \"sqlite://"+dbs["a"]+"\"\nb = \"sqlite://"+dbs["b"]+"\"\n"), 0o644)
	wf := filepath.Join(dir, "wf.js")
	os.WriteFile(wf, []byte(`export default Keep.workflow({ name: "ship", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    for (const [id, db] of [["1", "a"], ["2", "b"], ["3", "a"]]) {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id, title: "Job " + id })
      await ctx.publish("job", { messageId: id, inputId, payload: { db } })
    }
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: { db: e.payload.db, id: e.messageId } } },
    async mutate(ctx, p) { await ctx.sql.exec({ db: p.data.db, sql: "INSERT INTO shipped (id) VALUES (?)", args: [p.data.id] }) } }) } })`), 0o644)
	rows := func(name string) int {
		db, err := sql.Open("sqlite", dbs[name])
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM shipped`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if r := keep(t, "deploy", "--grant", "--data", data, "--config", cfg, wf); r.code != 0 || strings.Contains(r.out, "sql.exec") {
		t.Fatalf("deploy: the database is the event's, so nothing of sql is granted: %d %s %s", r.code, r.out, r.err)
	}
	r := keep(t, "run-now", "ship", "--data", data, "--config", cfg)
	if r.code != ExitBlocked || !strings.Contains(r.out, "keep grant ship 'sql.exec a'") || rows("a") != 0 {
		t.Fatalf("the first exec: %d (%d rows in a)\n%s%s", r.code, rows("a"), r.out, r.err)
	}
	r = keep(t, "grant", "ship", "--yes", "--data", data, "--config", cfg, "sql.exec a")
	if r.code != ExitBlocked || !strings.Contains(r.out, "keep grant ship 'sql.exec b'") || rows("a") != 1 || rows("b") != 0 {
		t.Fatalf("after sql.exec a was granted: %d rows in a, %d in b (want 1, 0)\n%s%s", rows("a"), rows("b"), r.out, r.err)
	}
	// A read on a is not a write: sql.query a is another grant, and b still waits.
	if r := keep(t, "grant", "ship", "--yes", "--data", data, "--config", cfg, "sql.query b"); r.code != ExitBlocked || rows("b") != 0 {
		t.Fatalf("sql.query b let an exec through: %d rows in b\n%s%s", rows("b"), r.out, r.err)
	}
}
