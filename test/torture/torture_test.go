// Package torture kills a real `keep serve` over and over — SIGKILL at
// random moments and exits at each durable step — while it works through a
// workload of several workflows, and checks keep's promises after every
// kill: no duplicate write at the sink, nothing lost, never two runs of one
// workflow, ledgers that agree, an intact database.
//
//	go test ./test/torture                          # short (CI)
//	go test ./test/torture -torture.kills=500 -timeout 30m
package torture

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	_ "github.com/keep-run/keep/internal/connector/builtin" // registers the connectors' tables
	"github.com/keep-run/keep/internal/connector/email"
	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/backend"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testmail"
	"github.com/keep-run/keep/internal/testsink"
	_ "modernc.org/sqlite"
)

var (
	kills = flag.Int("torture.kills", defaultKills(), "how many times to kill keep (default 25 with KEEP_TEST_HEAVY=1, as .ci/run sets, else 8)")
	seed  = flag.Int64("torture.seed", 0, "random seed (0: time-based; printed on failure)")
)

var keepBin string

// defaultKills is the torture of `go test ./...`: 8 kills for a newcomer's
// run (kills at random moments and exits at random durable steps, then the
// final settle and check), 25 in CI's, and .ci/run's own torture steps run
// 150 (issue 41).
func defaultKills() int {
	if testbin.HeavyRun() {
		return 25
	}
	return 8
}

func TestMain(m *testing.M) {
	flag.Parse()
	testbin.Main(m, &keepBin)
}

// workflow writes one script: a producer turning inbox files into inputs and
// one or two consumers doing the writes.
func workflow(name, sinkURL string, probe, chain bool) string {
	rec := ""
	if probe {
		rec = `, reconcile: { url: "` + sinkURL + `/writes/{idempotencyKey}" }`
	}
	second, publishes, next := "", "", ""
	topics := `"in": {}`
	if chain {
		topics += `, "done": {}`
		publishes = `publishes: ["done"],`
		next = `async next(ctx, p, r) { if (r.status === "applied") await ctx.publish("done", { messageId: "done-" + p.data.id, payload: { id: p.data.id } }) },`
		second = `,
    archive: Keep.consumer({ subscribe: ["done"],
      async prepare(ctx) { const [e] = await ctx.peek("done"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "done", ids: [e.messageId] }], data: e.payload } },
      async mutate(ctx, p) { await ctx.files.write({ path: "out/` + name + `/" + p.data.id + ".txt", content: "archived " + p.data.id }) },
    })`
	}
	return `export default Keep.workflow({
  name: "` + name + `",
  topics: { ` + topics + ` },
  producers: { poll: { publishes: ["in"], schedule: { interval: "1s" }, handler: async (ctx, state) => {
    for (const f of await ctx.files.list({ dir: "inbox-` + name + `", glob: "*.json" })) {
      const id = f.name.replace(".json", "")
      const inputId = ctx.registerInput({ source: "files", type: "file", id, title: "` + name + ` item " + id })
      await ctx.publish("in", { messageId: id, inputId, payload: { id } })
    }
  } } },
  consumers: {
    send: Keep.consumer({ subscribe: ["in"], ` + publishes + `
      async prepare(ctx) { const [e] = await ctx.peek("in"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "in", ids: [e.messageId] }], data: e.payload } },
      async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "` + sinkURL + `/write/` + name + `-" + p.data.id, json: p.data, timeoutMs: 1500` + rec + ` }) },
      ` + next + `
    })` + second + `
  },
})`
}

