package crash

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqlite"
	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testsink"
)

// A write whose answer keep holds for the run's second commit is recorded
// when keep serve stops (SIGTERM) during next: the restart finds it applied,
// never in_flight behind a card offering to send it again (an attack found
// "It didn't happen (send again)" offered for a write answered 200).
//
// Both sandboxes: a worker process (its CPU is the child's) and the
// default, wasm in keep's own process, whose stop is the inline check keep
// instruments into the interpreter (keep serve's own CPU passing 5 s, far
// more than its start, the write and a cold compile take, is next spinning).
func TestAStopDuringNextKeepsTheWritesAnswer(t *testing.T) {
	t.Parallel()
	t.Run("worker", func(t *testing.T) {
		t.Parallel()
		stopDuringNext(t, onWorkers, func(p *proc) bool { return spinning(children(p.cmd.Process.Pid), 50) })
	})
	t.Run("wasm", func(t *testing.T) {
		t.Parallel()
		stopDuringNext(t, "KEEP_SANDBOX=wasm", func(p *proc) bool { return spinning([]int{p.cmd.Process.Pid}, 500) })
	})
}

func stopDuringNext(t *testing.T, sandbox string, nextSpins func(*proc) bool) {
	sink := testsink.New()
	defer sink.Close()
	dir := deployStop(t, sink, `async mutate(ctx) { await ctx.http.request({ method: "POST", url: "%[1]s/write/a", json: {} }) },
    // next spins: only the stop ends it (the time limit is an hour away).
    async next(ctx) { for (;;) {} }`, "")
	p := serve(t, dir, sandbox)
	testbin.WaitFor(t, "the write to reach the sink", func() bool { return len(sink.Writes()) == 1 })
	testbin.WaitFor(t, "next to spin in the sandbox", func() bool { return nextSpins(p) })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !p.exited(2 * time.Minute) {
		t.Fatalf("keep serve did not stop on SIGTERM\n%s", p.logs.String())
	}
	st, err := sqlite.Open(filepath.Join(dir, "data", "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.View(context.Background(), func(tx store.Tx) error {
		ms, err := tx.MutationList("stop")
		if err != nil {
			return err
		}
		if len(ms) != 1 || ms[0].Status != kt.MutationApplied {
			t.Errorf("after the stop the write is %+v, want applied (keep had its 2xx)", ms)
		}
		runs, err := tx.RunList("stop", 0)
		for _, r := range runs {
			if len(ms) == 1 && r.ID == ms[0].RunID && (r.Status != kt.StatusActive || r.Phase != kt.PhaseMutated && r.Phase != kt.PhaseEmitting) {
				t.Errorf("the consumer run is %s at %s (%s), want active after its write\n%s", r.Status, r.Phase, r.ErrorMessage, p.logs.String())
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n := len(sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink: %d", n)
	}
}

// keep serve asked to stop (SIGTERM) while a write waits for its answer
// lets the write finish first: it says so, and that a second signal stops
// it at once. The second stops it at once, the write's answer still held
// by the service; the next keep serve finds the write in flight, asks
// the service (reconcile), finds it applied and settles it: one write at
// the sink, none lost, none twice.
func TestASecondSignalStopsAtOnceAndNothingIsLost(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	dir := deployStop(t, sink, `async mutate(ctx) { await ctx.http.request({ method: "POST", url: "%[1]s/write/a", json: {}, timeoutMs: 600000,
      reconcile: { url: "%[1]s/writes/{idempotencyKey}" } }) }`, "reconcile_backoff = \"20ms\"\n")
	held, release := sink.HoldWrite()
	defer release()
	p := serve(t, dir)
	testbin.WaitFor(t, "the write applied at the sink, its answer held", func() bool {
		select {
		case <-held:
			return true
		default:
			if strings.Contains(p.logs.String(), "level=ERROR") {
				t.Fatalf("keep serve:\n%s", p.logs.String())
			}
			return false
		}
	})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, "keep serve to say it stops once the steps under way finish", func() bool {
		return strings.Contains(p.logs.String(), "signal again to stop at once")
	})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !p.exited(2 * time.Minute) {
		t.Fatalf("keep serve did not stop on a second SIGTERM while a write waited for its answer\n%s", p.logs.String())
	}
	release()
	again := serve(t, dir)
	st, err := sqlite.Open(filepath.Join(dir, "data", "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	testbin.WaitFor(t, "the write in flight settled as applied by the next keep serve", func() bool {
		var ms []kt.Mutation
		if err := st.View(context.Background(), func(tx store.Tx) error {
			var err error
			ms, err = tx.MutationList("stop")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return len(ms) == 1 && ms[0].Status == kt.MutationApplied
	})
	if n := len(sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink: %d, want 1\n%s", n, again.logs.String())
	}
}

// deployStop deploys the "stop" workflow (one input, one event, a consumer
// whose mutate and next are handlers, with %[1]s for the sink's URL) with
// an hour's handler time limit and policy lines of its own, and returns
// its directory.
func deployStop(t *testing.T, sink *testsink.Sink, handlers, policy string) string {
	t.Helper()
	dir := t.TempDir()
	src := fmt.Sprintf(`export default Keep.workflow({ name: "stop", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: {} }) } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: {} } },
    `+handlers+` }) } })`, sink.URL)
	if err := os.WriteFile(filepath.Join(dir, "wf.js"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keep.toml"), []byte("[policy]\nhandler_timeout = \"1h\"\n"+policy+"\n"+sink.AllowTOML()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(keepBin, "deploy", "--grant", "--data", filepath.Join(dir, "data"), "--config", filepath.Join(dir, "keep.toml"), filepath.Join(dir, "wf.js")).CombinedOutput(); err != nil {
		t.Fatalf("deploy: %v\n%s", err, out)
	}
	return dir
}
