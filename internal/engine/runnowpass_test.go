package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/control"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/scheduler"
	"github.com/keep-run/keep/internal/testbin"
)

// counterScript's producer publishes one new event per run (its state
// counts the runs); its consumer writes each to a file.
const counterScript = `export default Keep.workflow({ name: "counter", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    const b = (state ? state.b : 0) + 1
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: String(b), title: "Tick " + b })
    await ctx.publish("a", { messageId: String(b), inputId, payload: { b } })
    return { b }
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"],
    async prepare(ctx) { const [e] = await ctx.peek("a"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "a", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.files.write({ path: "counter/" + p.data.b, content: "x" }) },
  }) },
})`

// A person's run-now starts the producer without a pass over the store
// (issue 43, the serial path: the pass was a read transaction between the
// run-now's commit and the producer's plan, which reads what it needs),
// and letting the workflow go after the chain costs none either: the
// scheduler looks again only when something changed after the last plan
// began. Counts, not clocks: the scheduler polls once an hour, so its only
// pass is the one it starts with. Before, each run-now cost two (the
// run-now's wake-up and the release's); the producer could not start
// without the first.
func TestARunNowCostsNoPassOverTheStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(counterScript)
	sched, _ := runWokenScheduler(t, e)
	applied := func(want int) {
		t.Helper()
		deadline := time.Now().Add(testbin.Patience())
		for {
			n := 0
			for _, o := range e.outputs(wf) {
				if o.Status == "applied" {
					n++
				}
			}
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d outputs applied, want %d (a wake-up was lost: the scheduler polls once an hour)", n, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// letGo waits until the scheduler has let the workflow go: an output
	// is applied before the stepping loop's last plan, which finds no
	// work, ends, and a run-now told while the loop still runs is noted
	// and costs a pass when it ends (Changed's other path, by design: the
	// loop's last plan may have begun before the run-now's commit).
	letGo := func() {
		t.Helper()
		deadline := time.Now().Add(testbin.Patience())
		for sched.Stepping(wf) {
			if time.Now().After(deadline) {
				t.Fatal("the scheduler never let the workflow go: its stepping loop found work without end")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	applied(1) // the producer's first run, due at deploy
	for k := 2; k <= 3; k++ {
		letGo()
		// As the API does: the action's commit, then Changed.
		if _, err := act(e.ctx(), e.k.Store, time.Now(), control.Request{Action: kt.ActRunNow, Workflow: wf}); err != nil {
			t.Fatal(err)
		}
		e.k.Changed(wf)
		applied(k)
	}
	if got := sched.Passes(); got != 1 {
		t.Fatalf("the scheduler looked for due work %d times; want once, when it started", got)
	}
}

// runWokenScheduler runs a scheduler for e's keep as keep serve does, but
// polling once an hour: only wake-ups move it (keep's OnChange and Changed
// tell this one). It stops at the test's end; ctx is its context.
func runWokenScheduler(t *testing.T, e *env) (*scheduler.Scheduler, context.Context) {
	sched := scheduler.New(scheduler.Options{Engine: e.k.Engine, Poll: time.Hour})
	e.k.Scheduler = sched
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sched.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return sched, ctx
}
