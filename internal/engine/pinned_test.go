package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/control"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/testsink"
	"github.com/keep-run/keep/internal/transition"
)

// Issue 10 #2: a run that failed on a logic error (a 400 from the target)
// keeps its reservations; the input shows it is stuck and the card names
// it; Skip skips exactly those events and sends nothing again.
func TestSkipEndsARunThatFailedOnALogicError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.sink.Queue(testsink.Status(400))
	wf := e.deploy(hookScript("", ""))
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusFailedLogic || e.sink.Requests() != 1 {
		t.Fatalf("run %s requests %d: %s", r.Status, e.sink.Requests(), r.ErrorMessage)
	}
	if ins := e.inputs(wf); len(ins) != 1 || ins[0].Status != "failed" {
		t.Fatalf("input while its run is failed: %+v", ins)
	}
	cards, err := report.Blocked(e.ctx(), e.k.Store, wf)
	if err != nil || len(cards) != 1 || len(cards[0].Inputs) != 1 || cards[0].Inputs[0].Title != "Job a" {
		t.Fatalf("the card does not name its input: %+v %v", cards, err)
	}
	if got := strings.Join(cards[0].Actions, ","); got != "try-again,skip" {
		t.Fatalf("actions %s", got)
	}
	msg := e.resolve(r.ID, kt.ResolveSkip)
	if !strings.Contains(msg, "skipped") {
		t.Fatalf("resolve said %q", msg)
	}
	e.settle()
	e.noOpenRun(wf)
	if ev := e.events(wf, "job"); ev[0].Status != kt.EventSkipped {
		t.Fatalf("event after Skip: %+v", ev[0])
	}
	if ins := e.inputs(wf); ins[0].Status != "skipped" {
		t.Fatalf("input after Skip: %s", ins[0].Status)
	}
	if e.sink.Requests() != 1 {
		t.Fatalf("Skip sent the write again: %d requests", e.sink.Requests())
	}
}

// A repair (a minor version) releases the pinned events at a fresh prepare.
func TestARepairReleasesPinnedEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := strings.Replace(hookScript("", ""), "json: p.data", "json: p.data.missing.field", 1)
	wf := e.deploy(src)
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusFailedLogic {
		t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
	}
	if ev := e.events(wf, "job"); ev[0].ReservedBy != r.ID {
		t.Fatalf("the event is not pinned to the failed run: %+v", ev[0])
	}
	e.redeploy(hookScript("", ""), kt.DeployMinor)
	e.settle()
	e.noOpenRun(wf)
	if w := e.sink.Writes(); len(w) != 1 {
		t.Fatalf("writes %d", len(w))
	}
	if ev := e.events(wf, "job"); ev[0].Status != kt.EventConsumed {
		t.Fatalf("event %+v", ev[0])
	}
}

// Issue 10 #7: a missing file in a producer is not an approval. The card
// says what is missing and offers Try again and Skip; Approve is refused.
func TestAMissingFileOffersTryAgainAndSkipNotApprove(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(`export default Keep.workflow({ name: "missing", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx) => {
    await ctx.files.read({ path: "incoming/x.json" })
  } } } })`)
	e.settle()
	r := e.open(wf)
	cards, _ := report.Blocked(e.ctx(), e.k.Store, wf)
	if len(cards) != 1 {
		t.Fatalf("cards %+v (run %s)", cards, r.Status)
	}
	c := cards[0]
	if got := strings.Join(c.Actions, ","); got != "try-again,skip" || !strings.Contains(c.Reason, "incoming/x.json") || !strings.Contains(c.Reason, "no such file") {
		t.Fatalf("card: actions %s, reason %q", got, c.Reason)
	}
	if _, err := resolve(e.ctx(), e.k.Store, r.ID, kt.ResolveApprove, nowT()); err == nil || !strings.Contains(err.Error(), "not waiting for approval") {
		t.Fatalf("approve: %v", err)
	}
	e.resolve(r.ID, kt.ResolveSkip)
	e.settle()
	e.noOpenRun(wf)
}