// sqlWorkflow writes one row per input into a SQLite database of its own
// through sql.exec (issue 16): the row and keep's marker commit together.
func sqlWorkflow(name string) string {
	return `export default Keep.workflow({
  name: "` + name + `",
  topics: { "in": {} },
  producers: { poll: { publishes: ["in"], schedule: { interval: "1s" }, handler: async (ctx, state) => {
    for (const f of await ctx.files.list({ dir: "inbox-` + name + `", glob: "*.json" })) {
      const id = f.name.replace(".json", "")
      const inputId = ctx.registerInput({ source: "files", type: "file", id, title: "` + name + ` item " + id })
      await ctx.publish("in", { messageId: id, inputId, payload: { id } })
    }
  } } },
  consumers: {
    send: Keep.consumer({ subscribe: ["in"],
      async prepare(ctx) { const [e] = await ctx.peek("in"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "in", ids: [e.messageId] }], data: e.payload } },
      async mutate(ctx, p) { await ctx.sql.exec({ db: "target", sql: "INSERT INTO written (item) VALUES (?)", args: [p.data.id] }) },
    })
  },
})`
}

// mailWorkflow sends one email per input through email.send (issue 16).
func mailWorkflow(name string) string {
	return strings.Replace(sqlWorkflow(name), `await ctx.sql.exec({ db: "target", sql: "INSERT INTO written (item) VALUES (?)", args: [p.data.id] })`,
		`await ctx.email.send({ to: "customer@example.com", subject: "Item " + p.data.id, text: "done" })`, 1)
}

