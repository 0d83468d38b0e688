// Package crash kills a real `keep serve` process (SIGKILL) in the middle of
// a mutation, and at each durable step on purpose, then restarts it and
// checks what a user would see: the number of writes at the sink, the
// mutation's state, and the run's status.
package crash

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqlite"
	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testsink"
)

var keepBin string

func TestMain(m *testing.M) {
	testbin.Main(m, &keepBin)
}

const script = `export default Keep.workflow({
  name: "crash",
  topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: { id: "a" } })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) {
      const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload }
    },
    async mutate(ctx, p) {
      await ctx.http.request({ method: "POST", url: "%SINK%/write/a", json: p.data, timeoutMs: 5000 %RECONCILE% })
    },
  }) },
})`

type proc struct {
	t    *testing.T
	dir  string
	cmd  *exec.Cmd
	logs *output
}

// output is what a process printed, read while it still prints.
type output struct {
	mu sync.Mutex
	b  strings.Builder
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

func setup(t *testing.T, sink *testsink.Sink, reconcile bool) string {
	t.Helper()
	dir := t.TempDir()
	src := strings.ReplaceAll(script, "%SINK%", sink.URL)
	rec := ""
	if reconcile {
		rec = `, reconcile: { url: "` + sink.URL + `/writes/{idempotencyKey}" }`
	}
	src = strings.ReplaceAll(src, "%RECONCILE%", rec)
	if err := os.WriteFile(filepath.Join(dir, "wf.js"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := "[policy]\ntransient_backoff = \"20ms\"\nreconcile_backoff = \"20ms\"\nreconcile_attempts = 2\n" + sink.AllowTOML()
	if err := os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(keepBin, "deploy", "--grant", "--data", filepath.Join(dir, "data"), filepath.Join(dir, "wf.js")).CombinedOutput()
	if err != nil {
		t.Fatalf("deploy: %v\n%s", err, out)
	}
	return dir
}

func serve(t *testing.T, dir string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(keepBin, "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--config", filepath.Join(dir, "keep.toml"))
	logs := &output{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, dir: dir, cmd: cmd, logs: logs}
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *proc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
}

// exited waits for the process to exit by itself (a crash point).
func (p *proc) exited(timeout time.Duration) bool {
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

type ledger struct {
	mutation kt.Mutation
	hasMut   bool
	open     *kt.Run
}

func read(t *testing.T, dir string) ledger {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(dir, "data", "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var l ledger
	err = st.View(context.Background(), func(tx store.Tx) error {
		ms, err := tx.MutationList("crash")
		if err != nil {
			return err
		}
		if len(ms) > 1 {
			t.Errorf("more than one mutation row: %d", len(ms))
		}
		if len(ms) == 1 {
			l.mutation, l.hasMut = ms[0], true
		}
		r, err := tx.RunOpen("crash")
		if err == nil {
			l.open = &r
		} else if !errors.Is(err, kt.ErrNotFound) {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := st.IntegrityCheck(); err != nil || ok != "ok" {
		t.Errorf("integrity_check: %q %v", ok, err)
	}
	return l
}

func committed(l ledger) bool {
	return l.hasMut && l.mutation.Status == kt.MutationApplied && l.open == nil
}

// TestKillDuringMutationReconcilesInsteadOfResending kills keep serve while
// the sink holds the request after applying it, then restarts keep.
func TestKillDuringMutationReconcilesInsteadOfResending(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	sink.Queue(testsink.TimeoutAfter)
	dir := setup(t, sink, true)
	p := serve(t, dir)
	testbin.WaitFor(t, "the write to reach the sink", func() bool { return sink.Requests() >= 1 })
	l := read(t, dir)
	if !l.hasMut || l.mutation.Status != kt.MutationInFlight {
		t.Fatalf("before the kill the ledger must say in_flight, got %+v", l.mutation.Status)
	}
	p.kill()

	serve(t, dir)
	testbin.WaitFor(t, "the run to commit after restart", func() bool { return committed(read(t, dir)) })
	if n := len(sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink: %d, want exactly 1", n)
	}
	if sink.Requests() != 1 {
		t.Fatalf("keep sent the write again after the crash: %d requests", sink.Requests())
	}
	if l := read(t, dir); l.mutation.ResolvedBy != kt.ResolvedByReconciliation {
		t.Fatalf("resolved by %q", l.mutation.ResolvedBy)
	}
}

// TestKillWithoutReconcileEscalates: the same crash, but nothing can check:
// keep must not resend; it shows the mutation as indeterminate instead.
func TestKillWithoutReconcileEscalates(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	sink.Queue(testsink.TimeoutAfter)
	dir := setup(t, sink, false)
	p := serve(t, dir)
	testbin.WaitFor(t, "the write to reach the sink", func() bool { return sink.Requests() >= 1 })
	p.kill()
	p2 := serve(t, dir)
	testbin.WaitFor(t, "the mutation to be escalated", func() bool {
		l := read(t, dir)
		return l.hasMut && l.mutation.Status == kt.MutationIndeterminate && l.open != nil && l.open.Status == kt.StatusReconciliation
	})
	time.Sleep(300 * time.Millisecond)
	if sink.Requests() != 1 {
		t.Fatalf("keep resent a write it could not check: %d requests", sink.Requests())
	}
	// The card after recovery is complete (issue 10 #13): its input, the
	// call, why, and only actions that work.
	l := read(t, dir)
	show, err := exec.Command(keepBin, "show", "run", "--data", filepath.Join(dir, "data"), l.open.ID, "--json").Output()
	if err != nil {
		t.Fatalf("show run: %v", err)
	}
	var d struct {
		Card *struct {
			Reason   string `json:"reason"`
			Mutation *struct {
				Target string         `json:"target"`
				Args   map[string]any `json:"args"`
			} `json:"mutation"`
			Inputs  []struct{ Title string } `json:"inputs"`
			Actions []string                 `json:"actions"`
		} `json:"card"`
	}
	if err := json.Unmarshal(show, &d); err != nil || d.Card == nil {
		t.Fatalf("show run --json: %v %s", err, show)
	}
	c := d.Card
	if c.Mutation == nil || !strings.Contains(c.Mutation.Target, "/write/a") || c.Mutation.Args == nil {
		t.Fatalf("the card has no call line: %s", show)
	}
	if strings.Contains(c.Reason, "— .") || !strings.Contains(c.Reason, "keep stopped") {
		t.Fatalf("the card's reason: %q", c.Reason)
	}
	if len(c.Inputs) != 1 || c.Inputs[0].Title != "Job a" || strings.Join(c.Actions, ",") != "skip,didnt-happen,reprocess" { // safest first (issue 42)
		t.Fatalf("card inputs %+v actions %v", c.Inputs, c.Actions)
	}
	// A person skips it: the run completes and nothing more is sent.
	out, err := exec.Command(keepBin, "resolve", "--data", filepath.Join(dir, "data"), l.open.ID, "--skip").CombinedOutput()
	if err != nil {
		t.Fatalf("resolve: %v %s", err, out)
	}
	testbin.WaitFor(t, "the skip to be carried out", func() bool { return read(t, dir).open == nil })
	if sink.Requests() != 1 {
		t.Fatalf("requests after skip: %d", sink.Requests())
	}
	// The restart said what it found, in English ("1 interrupted runs").
	p2.kill()
	if !strings.Contains(p2.logs.String(), "(recovered 1 interrupted run);") {
		t.Fatalf("keep serve's first line after the kill:\n%s", p2.logs.String())
	}
}

// TestCrashPoints exits keep right after each durable step and checks that a
// restart ends with exactly one write at the sink.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	for _, point := range []string{engine.CrashAfterPrepared, engine.CrashInsideInFlight, engine.CrashAfterInFlight, engine.CrashAfterCall, engine.CrashAfterProbe, engine.CrashInsideCommit} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			sink := testsink.New()
			defer sink.Close()
			dir := setup(t, sink, true)
			if point == engine.CrashAfterProbe {
				// The write's answer is lost (applied, then 500): keep probes.
				sink.Queue(testsink.Status500)
			}
			p := serve(t, dir, "KEEP_TEST_CRASH_AFTER="+point)
			if !p.exited(30 * time.Second) {
				t.Fatalf("keep did not reach crash point %s; logs:\n%s", point, p.logs)
			}
			serve(t, dir)
			testbin.WaitFor(t, "the run to commit after restart", func() bool { return committed(read(t, dir)) })
			if n := len(sink.Writes()); n != 1 {
				t.Fatalf("crash %s: writes at the sink: %d, want exactly 1", point, n)
			}
		})
	}
}

const itemScript = `export default Keep.workflow({
  name: "crash",
  tasks: { notify: Keep.task({ schedule: { interval: "1h" }, async run(ctx, state) {
    for (const f of await ctx.files.list({ dir: "inbox", glob: "*.json" })) {
      const id = f.name.replace(".json", "")
      await ctx.withItem("email:" + id, "Email " + id, async (ctx) => {
        if (ctx.item.isDone) return
        await ctx.http.request({ method: "POST", url: "%SINK%/write/first-" + id, json: { id }, timeoutMs: 20000, reconcile: { url: "%SINK%/writes/{idempotencyKey}" } })
        await ctx.http.request({ method: "POST", url: "%SINK%/write/second-" + id, json: { id }, timeoutMs: 20000, reconcile: { url: "%SINK%/writes/{idempotencyKey}" } })
      })
    }
  } }) },
})`

func setupItems(t *testing.T, sink *testsink.Sink) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "wf.js"), []byte(strings.ReplaceAll(itemScript, "%SINK%", sink.URL)), 0o644)
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte("[policy]\ntransient_backoff = \"20ms\"\nreconcile_backoff = \"20ms\"\n"+sink.AllowTOML()), 0o644)
	// The files root is the script's folder, recorded at deploy (keep
	// serve reads and writes there too).
	inbox := filepath.Join(dir, "inbox")
	os.MkdirAll(inbox, 0o755)
	os.WriteFile(filepath.Join(inbox, "a.json"), []byte(`{}`), 0o644)
	if out, err := exec.Command(keepBin, "deploy", "--grant", "--data", filepath.Join(dir, "data"), filepath.Join(dir, "wf.js")).CombinedOutput(); err != nil {
		t.Fatalf("deploy: %v\n%s", err, out)
	}
	return dir
}

