package engine_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
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
	wf := e.deploy(manyScript("chain", 3))
	before := e.k.Store.Stats()
	if err := e.k.Scheduler.StepWorkflow(e.ctx(), wf); err != nil {
		t.Fatal(err)
	}
	transactions := e.k.Store.Stats().Transactions - before.Transactions
	applied := 0
	for _, o := range e.outputs(wf) {
		if o.Status == "applied" {
			applied++
		}
	}
	// At least the producer's commit and two per consumer run.
	if applied != 3 || transactions < 1+3*2 {
		t.Fatalf("%d outputs applied, %d transactions; want 3 and at least 7", applied, transactions)
	}
	if got := e.k.Scheduler.SkippedWakes(); got != transactions {
		t.Fatalf("%d of the chain's %d commits spared their wake-up; want all", got, transactions)
	}
	if got := e.k.Scheduler.Passes(); got != 0 {
		t.Fatalf("the scheduler looked for due work %d times; nothing but the chain ran", got)
	}
	e.k.Scheduler.Changed(wf)
	if got := e.k.Scheduler.SkippedWakes(); got != transactions {
		t.Fatalf("a change to a workflow nobody steps was not passed on: %d wake-ups spared", got)
	}
}