// firstMail sends one message through the email connector before the
// kills: the server files it, and Sent then shows that server_keeps_sent
// holds, so reconcile may take "not in Sent" for "not sent".
func firstMail(t *testing.T, srv *testmail.Server) {
	cfg, err := config.Parse("keep.toml", srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	m := email.New(email.ConfigOf(cfg)).Methods["send"]
	r := m.Do(context.Background(), connector.Call{Args: map[string]any{"to": "first@example.com", "subject": "first", "text": "before the kills"}, IdempotencyKey: "keep-torture-first"})
	if r.Outcome != connector.OutcomeApplied || r.Value.(map[string]any)["filedBy"] != "server" {
		t.Fatalf("the first mail: %v %+v %v", r.Outcome, r.Err, r.Value)
	}
}

// mailSent reports whether the SMTP server took the send of key.
func (r *rig) mailSent(key string) bool {
	sum := sha256.Sum256([]byte(key))
	id := "<keep." + hex.EncodeToString(sum[:16]) + "@keep.run>"
	for _, s := range r.mail.Sent() {
		if s == id {
			return true
		}
	}
	return false
}

// targetDB is the database the sql workflow writes to.
func (r *rig) targetDB() *sql.DB {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(r.dir, "target.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		r.t.Fatal(err)
	}
	return db
}

// sqlApplied reports whether the target database committed key.
func (r *rig) sqlApplied(key string) bool {
	db := r.targetDB()
	defer db.Close()
	var n int
	db.QueryRow(`SELECT count(*) FROM keep_mutations WHERE idempotency_key = ?`, key).Scan(&n)
	return n > 0
}

// itemWorkflow is an item script: one item per inbox file, two writes per
// item (the second without a probe), guarded by isDone.
func itemWorkflow(name, sinkURL string) string {
	return `export default Keep.workflow({
  name: "` + name + `",
  tasks: { work: Keep.task({ schedule: { interval: "1s" }, async run(ctx, state) {
    for (const f of await ctx.files.list({ dir: "inbox-` + name + `", glob: "*.json" })) {
      const id = f.name.replace(".json", "")
      await ctx.withItem("item:" + id, "` + name + ` item " + id, async (ctx) => {
        if (ctx.item.isDone) return
        await ctx.http.request({ method: "POST", url: "` + sinkURL + `/write/` + name + `-a-" + id, json: { id }, timeoutMs: 1500, reconcile: { url: "` + sinkURL + `/writes/{idempotencyKey}" } })
        await ctx.http.request({ method: "POST", url: "` + sinkURL + `/write/` + name + `-b-" + id, json: { id }, timeoutMs: 1500 })
      })
    }
  } }) },
})`
}

type rig struct {
	t    *testing.T
	dir  string
	data string
	// store is --store: "" for the data directory's SQLite file, or a
	// PostgreSQL schema of the test's own (KEEP_TORTURE_STORE=postgres).
	store string
	// nodes is how many keep serve processes share the store at once
	// (KEEP_TORTURE_NODES, PostgreSQL only); fleet holds them.
	nodes   int
	fleet   []*node
	sink    *testsink.Sink
	rng     *rand.Rand
	items   map[string]int
	names   []string
	probe   map[string]bool
	stats   map[string]int
	crashes []string
	mail    *testmail.Server
}

func (r *rig) addItems(n int) {
	for _, wf := range r.names {
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("%04d", r.items[wf])
			r.items[wf]++
			p := filepath.Join(r.dir, "files", "inbox-"+wf, id+".json")
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(`{}`), 0o644); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

func (r *rig) serve(env ...string) *exec.Cmd { return r.serveNode(0, env...) }

// serveNode starts keep serve as node i: each node has a data directory of
// its own (its engine lock, its serve.addr) and shares the store.
func (r *rig) serveNode(i int, env ...string) *exec.Cmd {
	data := r.data
	if i > 0 {
		data = fmt.Sprintf("%s-node%d", r.data, i)
	}
	cmd := exec.Command(keepBin, "serve", "--addr", "127.0.0.1:0", "--data", data, "--store", r.store, "--config", filepath.Join(r.dir, "keep.toml"), "--files-root", filepath.Join(r.dir, "files"))
	cmd.Env = append(os.Environ(), env...)
	logf, _ := os.OpenFile(filepath.Join(r.dir, "serve.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	return cmd
}

// node is one keep serve of a fleet.
type node struct {
	cmd   *exec.Cmd
	done  chan struct{}
	point string // the crash point it exits at, if any
}

func (r *rig) startNode(i int, point string) *node {
	var cmd *exec.Cmd
	if point != "" {
		cmd = r.serveNode(i, "KEEP_TEST_CRASH_AFTER="+point)
	} else {
		cmd = r.serveNode(i)
	}
	n := &node{cmd: cmd, done: make(chan struct{}), point: point}
	go func() { cmd.Wait(); close(n.done) }()
	return n
}

func (n *node) kill() {
	select {
	case <-n.done:
	default:
		n.cmd.Process.Signal(syscall.SIGKILL)
		<-n.done
	}
}

// roundFleet keeps r.nodes nodes running (a third of the new ones exit at
// a durable step), then kills one of them at a random moment: the others
// take its workflows over when its leases expire.
func (r *rig) roundFleet() {
	points := []string{engine.CrashAfterPrepared, engine.CrashInsideInFlight, engine.CrashAfterInFlight, engine.CrashAfterCall, engine.CrashAfterApplied, engine.CrashInsideCommit}
	for i := range r.fleet {
		if n := r.fleet[i]; n != nil {
			select {
			case <-n.done:
				if n.point != "" {
					r.stats["crash point "+n.point+" (one node)"]++
				}
				r.fleet[i] = nil
			default:
			}
		}
		if r.fleet[i] == nil {
			point := ""
			if r.rng.Intn(3) == 0 {
				point = points[r.rng.Intn(len(points))]
			}
			r.fleet[i] = r.startNode(i, point)
		}
	}
	time.Sleep(time.Duration(200+r.rng.Intn(600)) * time.Millisecond)
	i := r.rng.Intn(len(r.fleet))
	r.fleet[i].kill()
	r.fleet[i] = nil
	r.stats[fmt.Sprintf("SIGKILL of one node of %d", r.nodes)]++
}

// stopFleet kills every node.
func (r *rig) stopFleet() {
	for i, n := range r.fleet {
		if n != nil {
			n.kill()
			r.fleet[i] = nil
		}
	}
}

// round starts keep and kills it: at a random moment, or by an exit at a
// durable step chosen at random.
func (r *rig) round() {
	if r.nodes > 1 {
		r.roundFleet()
		return
	}
	points := []string{engine.CrashAfterPrepared, engine.CrashInsideInFlight, engine.CrashAfterInFlight, engine.CrashAfterCall, engine.CrashAfterApplied, engine.CrashInsideCommit}
	if r.rng.Intn(3) == 0 {
		p := points[r.rng.Intn(len(points))]
		cmd := r.serve("KEEP_TEST_CRASH_AFTER=" + p)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
			r.stats["crash point "+p]++
		case <-time.After(3 * time.Second):
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			r.stats["SIGKILL (crash point not reached)"]++
		}
		return
	}
	cmd := r.serve()
	time.Sleep(time.Duration(r.rng.Intn(400)) * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	r.stats["SIGKILL at a random moment"]++
}

// openDB opens the ledgers for the checks' own SQL.
func (r *rig) openDB() (*sql.DB, bool) {
	if r.store != "" {
		db, err := sql.Open("pgx", r.store)
		if err != nil {
			r.t.Fatal(err)
		}
		return db, true
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(r.data, "keep.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		r.t.Fatal(err)
	}
	return db, false
}

// check verifies the invariants on the database and the sink.
func (r *rig) check(final bool) {
	t := r.t
	t.Helper()
	db, onPostgres := r.openDB()
	defer db.Close()
	if !onPostgres {
		var integrity string
		if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&integrity); err != nil || integrity != "ok" {
			t.Fatalf("integrity_check: %q %v", integrity, err)
		}
	}
	queryInt := func(q string, args ...any) int {
		var n int
		if err := db.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	if n := queryInt(`SELECT count(*) FROM (SELECT workflow FROM runs WHERE open=1 GROUP BY workflow HAVING count(*) > 1) AS doubled`); n > 0 {
		t.Fatalf("%d workflows have two unfinished runs at once", n)
	}
	if n := queryInt(`SELECT count(*) FROM events e JOIN runs r ON r.id=e.reserved_by WHERE e.status='pending' AND r.open=0`); n > 0 {
		t.Fatalf("%d pending events are reserved by finished runs", n)
	}
	if n := queryInt(`SELECT count(*) FROM mutations m JOIN runs r ON r.id=m.run_id WHERE m.status='applied' AND r.phase IN ('preparing','prepared','mutating')`); n > 0 {
		t.Fatalf("%d applied mutations belong to runs that are not past mutated", n)
	}
	if n := queryInt(`SELECT count(*) FROM mutations m WHERE m.status='applied' AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id=m.run_id)`); n > 0 {
		t.Fatalf("%d applied mutations have no run", n)
	}
	// Duplicates at the sink: every idempotency key at most once.
	seen := map[string]int{}
	for _, w := range r.sink.Writes() {
		seen[w.Key]++
	}
	for key, n := range seen {
		if n > 1 {
			var paths []string
			for _, w := range r.sink.Writes() {
				if w.Key == key {
					paths = append(paths, w.Path+" at "+w.At.Format("15:04:05.000"))
				}
			}
			var dump strings.Builder
			q := `SELECT m.status, m.resolved_by, m.run_id, r.status, r.phase, r.retry_of, coalesce(r.trace,'') FROM mutations m JOIN runs r ON r.id=m.run_id WHERE m.idempotency_key=?`
			if onPostgres {
				q = strings.Replace(q, "?", "$1", 1)
			}
			rows, _ := db.Query(q, key)
			for rows != nil && rows.Next() {
				var a, b, c, d, e, f, g string
				rows.Scan(&a, &b, &c, &d, &e, &f, &g)
				fmt.Fprintf(&dump, "mutation %s resolved_by=%q run %s %s %s retry_of=%s\ntrace %s\n", a, b, c, d, e, f, g)
			}
			t.Fatalf("duplicate write at the sink: %s applied %d times: %v\n%s\nstats %v", key, n, paths, dump.String(), r.stats)
		}
	}
	// Duplicates in the sql workflow's table: every item at most once.
	target := r.targetDB()
	defer target.Close()
	var doubled string
	if err := target.QueryRow(`SELECT coalesce(group_concat(item), '') FROM (SELECT item FROM written GROUP BY item HAVING count(*) > 1)`).Scan(&doubled); err != nil {
		t.Fatalf("read the sql target: %v", err)
	}
	if doubled != "" {
		t.Fatalf("sql.exec wrote these items twice: %s", doubled)
	}
	sentOnce := map[string]bool{}
	for _, id := range r.mail.Sent() {
		if sentOnce[id] {
			t.Fatalf("email.send sent %s twice", id)
		}
		sentOnce[id] = true
	}
	if final {
		if n := queryInt(`SELECT count(*) FROM events WHERE status='pending'`); n > 0 {
			t.Fatalf("%d events are still pending at the end", n)
		}
	}
}

// settle runs keep until every registered item is done or skipped, resolving
// escalations the way a careful person would: look at the target, then say
// whether the write happened.
func (r *rig) settle(timeout time.Duration) {
	t := r.t
	if r.nodes > 1 {
		// Every node but the first, which settle watches, runs meanwhile.
		r.stopFleet()
		for i := 1; i < r.nodes; i++ {
			r.fleet[i] = r.startNode(i, "")
		}
		defer r.stopFleet()
	}
	cmd := r.serve()
	defer func() { cmd.Process.Signal(syscall.SIGKILL); cmd.Wait() }()
	loc, err := backend.Parse(r.store, r.data)
	if err != nil {
		t.Fatal(err)
	}
	st, err := loc.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		cards, err := report.Blocked(ctx, st, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cards {
			if c.Status == string(kt.StatusFailedLogic) || c.Status == string(kt.StatusFailedInternal) {
				t.Fatalf("run %s of %s failed: %s", c.RunID, c.Workflow, c.Reason)
			}
			what := kt.ResolveTryAgain
			if c.MutationStatus == string(kt.MutationIndeterminate) {
				var m kt.Mutation
				_ = st.View(ctx, func(tx store.Tx) error { m, err = tx.MutationByRun(c.RunID); return err })
				what = kt.ResolveDidntHappen
				for _, w := range r.sink.Writes() {
					if w.Key == m.IdempotencyKey {
						what = kt.ResolveSkip
					}
				}
				if r.sqlApplied(m.IdempotencyKey) || r.mailSent(m.IdempotencyKey) {
					what = kt.ResolveSkip
				}
				r.stats["escalation resolved: "+string(what)]++
			} else {
				r.stats["escalation resolved: try-again ("+c.Status+")"]++
			}
			// A card read a moment ago may be stale: keep serve (restarted
			// after a kill) may have moved the run on meanwhile, as it would
			// under a person's stale page. The next round reads again.
			ctrl := &control.Control{Store: st}
			if _, err := ctrl.Do(ctx, control.Request{Action: kt.Action(what), Run: c.RunID}); err != nil && !strings.Contains(err.Error(), "already has a decision") &&
				!strings.Contains(err.Error(), "there is nothing to resolve") {
				t.Fatalf("resolve %s: %v", c.RunID, err)
			}
		}
		if r.allSettled(ctx, st) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	var why strings.Builder
	for _, wf := range r.names {
		ins, _ := report.AllInputs(ctx, st, wf)
		n := 0
		for _, in := range ins {
			if in.Status != "done" && in.Status != "skipped" {
				n++
				if n <= 3 {
					fmt.Fprintf(&why, "  %s: %s %s (attempt %d)\n", wf, in.Key, in.Status, in.Attempt)
				}
			}
		}
		fmt.Fprintf(&why, "%s: %d of %d registered, %d not settled\n", wf, len(ins), r.items[wf], n)
		ss, _ := report.Statuses(ctx, st, wf)
		for _, s := range ss {
			fmt.Fprintf(&why, "  status %+v\n", s)
		}
		_ = st.View(ctx, func(tx store.Tx) error {
			// Why a workflow with pending events does not run them: its
			// consumers' flags, and who holds the oldest pending events.
			hs, _ := tx.HandlerList(wf)
			for _, h := range hs {
				if h.Type == kt.HandlerConsumer {
					fmt.Fprintf(&why, "  consumer %s dirty=%v wakeAt=%d\n", h.Name, h.Dirty, h.WakeAt)
				}
			}
			evs, _ := tx.EventList(wf, store.EventFilter{Status: kt.EventPending, Limit: 3})
			for _, ev := range evs {
				held := ""
				if ev.ReservedBy != "" {
					if run, err := tx.RunGet(ev.ReservedBy); err == nil {
						held = fmt.Sprintf(" (run %s %s in %s)", run.Status, run.Handler, run.Phase)
					}
				}
				fmt.Fprintf(&why, "  pending %s/%s reserved by %q%s\n", ev.Topic, ev.MessageID, ev.ReservedBy, held)
			}
			if run, err := tx.RunOpen(wf); err == nil {
				fmt.Fprintf(&why, "  open run %s %s %s action=%q next=%d err=%s: %s\n", run.ID, run.HandlerType, run.Status, run.Action, run.NextAttemptAt, run.ErrorClass, run.ErrorMessage)
				if m, err := tx.MutationByRun(run.ID); err == nil {
					fmt.Fprintf(&why, "  its mutation %s %s attempts=%d next=%d canReconcile=%v\n", m.Target, m.Status, m.ReconcileAttempts, m.NextReconcileAt, m.CanReconcile)
				}
			}
			return nil
		})
	}
	// A goroutine dump of the stuck keep: what is it doing?
	cmd.Process.Signal(syscall.SIGQUIT)
	time.Sleep(2 * time.Second)
	logs, _ := os.ReadFile(filepath.Join(r.dir, "serve.log"))
	if i := strings.LastIndex(string(logs), "goroutine 1 "); i > 0 {
		logs = logs[i:]
	} else if len(logs) > 3000 {
		logs = logs[len(logs)-3000:]
	}
	if len(logs) > 60000 {
		logs = logs[:60000]
	}
	t.Fatalf("not settled after %s:\n%s\nserve.log (end):\n%s", timeout, why.String(), logs)
}

func (r *rig) allSettled(ctx context.Context, st store.Store) bool {
	for _, wf := range r.names {
		ins, err := report.AllInputs(ctx, st, wf)
		if err != nil || len(ins) != r.items[wf] {
			return false
		}
		for _, in := range ins {
			if in.Status != "done" && in.Status != "skipped" {
				return false
			}
		}
	}
	return true
}

func TestTorture(t *testing.T) {
	s := *seed
	if s == 0 {
		s = time.Now().UnixNano()
	}
	t.Logf("seed %d (rerun with -torture.seed=%d), %d kills", s, s, *kills)
	sink := testsink.New()
	defer sink.Close()
	dir := t.TempDir()
	r := &rig{t: t, dir: dir, data: filepath.Join(dir, "data"), sink: sink, rng: rand.New(rand.NewSource(s)),
		items: map[string]int{}, names: []string{"chain", "noprobe", "probe", "items", "sql", "mail"}, stats: map[string]int{}}
	if os.Getenv("KEEP_TORTURE_STORE") == "postgres" {
		r.store = pgtest.FreshSchema(t)
		t.Logf("on PostgreSQL: %s", r.store)
		if n, _ := strconv.Atoi(os.Getenv("KEEP_TORTURE_NODES")); n > 1 {
			r.nodes, r.fleet = n, make([]*node, n)
			t.Logf("%d keep serve nodes share it", n)
		}
	}
	r.mail = testmail.Start(t, true)
	firstMail(t, r.mail)
	target := r.targetDB()
	if _, err := target.Exec(`CREATE TABLE written (item TEXT NOT NULL)`); err != nil { // no unique key: a second write would show
		t.Fatal(err)
	}
	target.Close()
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(r.mail.Config()+"\n"+sink.AllowTOML()+"\n[connectors.sql.databases]\ntarget = \"sqlite://"+filepath.Join(dir, "target.db")+"\"\n\n[policy]\ntransient_backoff = \"20ms\"\ntransient_backoff_max = \"200ms\"\nreconcile_backoff = \"20ms\"\nreconcile_backoff_max = \"200ms\"\nreconcile_attempts = 3\nlease_ttl = \"1s\"\n"), 0o644)
	for _, wf := range r.names {
		src := workflow(wf, sink.URL, wf != "noprobe", wf == "chain")
		if wf == "items" {
			src = itemWorkflow(wf, sink.URL)
		}
		if wf == "sql" {
			src = sqlWorkflow(wf)
		}
		if wf == "mail" {
			src = mailWorkflow(wf)
		}
		p := filepath.Join(dir, wf+".js")
		os.WriteFile(p, []byte(src), 0o644)
		if out, err := exec.Command(keepBin, "deploy", "--grant", "--data", r.data, "--store", r.store, p).CombinedOutput(); err != nil {
			t.Fatalf("deploy %s: %v %s", wf, err, out)
		}
	}
	faults := []testsink.Fault{testsink.OK, testsink.OK, testsink.OK, testsink.Slow, testsink.Slow, testsink.Status500, testsink.ResetAfter, testsink.TimeoutBefore}
	for i := 0; i < *kills; i++ {
		r.addItems(1 + r.rng.Intn(2))
		for j := 0; j < 3; j++ {
			sink.Queue(faults[r.rng.Intn(len(faults))])
		}
		if r.rng.Intn(3) == 0 {
			r.mail.CutAfterData(1) // a connection cut after the server took a message
		}
		r.round()
		r.check(false)
		if (i+1)%25 == 0 {
			// Let it catch up now and then, so the workload keeps moving.
			// The bounds are guards against a keep that never settles, not
			// measures of speed: a files write a slow service may still apply
			// waits 30 s before its last check, and three nodes on a machine
			// busy with other suites (CI runs them side by side) need minutes.
			r.settle(3 * time.Minute)
			r.check(true)
		}
	}
	r.settle(5 * time.Minute)
	r.check(true)
	total := 0
	for _, n := range r.items {
		total += n
	}
	t.Logf("kills: %d, inputs and items: %d, writes at the sink: %d (requests %d, probes %d)", *kills, total, len(sink.Writes()), sink.Requests(), sink.Probes())
	// Every item of the item script wrote both of its writes, or was skipped by the person.
	if want := r.items["chain"] + r.items["noprobe"] + r.items["probe"] + 2*r.items["items"]; len(sink.Writes()) > want {
		t.Fatalf("%d writes at the sink, at most %d possible", len(sink.Writes()), want)
	}
	// sql.exec needs no person: its reconcile is a lookup, so every item is written.
	db := r.targetDB()
	var rows int
	db.QueryRow(`SELECT count(DISTINCT item) FROM written`).Scan(&rows)
	db.Close()
	if rows != r.items["sql"] {
		t.Fatalf("the sql workflow wrote %d of its %d items", rows, r.items["sql"])
	}
	// The server keeps sent copies, so reconcile settles every cut send: every item is mailed once.
	if n := len(r.mail.Sent()) - 1; n != r.items["mail"] { // less firstMail's
		t.Fatalf("the mail workflow sent %d messages for its %d items", n, r.items["mail"])
	}
	for k, v := range r.stats {
		t.Logf("  %s: %d", k, v)
	}
}