func itemDone(t *testing.T, dir string) bool {
	st, err := sqlite.Open(filepath.Join(dir, "data", "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	done := false
	st.View(context.Background(), func(tx store.Tx) error {
		it, err := tx.InputGetByKey("crash", "email:a")
		done = err == nil && it.Status == kt.ItemDone
		return nil
	})
	return done
}

func writesTo(sink *testsink.Sink, path string) int {
	n := 0
	for _, w := range sink.Writes() {
		if w.Path == path {
			n++
		}
	}
	return n
}

// TestKillInsideAnItemHandler kills keep while the second of an item's two
// writes is in flight: after the restart each write has happened once.
func TestKillInsideAnItemHandler(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	sink.Queue(testsink.OK, testsink.TimeoutAfter)
	dir := setupItems(t, sink)
	p := serve(t, dir)
	testbin.WaitFor(t, "the second write to reach the sink", func() bool { return sink.Requests() >= 2 })
	p.kill()
	serve(t, dir)
	testbin.WaitFor(t, "the item to be done after restart", func() bool { return itemDone(t, dir) })
	if a, b := writesTo(sink, "/write/first-a"), writesTo(sink, "/write/second-a"); a != 1 || b != 1 {
		t.Fatalf("writes: first %d, second %d; want exactly one each", a, b)
	}
	if sink.Requests() != 2 {
		t.Fatalf("requests %d: a write was sent again", sink.Requests())
	}
}

func TestItemCrashPoints(t *testing.T) {
	t.Parallel()
	for _, point := range []string{engine.CrashAfterInFlight, engine.CrashAfterCall, engine.CrashAfterApplied} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			sink := testsink.New()
			defer sink.Close()
			dir := setupItems(t, sink)
			p := serve(t, dir, "KEEP_TEST_CRASH_AFTER="+point)
			if !p.exited(30 * time.Second) {
				t.Fatalf("keep did not reach crash point %s; logs:\n%s", point, p.logs)
			}
			serve(t, dir)
			testbin.WaitFor(t, "the item to be done after restart", func() bool { return itemDone(t, dir) })
			if a, b := writesTo(sink, "/write/first-a"), writesTo(sink, "/write/second-a"); a != 1 || b != 1 {
				t.Fatalf("crash %s: writes first %d, second %d; want exactly one each", point, a, b)
			}
		})
	}
}
