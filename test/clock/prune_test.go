package clock

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/keep-run/keep/internal/testsink"
)

// pruneScript takes orders posted through keep's API (keep publish) and
// POSTs each to the sink.
const pruneScript = `export default Keep.workflow({ name: "orders", topics: { "o": { from: "api" } },
  consumers: { c: Keep.consumer({ subscribe: ["o"],
    async prepare(ctx) { const [e] = await ctx.peek("o"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "o", ids: [e.messageId] }], data: e.payload }; },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.n, json: p.data }); },
  }) } });`

// keep serve prunes by itself (issue 44: [retention] interval, the loop
// of daemon.Keep.Prune), pass after pass: with a horizon of a day and
// the least interval, a minute (and no done run spared), an order's run, event and write keep their bodies while
// they are younger than a day; once keep's clock has moved two days on
// (the test build's clock step), keep serve's next pass prunes them, and
// a second order done after that pass is pruned by a later one, two days
// further. Nothing here waits for a time: each outcome is polled for in
// the store, with a deadline that only a broken loop reaches. What makes
// the work idempotent stays: the same order posted again is not written
// again.
func TestKeepServePrunesEveryInterval(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	dir, data, _ := deployOrders(t, sink, "")
	r := &rig{t: t, dir: dir}
	clock := r.clockFile("a")
	logs := r.serve("a", clock)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(data, "keep.db")+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// bodies counts order n's consumer run, event and write whose bodies
	// are pruned, and kept those whose bodies are still there.
	bodies := func(n int) (pruned, kept int) {
		t.Helper()
		for _, q := range []string{
			`SELECT pruned_at FROM runs WHERE id IN (SELECT run_id FROM mutations WHERE workflow='orders' AND target LIKE ?)`,
			`SELECT pruned_at FROM events WHERE id IN (SELECT event_id FROM event_causes WHERE input_id IN (SELECT id FROM items WHERE workflow='orders' AND external_id = ?))`,
			`SELECT pruned_at FROM mutations WHERE workflow='orders' AND target LIKE ?`,
		} {
			arg := fmt.Sprintf("%%/write/%d", n)
			if strings.Contains(q, "external_id") {
				arg = fmt.Sprintf("order-%d", n)
			}
			rows, err := db.Query(q, arg)
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			for rows.Next() {
				var at int64
				if err := rows.Scan(&at); err != nil {
					t.Fatal(err)
				}
				if at > 0 {
					pruned++
				} else {
					kept++
				}
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
		}
		return pruned, kept
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Minute); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not reached in 3 minutes (the sink's writes: %+v; the store: %s)\nkeep serve's log:\n%s", what, sink.Writes(), dump(db), logs)
			}
		}
	}
	publish := func(n int) {
		t.Helper()
		out, err := exec.Command(keepBin, "publish", "orders", "o", "--data", data, "--id", fmt.Sprintf("order-%d", n),
			"--title", fmt.Sprintf("Order %d", n), "--json", fmt.Sprintf(`{"n":%d}`, n)).CombinedOutput()
		if err != nil {
			t.Fatalf("keep publish: %v\n%s", err, out)
		}
	}
	writes := func(n int) int {
		c := 0
		for _, w := range sink.Writes() {
			if w.Path == fmt.Sprintf("/write/%d", n) {
				c++
			}
		}
		return c
	}

	publish(1)
	waitFor("order 1 written and its run, event and write stored", func() bool { p, k := bodies(1); return writes(1) == 1 && p+k == 3 })
	if p, k := bodies(1); p != 0 || k != 3 {
		t.Fatalf("order 1, younger than the day of [retention]: %d bodies pruned, %d kept; want none pruned", p, k)
	}
	// Keep's clock moves two days on: keep serve's next pass prunes order 1.
	r.step(clock, 49*time.Hour)
	waitFor("order 1's run, event and write pruned by keep serve", func() bool { p, _ := bodies(1); return p == 3 })

	// A second order, done after that pass, is young again: kept, until
	// the clock moves two days more and a later pass prunes it.
	publish(2)
	waitFor("order 2 written and stored", func() bool { p, k := bodies(2); return writes(2) == 1 && p+k == 3 })
	if p, _ := bodies(2); p != 0 {
		t.Fatalf("order 2, done at keep's time, was pruned (%d bodies): the horizon is a day", p)
	}
	r.step(clock, 98*time.Hour)
	waitFor("order 2's run, event and write pruned by a later pass", func() bool { p, _ := bodies(2); return p == 3 })

	// The identity outlives the bodies: order 1 posted again is not
	// written again.
	publish(1)
	publish(3)
	waitFor("order 3 written", func() bool { return writes(3) == 1 })
	if n := writes(1); n != 1 {
		t.Fatalf("order 1 was written %d times after it was pruned and posted again, want 1", n)
	}
}

// deployOrders deploys pruneScript, writing to sink, in a new directory
// (keep's data in its "a"), with a keep.toml whose [retention] prunes
// every done body older than a day, a pass a minute, and more keys.
func deployOrders(t *testing.T, sink *testsink.Sink, retention string) (dir, data, cfg string) {
	t.Helper()
	dir = t.TempDir()
	data, cfg = filepath.Join(dir, "a"), filepath.Join(dir, "keep.toml")
	if err := os.WriteFile(cfg, []byte("[retention]\ndays = 1\nkeep_done_runs = 0\ninterval = \"1m\"\n"+retention+"\n"+sink.AllowTOML()), 0o644); err != nil {
		t.Fatal(err)
	}
	wf := filepath.Join(dir, "wf.js")
	if err := os.WriteFile(wf, []byte(strings.ReplaceAll(pruneScript, "%SINK%", sink.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(keepBin, "deploy", "--grant", "--data", data, "--config", cfg, wf).CombinedOutput(); err != nil {
		t.Fatalf("deploy: %v\n%s", err, out)
	}
	return dir, data, cfg
}

// dump is what the store holds of the orders' events and writes, for a
// failure's message.
func dump(db *sql.DB) string {
	var b strings.Builder
	for _, q := range []string{`SELECT message_id || ' ' || status || ' ' || pruned_at FROM events`, `SELECT target || ' ' || status || ' ' || pruned_at FROM mutations`} {
		rows, err := db.Query(q)
		if err != nil {
			return err.Error()
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				return err.Error()
			}
			b.WriteString(s + "; ")
		}
		rows.Close()
	}
	return b.String()
}
