package engine_test

import (
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
)

// fusedSpinScript is hookScript whose prepare and mutate each keep the CPU
// busy for spin ms (wall clock), well within their own time limit.
func fusedSpinScript(prepareSpin, mutateSpin string) string {
	src := hookScript("", "")
	src = strings.Replace(src, `const [e] = await ctx.peek("job")`, `const [e] = await ctx.peek("job")
      if (e) { const end = Date.now() + `+prepareSpin+`; while (Date.now() < end) {} }`, 1)
	src = strings.Replace(src, `async mutate(ctx, p) {`, `async mutate(ctx, p) {
      { const end = Date.now() + `+mutateSpin+`; while (Date.now() < end) {} }`, 1)
	return src
}

// Each of prepare and mutate has its own time limit (handler_timeout, 8s
// here). A prepare that takes 5s and a mutate that takes 5s are each
// within it, with 3s to spare on a busy machine, and over it together: the run must finish and write once, as it did when they were
// two invocations. Keep's kill timer for mutate starts when the frame
// "phase" reaches it; an attack found that frame only buffered by the
// worker (flushed with mutate's write, at mutate's end), so keep's timer
// for prepare killed mutate, blaming prepare (fixed in 88164c3: the frame
// is sent at once).
func TestFusedPrepareAndMutateEachWithinTheirLimitAreNotKilled(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, strings.Replace(testPolicy, `handler_timeout = "2s"`, `handler_timeout = "8s"`, 1))
	wf := e.deploy(fusedSpinScript("5000", "5000"))
	e.settle()
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("%d writes at the sink, want 1", n)
	}
}

// A mutate that spins in a native loop (QuickJS's interrupt never comes)
// after a prepare is killed, and the run fails naming mutate, not prepare:
// the script's author is told which phase to look at. No write is made.
func TestFusedMutateInANativeLoopIsKilledNamingMutate(t *testing.T) {
	t.Parallel()
	if script.InProcess() {
		t.Skip("no worker process: a native loop is not stopped in keep's own")
	}
	for name, prepareSpin := range map[string]string{"quick prepare": "0", "slow prepare": "1500"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// A slow prepare takes 1.5s of its 6s: keep's clock for
			// prepare (7s with the grace) would run out before mutate's
			// own limit, with room on a busy machine.
			e := newEnvWith(t, strings.Replace(testPolicy, `handler_timeout = "2s"`, `handler_timeout = "6s"`, 1))
			src := fusedSpinScript(prepareSpin, "0")
			src = strings.Replace(src, `async mutate(ctx, p) {`, `async mutate(ctx, p) {
      Array.prototype.indexOf.call({ length: 2 ** 53 - 1 }, 1)`, 1)
			wf := e.deploy(src)
			e.settle()
			r := e.open(wf)
			if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, "mutate ran longer than its time limit") {
				t.Errorf("run %s in %s: %q, want failed:logic naming mutate's time limit", r.Status, r.Phase, r.ErrorMessage)
			}
			if r.Phase != kt.PhaseMutating {
				t.Errorf("run in %s, want mutating (mutate failed, as before issue 25)", r.Phase)
			}
			if n := len(e.sink.Writes()); n != 0 {
				t.Fatalf("%d writes at the sink, want 0", n)
			}
		})
	}
}

// Memory is limited per phase: a prepare and a mutate each under
// memory_limit (32 MiB) pass though together they are over it; a mutate
// over it fails its run naming mutate, after a prepare that was small.
func TestFusedMemoryIsBlamedOnThePhaseThatUsedIt(t *testing.T) {
	t.Parallel()
	if script.InProcess() {
		t.Skip("the memory watch is the worker's")
	}
	const alloc = `{ const k = []; for (let i = 0; i < %d; i++) { const a = new Uint8Array(1 << 20); a.fill(1); k.push(a) } if (k.length < 1) throw new Error("none") }`
	cases := map[string]struct{ prepare, mutate, want string }{
		"both under":   {"20", "20", ""},
		"big prepare":  {"24", "1", ""},
		"mutate over":  {"1", "48", "consumer c: mutate"},
		"prepare over": {"48", "1", "consumer c: prepare"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, roomyPolicy)
			src := hookScript("", "")
			src = strings.Replace(src, `const [e] = await ctx.peek("job")`, `const [e] = await ctx.peek("job")
      if (e) `+strings.Replace(alloc, "%d", c.prepare, 1), 1)
			src = strings.Replace(src, `async mutate(ctx, p) {`, `async mutate(ctx, p) {
      `+strings.Replace(alloc, "%d", c.mutate, 1), 1)
			wf := e.deploy(src)
			e.settle()
			if c.want == "" {
				e.noOpenRun(wf)
				if n := len(e.sink.Writes()); n != 1 {
					t.Fatalf("%d writes, want 1", n)
				}
				return
			}
			r := e.open(wf)
			if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, c.want) || !strings.Contains(r.ErrorMessage, "out of memory") {
				t.Fatalf("run %s in %s: %q, want failed:logic containing %q and out of memory", r.Status, r.Phase, r.ErrorMessage, c.want)
			}
			if n := len(e.sink.Writes()); n != 0 {
				t.Fatalf("%d writes, want 0", n)
			}
		})
	}
}
