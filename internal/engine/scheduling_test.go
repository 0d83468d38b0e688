package engine_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/testbin"
)

func manyScript(name string, n int) string {
	return fmt.Sprintf(`export default Keep.workflow({
  name: "%s",
  topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    for (let i = 0; i < %d; i++) {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id: String(i), title: "Tick " + i })
      await ctx.publish("a", { messageId: String(i), inputId, payload: { i } })
    }
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"],
    async prepare(ctx) { const [e] = await ctx.peek("a"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "a", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.files.write({ path: "%s/" + p.data.i, content: "x" }) },
  }) },
})`, name, n, name)
}

// TestManyWorkflowsRunConcurrentlyButNeverTwoRunsOfOne runs the long-lived
// scheduler over several workflows and checks, from the runs' own
// timestamps, that no workflow ever had two runs at once.
func TestManyWorkflowsRunConcurrentlyButNeverTwoRunsOfOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const workflows, inputs = 8, 6
	var names []string
	for i := 0; i < workflows; i++ {
		names = append(names, e.deploy(manyScript(fmt.Sprintf("wf%d", i), inputs)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.k.Scheduler.Run(ctx) }()
	// Patience, not a fixed minute: on a busy machine 48 runs can take long.
	deadline := time.Now().Add(testbin.Patience())
	for {
		total := 0
		for _, wf := range names {
			for _, o := range e.outputs(wf) {
				if o.Status == "applied" {
					total++
				}
			}
		}
		if total == workflows*inputs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d outputs after %s", total, workflows*inputs, testbin.Patience())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, wf := range names {
		var runs []kt.Run
		_ = e.k.Store.View(e.ctx(), func(tx storeTx) error {
			var err error
			runs, err = tx.RunList(wf, 0)
			return err
		})
		// Times are milliseconds: two runs can start in the same one, so
		// the one that finished first comes first.
		sort.Slice(runs, func(i, j int) bool {
			if runs[i].CreatedAt != runs[j].CreatedAt {
				return runs[i].CreatedAt < runs[j].CreatedAt
			}
			return runs[i].FinishedAt < runs[j].FinishedAt
		})
		for i := 1; i < len(runs); i++ {
			if runs[i].CreatedAt < runs[i-1].FinishedAt {
				t.Fatalf("%s: run %s started at %d before run %s finished at %d", wf, runs[i].ID, runs[i].CreatedAt, runs[i-1].ID, runs[i-1].FinishedAt)
			}
		}
		e.noOpenRun(wf)
	}
}

func TestPausedWorkflowDoesNotRunAndRunNowIsRefusedWhenBlocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(manyScript("paused", 2))
	if err := pause(e, wf); err != nil {
		t.Fatal(err)
	}
	e.settle()
	if n := len(e.runs(wf)); n != 0 {
		t.Fatalf("a paused workflow ran %d runs", n)
	}
	if err := resume(e, wf); err != nil {
		t.Fatal(err)
	}
	e.settle()
	if n := len(e.outputs(wf)); n != 2 {
		t.Fatalf("outputs %d", n)
	}
	broken := e.deploy(strings.Replace(manyScript("broken", 1), `content: "x"`, `content: 5`, 1))
	e.settle()
	if _, err := runNow(e, broken); err == nil || !strings.Contains(err.Error(), "blocked run") {
		t.Fatalf("run-now while blocked: %v", err)
	}
}

// A chain of runs the scheduler steps costs it no look for due work per
// commit (issue 25, the serial path): each commit's wake-up is spared
// while the scheduler is stepping the workflow that changed, since its
// stepping loop steps that workflow again anyway and wakes the scheduler
// when it lets the workflow go. A change to a workflow nobody steps still
// wakes it. Counts, not clocks: before, every commit woke the scheduler
// and cost a pass over the store (a read transaction) beside the run.
func TestCommitsOfAWorkflowBeingSteppedDoNotWakeTheScheduler(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf, _ := stepChain(e, "chain")
	// Every commit of the runs: the producer's and two per consumer run.
	spared := e.k.Scheduler.SkippedWakes()
	if spared < 1+3*2 {
		t.Fatalf("%d of the chain's commits spared their wake-up; want at least the runs' 7", spared)
	}
	if got := e.k.Scheduler.Passes(); got != 0 {
		t.Fatalf("the scheduler looked for due work %d times; nothing but the chain ran", got)
	}
	e.k.Scheduler.Changed(wf)
	if got := e.k.Scheduler.SkippedWakes(); got != spared {
		t.Fatalf("a change to a workflow nobody steps was not passed on: %d wake-ups spared", got)
	}
}

// An empty poll waits for no fsync (issue 25): a consumer's prepare that
// reserves nothing writes only the consumer's wake-up, whose loss in a
// power cut is harmless (the consumer polls once more after the restart),
// so it is committed without one (store.NoSync) and made durable by the
// next durable commit. Every write a run needs stays durable: the
// producer's commit and the consumer runs' two. Counts: the chain below
// polls empty twice (at deploy, before the producer ran, and once the
// topic is drained): on SQLite 9 fsyncs before, 7 now.
func TestAnEmptyPollWaitsForNoFsync(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf, before := stepChain(e, "polls")
	after := e.k.Store.Stats()
	durable, transactions := after.Commits-before.Commits, after.Transactions-before.Transactions
	// Durable: the producer's commit, two per consumer run (and on
	// PostgreSQL two of the store's own); not durable: the two polls'.
	if durable < 1+3*2 || transactions-durable != 2 {
		t.Fatalf("%d durable commits of %d transactions; want at least 7 durable and the 2 empty polls' not", durable, transactions)
	}
	// The wake-up the last empty poll cleared is read back as written.
	if err := e.k.Store.View(e.ctx(), func(tx storeTx) error {
		h, err := tx.HandlerGet(wf, "c")
		if err == nil && h.Dirty {
			t.Errorf("the consumer is still marked dirty after its empty poll")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// stepChain deploys a producer publishing three events and a consumer
// writing each, and steps the workflow as the scheduler does until it has
// no work; it returns the workflow and the store's counts before, having
// checked the three writes were applied.
func stepChain(e *env, name string) (string, store.Stats) {
	e.t.Helper()
	wf := e.deploy(manyScript(name, 3))
	before := e.k.Store.Stats()
	if err := e.k.Scheduler.StepWorkflow(e.ctx(), wf); err != nil {
		e.t.Fatal(err)
	}
	applied := 0
	for _, o := range e.outputs(wf) {
		if o.Status == "applied" {
			applied++
		}
	}
	if applied != 3 {
		e.t.Fatalf("%d outputs applied, want 3", applied)
	}
	return wf, before
}