// A consumer whose prepare fails before it selects anything has nothing to
// skip: Skip is not offered and is refused with what to do instead.
func TestSkipIsNotOfferedWhenPrepareSelectedNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := strings.Replace(hookScript("", ""), `const [e] = await ctx.peek("job")`, `const [e] = await ctx.peek("job"); await ctx.http.request({ method: "POST", url: "%SINK%/x", json: {} })`, 1)
	wf := e.deploy(src)
	e.settle()
	r := e.open(wf)
	cards, _ := report.Blocked(e.ctx(), e.k.Store, wf)
	if r.Status != kt.StatusFailedLogic || len(cards) != 1 || strings.Join(cards[0].Actions, ",") != "try-again" {
		t.Fatalf("run %s cards %+v", r.Status, cards)
	}
	if _, err := resolve(e.ctx(), e.k.Store, r.ID, kt.ResolveSkip, nowT()); err == nil || !strings.Contains(err.Error(), "keep deploy --minor") {
		t.Fatalf("skip: %v", err)
	}
	if e.sink.Requests() != 0 {
		t.Fatalf("a write in prepare reached the sink")
	}
}

// Issue 10 #4: "It didn't happen" is kept in the decision log after the write
// was sent again: who, what, when, on which mutation.
func TestDecisionsAreKept(t *testing.T) {
	t.Parallel()
	e, wf, r := unknownWrite(t)
	if _, err := resolve(transition.WithActor(e.ctx(), "alice"), e.k.Store, r.ID, kt.ResolveDidntHappen, nowT()); err != nil {
		t.Fatal(err)
	}
	e.settle()
	e.noOpenRun(wf)
	d, err := report.ShowRun(e.ctx(), e.k.Store, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Decisions) != 1 {
		t.Fatalf("decisions %+v", d.Decisions)
	}
	x := d.Decisions[0]
	if x.By != "alice" || x.Action != "didnt-happen" || x.MutationID == "" || x.At == "" || !strings.Contains(x.Detail, "send") {
		t.Fatalf("decision %+v", x)
	}
	_ = e.k.Store.View(e.ctx(), func(tx storeTx) error {
		m, err := tx.MutationGet(x.MutationID)
		if err != nil || m.Status != kt.MutationApplied || len(e.sink.Writes()) != 2 {
			t.Fatalf("the write was not sent again: %+v %v writes %d", m.Status, err, len(e.sink.Writes()))
		}
		return nil
	})
}

// Issue 10 #3: Reprocess on an input that needs attention is one action:
// the blocked run is closed and a new attempt runs.
func TestReprocessANeedsAttentionInputInOneAction(t *testing.T) {
	t.Parallel()
	e, wf, r := unknownWrite(t)
	ins := e.inputs(wf)
	if r.Status != kt.StatusReconciliation || len(ins) != 1 || ins[0].Status != "needs_attention" {
		t.Fatalf("run %s inputs %+v", r.Status, ins)
	}
	msg, err := reprocessRef(transition.WithActor(e.ctx(), "bob"), e.k.Store, control.ItemRef{Workflow: wf, Ref: ins[0].ID}, nowT())
	if err != nil || !strings.Contains(msg, "attempt 2") || !strings.Contains(msg, r.ID) {
		t.Fatalf("reprocess: %q %v", msg, err)
	}
	e.settle()
	e.noOpenRun(wf)
	ins = e.inputs(wf)
	if ins[0].Status != "done" || ins[0].Attempt != 2 {
		t.Fatalf("input after reprocess: %+v", ins[0])
	}
	if len(e.sink.Writes()) != 2 {
		t.Fatalf("writes %d: the new attempt's write must really run", len(e.sink.Writes()))
	}
	var ds []kt.Decision
	_ = e.k.Store.View(e.ctx(), func(tx storeTx) error {
		var err error
		ds, err = tx.DecisionList(wf, "")
		return err
	})
	if len(ds) != 1 || ds[0].Action != "reprocess" || ds[0].By != "bob" || ds[0].ItemID != ins[0].ID {
		t.Fatalf("decision log %+v", ds)
	}
}

// Issue 10 #5: while keep itself is checking whether a write happened, the
// input says "checking"; needs_attention only once a person must act.
func TestInputIsCheckingWhileKeepReconciles(t *testing.T) {
	t.Parallel()
	e, wf, r := unknownWrite(t)
	if ins := e.inputs(wf); ins[0].Status != kt.ItemNeedsAttention {
		t.Fatalf("input while a person must decide: %s", ins[0].Status)
	}
	// The same run while a background check is still scheduled.
	must(t, e.k.Store.Update(e.ctx(), func(tx storeTx) error {
		m, err := tx.MutationByRun(r.ID)
		if err != nil {
			return err
		}
		m.Status, m.NextReconcileAt = kt.MutationNeedsReconcile, time.Now().Add(time.Hour).UnixMilli()
		return tx.MutationPut(m)
	}))
	if ins := e.inputs(wf); ins[0].Status != report.ItemChecking {
		t.Fatalf("input while keep checks by itself: %s", ins[0].Status)
	}
	if cards, _ := report.Blocked(e.ctx(), e.k.Store, wf); len(cards) != 0 {
		t.Fatalf("a card asks a person to act while keep is still checking: %+v", cards)
	}
}

