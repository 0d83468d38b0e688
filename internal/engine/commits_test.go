package engine_test

import (
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// Issue 25 #4: the commits of one consumer run, counted by the store.

// publishJob deploys src and steps the workflow until its producer has
// published the one job; the consumer's run is the next step.
func publishJob(t *testing.T, e *env, src string) string {
	t.Helper()
	wf := e.deploy(src)
	stepUntilPending(t, e, wf, 1)
	return wf
}

// stepUntilPending steps wf until n events are pending.
func stepUntilPending(t *testing.T, e *env, wf string, n int) {
	t.Helper()
	for i := 0; ; i++ {
		var pending int
		if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
			var err error
			pending, err = tx.CountPending(wf)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if pending == n {
			return
		}
		if did, err := e.k.Engine.Step(e.ctx(), wf); err != nil || !did || i == 10 {
			t.Fatalf("the producer did not publish %d events: did %v, %v", n, did, err)
		}
	}
}

// consumerStep steps the consumer's run and returns how many write
// transactions it made.
func consumerStep(t *testing.T, e *env, wf string) int64 {
	t.Helper()
	before := e.k.Store.Stats().Transactions
	if did, err := e.k.Engine.Step(e.ctx(), wf); err != nil || !did {
		t.Fatalf("the consumer's step: did %v, %v", did, err)
	}
	return e.k.Store.Stats().Transactions - before
}

// A run that writes makes two commits: prepare's result and selection with
// the write's in_flight row, then the outcome with next's state and the
// consumption; each holds what it should.
func TestAConsumerRunThatWritesMakesTwoCommits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := publishJob(t, e, hookScript("", ""))
	if n := consumerStep(t, e, wf); n != 2 {
		t.Fatalf("the run made %d commits, want 2", n)
	}
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink: %d", n)
	}
	r := lastRun(t, e, wf)
	if r.Status != kt.StatusCommitted || r.Handler != "c" {
		t.Fatalf("run %s %s in %s: %s", r.Handler, r.Status, r.Phase, r.ErrorMessage)
	}
	if m := mutationOf(t, e, r.ID); m.Status != kt.MutationApplied {
		t.Fatalf("ledger row %s", m.Status)
	}
	if ev := e.events(wf, "job"); ev[0].Status != kt.EventConsumed || ev[0].ReservedBy != r.ID {
		t.Fatalf("event %+v", ev[0])
	}
	if s := e.handlerState(wf, "c"); s != `{"last":"applied"}` {
		t.Fatalf("next's state %s", s)
	}
}

// A run whose mutate sends nothing consumes what it selected, in one commit.
func TestAConsumerRunThatWritesNothingConsumesItsSelectionInOneCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := strings.Replace(hookScript("", ""), `await ctx.http.request(`, `if (p.data.id !== "a") await ctx.http.request(`, 1)
	wf := publishJob(t, e, src)
	if n := consumerStep(t, e, wf); n != 1 {
		t.Fatalf("the run made %d commits, want 1", n)
	}
	r := lastRun(t, e, wf)
	if r.Status != kt.StatusCommitted || len(e.sink.Writes()) != 0 {
		t.Fatalf("run %s: %s; writes %d", r.Status, r.ErrorMessage, len(e.sink.Writes()))
	}
	if ev := e.events(wf, "job"); ev[0].Status != kt.EventConsumed || ev[0].ReservedBy != r.ID {
		t.Fatalf("the selection was not consumed: %+v", ev[0])
	}
}

// A run that writes nothing and fails in next pins its selection with the
// failure, in one commit: the input shows what is stuck.
func TestARunThatWritesNothingPinsItsSelectionWhenItFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := strings.Replace(hookScript("", ""), `await ctx.http.request(`, `if (p.data.id !== "a") await ctx.http.request(`, 1)
	src = strings.Replace(src, `async next(ctx, p, r) { return { last: r.status } }`, `async next(ctx, p, r) { throw new Error("a bug in next") }`, 1)
	wf := publishJob(t, e, src)
	if n := consumerStep(t, e, wf); n != 1 {
		t.Fatalf("the run made %d commits, want 1", n)
	}
	r := e.open(wf)
	if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, "a bug in next") {
		t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
	}
	if ev := e.events(wf, "job"); ev[0].Status != kt.EventPending || ev[0].ReservedBy != r.ID {
		t.Fatalf("the selection is not pinned to the failed run: %+v", ev[0])
	}
	if ins := e.inputs(wf); len(ins) != 1 || ins[0].Status != "failed" {
		t.Fatalf("input while its run is failed: %+v", ins)
	}
}

// A run whose next fails after its write applied records the outcome with
// the failure (one commit after in_flight): the retry runs next again and
// never sends the write twice.
func TestAFailureInNextRecordsTheWritesOutcomeWithIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bug := strings.Replace(hookScript("", ""), `async next(ctx, p, r) { return { last: r.status } }`, `async next(ctx, p, r) { throw new Error("a bug in next") }`, 1)
	wf := publishJob(t, e, bug)
	if n := consumerStep(t, e, wf); n != 2 {
		t.Fatalf("the run made %d commits, want 2", n)
	}
	r := e.open(wf)
	if r.Status != kt.StatusFailedLogic || r.Phase != kt.PhaseEmitting {
		t.Fatalf("run %s in %s: %s", r.Status, r.Phase, r.ErrorMessage)
	}
	if m := mutationOf(t, e, r.ID); m.Status != kt.MutationApplied {
		t.Fatalf("the write's outcome was not recorded with the failure: ledger row %s", m.Status)
	}
	e.redeploy(hookScript("", ""), kt.DeployMinor)
	e.resolve(r.ID, kt.ResolveTryAgain)
	e.settle()
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink: %d, want 1", n)
	}
	if s := e.handlerState(wf, "c"); s != `{"last":"applied"}` {
		t.Fatalf("next's state after the retry %s", s)
	}
}

// lastRun is the workflow's newest run.
func lastRun(t *testing.T, e *env, wf string) kt.Run {
	t.Helper()
	var r kt.Run
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		rs, err := tx.RunList(wf, 1)
		if err == nil && len(rs) == 0 {
			err = kt.ErrNotFound
		}
		if err == nil {
			r = rs[0]
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

func mutationOf(t *testing.T, e *env, runID string) kt.Mutation {
	t.Helper()
	var m kt.Mutation
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		var err error
		m, err = tx.MutationByRun(runID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return m
}
