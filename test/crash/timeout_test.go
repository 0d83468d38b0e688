package crash

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testsink"
)

// held is the crash workflow with no time limit of its own on the write:
// [policy] tool_timeout (an hour here) is all that would end it.
const held = `export default Keep.workflow({
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
      await ctx.http.request({ method: "POST", url: "%SINK%/write/a", json: p.data, reconcile: { url: "%SINK%/writes/{idempotencyKey}" } })
    },
  }) },
})`

// keep run --timeout stops at once, though a write is in flight: it does
// not wait for the call (up to tool_timeout, an hour here), it leaves the
// write in flight in the ledger and says so, and the next keep run asks
// the service (reconcile) and finds it applied: sent once. The service
// holds the write's answer until the client goes away (testsink.HoldWrite),
// so no timer decides the order; --timeout grows from 1 s until the write
// is under way when it ends (a busy machine may not reach it in 1 s).
func TestRunTimeoutGivesUpOnAWriteInFlight(t *testing.T) {
	sink := testsink.New()
	defer sink.Close()
	reached, release := sink.HoldWrite()
	defer release()
	dir := t.TempDir()
	wf, cfg := filepath.Join(dir, "wf.js"), filepath.Join(dir, "keep.toml")
	if err := os.WriteFile(wf, []byte(strings.ReplaceAll(held, "%SINK%", sink.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := "[policy]\ntool_timeout = \"1h\"\nreconcile_backoff = \"20ms\"\n" + sink.AllowTOML()
	if err := os.WriteFile(cfg, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (code int, stderr string) {
		cmd := exec.Command(keepBin, append([]string{"run", "--data", filepath.Join(dir, "data"), "--config", cfg}, append(args, wf)...)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{t: t, dir: dir, cmd: cmd}
		t.Cleanup(p.kill)
		if !p.exited(testbin.Patience()) {
			t.Fatalf("keep run %v did not stop (does it wait for the write in flight?)\n%s", args, errb.String())
		}
		return cmd.ProcessState.ExitCode(), out.String() + errb.String()
	}
	for limit := time.Second; ; limit *= 2 {
		code, said := run("--timeout", limit.String())
		select {
		case <-reached:
		default:
			if limit > testbin.Patience() {
				t.Fatalf("the write never went out:\n%s", said)
			}
			continue // stopped before the write: the next keep run goes on from there
		}
		if code == 0 || !strings.Contains(said, "gave up on the write POST "+sink.URL+"/write/a (http.request, run ") ||
			!strings.Contains(said, "asks the service whether it happened before anything is sent again") || !strings.Contains(said, "still not idle after --timeout") {
			t.Fatalf("keep run --timeout %s with a write in flight: exit %d\n%s", limit, code, said)
		}
		// One truthful state (issue 42): the summary said "idle" above
		// "still not idle" while the input was checking.
		if strings.Contains(said, "): idle") || !strings.Contains(said, "): not idle: stopped at --timeout "+limit.String()) ||
			!strings.Contains(said, "inputs above are not done yet (pending: 1)") && !strings.Contains(said, "inputs above are not done yet (checking: 1)") {
			t.Fatalf("keep run --timeout %s with a write in flight says two states, or not which inputs are not done:\n%s", limit, said)
		}
		t.Logf("keep run --timeout %s said:\n%s", limit, said)
		break
	}
	l := read(t, dir)
	if !l.hasMut || l.mutation.Status != kt.MutationInFlight || l.open == nil {
		t.Fatalf("after keep run gave up on it, the write is %+v (open run %v); want in_flight, its run open", l.mutation, l.open)
	}
	if n := len(sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink: %d", n)
	}
	if code, said := run(); code != 0 {
		t.Fatalf("the next keep run: exit %d\n%s", code, said)
	}
	if l := read(t, dir); !committed(l) {
		t.Fatalf("after the next keep run: %+v (open run %v)", l.mutation, l.open)
	}
	if n := len(sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink after the next keep run: %d, want 1 (reconciled, not sent again)", n)
	}
}