// Issue 10 #13: when next throws after the write was applied, the card
// shows the write as done, not as what is blocked.
func TestACardDoesNotShowAnAppliedWriteAsBlocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := strings.Replace(hookScript("", ""), `async next(ctx, p, r) { return { last: r.status } }`, `async next(ctx, p, r) { if (r.status === "applied") throw new Error("next broke") }`, 1)
	wf := e.deploy(src)
	e.settle()
	cards, _ := report.Blocked(e.ctx(), e.k.Store, wf)
	if len(cards) != 1 || !strings.Contains(cards[0].Reason, "next broke") {
		t.Fatalf("cards %+v", cards)
	}
	c := cards[0]
	if c.Mutation != nil || c.AppliedWrite == nil || !strings.Contains(c.AppliedWrite.Target, "/write/a") || c.Approval {
		t.Fatalf("card: mutation %+v applied %+v approval %v (%+v)", c.Mutation, c.AppliedWrite, c.Approval, c)
	}
	if len(e.sink.Writes()) != 1 {
		t.Fatalf("writes %d", len(e.sink.Writes()))
	}
}

// Issue 10 #2: a task run that mutates an item that is already done is not
// offered Skip (the item is done: skipping it changes nothing); it is
// offered Reprocess of that item, which ends the block.
func TestAMutationOnADoneItemOffersReprocessNotSkip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeInbox(t, e, "a")
	wf := e.deploy(itemScript("", `await ctx.http.request({ method: "POST", url: "%SINK%/write/" + id, json: { id } })`))
	e.settle()
	e.noOpenRun(wf)
	if _, err := runNow(e, wf); err != nil {
		t.Fatal(err)
	}
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, "already done") {
		t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
	}
	cards, _ := report.Blocked(e.ctx(), e.k.Store, wf)
	if len(cards) != 1 || strings.Join(cards[0].Actions, ",") != "try-again,reprocess" { // safest first (issue 42)
		t.Fatalf("cards %+v", cards)
	}
	if _, err := resolve(e.ctx(), e.k.Store, r.ID, kt.ResolveSkip, nowT()); err == nil || !strings.Contains(err.Error(), "already done") {
		t.Fatalf("skip: %v", err)
	}
	msg := e.resolve(r.ID, kt.ResolveReprocess)
	if !strings.Contains(msg, "attempt 2") {
		t.Fatalf("reprocess said %q", msg)
	}
	e.settle()
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 2 {
		t.Fatalf("writes %d: the reprocessed item's write must really run again", n)
	}
}

// Pause, resume and run-now are decisions too, logged in their own
// transaction with who took them.
func TestWorkflowActionsAreLogged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(hookScript("", ""))
	e.settle()
	ctx := transition.WithActor(e.ctx(), "carol")
	ctrl := &control.Control{Store: e.k.Store, Now: nowT}
	for _, act := range []kt.Action{kt.ActPause, kt.ActResume, kt.ActRunNow} {
		if _, err := ctrl.Do(ctx, control.Request{Action: act, Workflow: wf}); err != nil {
			t.Fatalf("%s: %v", act, err)
		}
	}
	if _, err := ctrl.Do(ctx, control.Request{Action: kt.ActResume, Workflow: wf}); err == nil {
		t.Fatal("resume of a running workflow was accepted")
	}
	var ds []kt.Decision
	_ = e.k.Store.View(e.ctx(), func(tx storeTx) error {
		var err error
		ds, err = tx.DecisionList(wf, "")
		return err
	})
	var got []string
	for _, d := range ds {
		if d.By != "carol" {
			t.Errorf("decision %+v not by carol", d)
		}
		got = append(got, d.Action)
	}
	if strings.Join(got, ",") != "pause,resume,run-now" {
		t.Fatalf("decisions %v (a refused action must not be logged)", got)
	}
}
