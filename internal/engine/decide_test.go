package engine_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/testsink"
)

// decider takes one person's decision on the workflow's open run at a
// durable step of the engine (Options.AtDurableStep, as the crash points
// are reached), and records what Resolve answered.
type decider struct {
	e      **env
	point  string
	what   kt.Resolution
	only   func(kt.Run) bool // which run states to decide on (nil: any)
	mu     sync.Mutex
	taken  bool
	msg    string
	err    error
	atStep string
}

func (d *decider) at(step string) {
	if step != d.point || *d.e == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.taken {
		return
	}
	e := *d.e
	var run kt.Run
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		var err error
		run, err = tx.RunOpen("hook")
		return err
	}); err != nil || (d.only != nil && !d.only(run)) {
		return
	}
	d.taken, d.atStep = true, step
	d.msg, d.err = resolve(e.ctx(), e.k.Store, run.ID, d.what, time.Now())
}

// decisions lists the decision log of the hook workflow.
func (e *env) decisions() []kt.Decision {
	e.t.Helper()
	var ds []kt.Decision
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		var err error
		ds, err = tx.DecisionList("hook", "")
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return ds
}

func (e *env) mutation(wf string) kt.Mutation {
	e.t.Helper()
	var ms []kt.Mutation
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		var err error
		ms, err = tx.MutationList(wf)
		return err
	}); err != nil || len(ms) != 1 {
		e.t.Fatalf("mutations %d %v", len(ms), err)
	}
	return ms[0]
}

// A person's decision taken while keep checks a write in the background
// (issue 24 #1: a Skip was written over by the step under way and the write
// the person declined went out; "It didn't happen" dropped the probe's
// proof and sent the write again) is honoured whatever the check finds: a
// Skip that stands never sends the write; proof that the write applied
// wins over "it didn't happen"; nothing a person decided is lost.
func TestADecisionDuringABackgroundCheckIsHonoured(t *testing.T) {
	t.Parallel()
	background := func(r kt.Run) bool { return r.Status == kt.StatusReconciliation }
	cases := []struct {
		name   string
		what   kt.Resolution
		post   testsink.Fault
		probes []int // answers forced on the first probes
		writes int   // writes at the sink in the end
		mut    kt.MutationStatus
		last   string // what next saw
		note   string // a line of the decision log after the person's
	}{
		{"skip, the check finds nothing", kt.ResolveSkip, testsink.TimeoutBefore, nil, 0, kt.MutationSkipped, "skipped", ""},
		{"skip, the check cannot tell", kt.ResolveSkip, testsink.TimeoutBefore, []int{503, 503}, 0, kt.MutationSkipped, "skipped", ""},
		{"skip, the check finds it applied", kt.ResolveSkip, testsink.TimeoutAfter, []int{503}, 1, kt.MutationApplied, "applied", "proof wins"},
		{"it didn't happen, the check finds it applied", kt.ResolveDidntHappen, testsink.TimeoutAfter, []int{503}, 1, kt.MutationApplied, "applied", "proof wins"},
		{"it didn't happen, the check finds nothing", kt.ResolveDidntHappen, testsink.TimeoutBefore, nil, 1, kt.MutationApplied, "applied", "sent again"},
		{"it didn't happen, the check cannot tell", kt.ResolveDidntHappen, testsink.TimeoutBefore, []int{503, 503}, 1, kt.MutationApplied, "applied", ""},
		{"try again, the check finds it applied", kt.ResolveTryAgain, testsink.TimeoutAfter, []int{503}, 1, kt.MutationApplied, "applied", "proof wins"},
		{"try again, the check cannot tell", kt.ResolveTryAgain, testsink.TimeoutAfter, []int{503, 503}, 1, kt.MutationApplied, "applied", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var e *env
			d := &decider{e: &e, point: engine.CrashAfterProbe, what: c.what, only: background}
			e = newEnvAt(t, testPolicy, d.at)
			e.sink.Queue(c.post)
			e.sink.QueueProbe(c.probes...)
			wf := e.deploy(hookScript("", withProbe))
			e.settle()
			d.mu.Lock()
			taken, msg, derr := d.taken, d.msg, d.err
			d.mu.Unlock()
			if !taken || derr != nil {
				t.Fatalf("the decision was not taken during the background check: taken %v, %v", taken, derr)
			}
			e.noOpenRun(wf)
			if n := len(e.sink.Writes()); n != c.writes {
				t.Fatalf("writes at the sink: %d, want %d (the decision: %q)", n, c.writes, msg)
			}
			if m := e.mutation(wf); m.Status != c.mut {
				t.Fatalf("mutation %s (%s), want %s", m.Status, m.ResolvedBy, c.mut)
			}
			state := e.handlerState(wf, "c")
			if !strings.Contains(state, fmt.Sprintf(`"last":%q`, c.last)) {
				t.Fatalf("next saw %s, want %q", state, c.last)
			}
			ds := e.decisions()
			if len(ds) == 0 || ds[0].Action != string(c.what) {
				t.Fatalf("decision log %+v", ds)
			}
			if c.note != "" && (len(ds) != 2 || !strings.Contains(ds[1].Detail, c.note) || ds[1].By != "keep") {
				t.Fatalf("decision log %+v, want keep's note %q", ds, c.note)
			}
		})
	}
}

// A decision at every durable step of a run is either refused with why and
// not recorded (the run is running right now), or honoured.
func TestADecisionAtEachDurableStepIsRefusedOrHonoured(t *testing.T) {
	t.Parallel()
	for _, point := range []string{engine.CrashAfterPrepared, engine.CrashAfterInFlight, engine.CrashAfterCall, engine.CrashAfterProbe} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			var e *env
			d := &decider{e: &e, point: point, what: kt.ResolveSkip}
			e = newEnvAt(t, testPolicy, d.at)
			if point == engine.CrashAfterProbe {
				e.sink.Queue(testsink.TimeoutAfter) // an inline probe right after the call
			}
			wf := e.deploy(hookScript("", withProbe))
			e.settle()
			e.noOpenRun(wf)
			if !d.taken {
				t.Fatalf("the step %s was not reached", point)
			}
			var ae *kt.ActionError
			if !errors.As(d.err, &ae) || !strings.Contains(d.err.Error(), "running right now") {
				t.Fatalf("a Skip while the run is active: %v (%q)", d.err, d.msg)
			}
			if ds := e.decisions(); len(ds) != 0 {
				t.Fatalf("a refused decision was recorded: %+v", ds)
			}
			if n := len(e.sink.Writes()); n != 1 {
				t.Fatalf("writes %d", n)
			}
		})
	}
}

// handlerState is a handler's stored state, as JSON.
func (e *env) handlerState(wf, name string) string {
	e.t.Helper()
	var h kt.Handler
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		var err error
		h, err = tx.HandlerGet(wf, name)
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return string(h.State)
}

// bugInNext deploys hookScript with a next that throws: its run ends
// failed:logic after the write applied.
func bugInNext(t *testing.T) (*env, string, kt.Run) {
	t.Helper()
	e := newEnv(t)
	bug := strings.Replace(hookScript("", ""), `async next(ctx, p, r) { return { last: r.status } }`, `async next(ctx, p, r) { throw new Error("a bug in next") }`, 1)
	wf := e.deploy(bug)
	e.settle()
	r := e.open(wf)
	return e, wf, r
}

// A logic error's card says how to fix the script, with the commands; Try
// again says "the same script" only while no fix is deployed (issue 24 #10).
func TestALogicErrorsCardSaysHowToFixTheScript(t *testing.T) {
	t.Parallel()
	e, wf, r := bugInNext(t)
	cards, err := report.Blocked(e.ctx(), e.k.Store, wf)
	if err != nil || len(cards) != 1 {
		t.Fatalf("cards %d %v", len(cards), err)
	}
	if notes := strings.Join(cards[0].Notes, " "); !strings.Contains(notes, "fix wf.js, then deploy the fix with `keep deploy --minor wf.js`") || !strings.Contains(notes, "keep resolve "+r.ID+" --try-again") {
		t.Fatalf("card notes: %q", cards[0].Notes)
	}
	// A fix deployed since: Try again runs it, and says so.
	e.redeploy(hookScript("", ""), kt.DeployMinor)
	msg := e.resolve(r.ID, kt.ResolveTryAgain)
	if strings.Contains(msg, "same script") || !strings.Contains(msg, "on the version deployed since it failed") {
		t.Fatalf("try again after a fix: %q", msg)
	}
	e.settle()
	e.noOpenRun(wf)
}

// keep's own stored JSON that does not decode stops the run with a clear
// error, instead of being read as nothing (issue 24 #3).
func TestStoredJSONThatDoesNotDecodeStopsWithAClearError(t *testing.T) {
	t.Parallel()
	e, wf, r := bugInNext(t)
	if err := e.k.Store.Update(e.ctx(), func(tx store.Tx) error {
		got, err := tx.RunGet(r.ID)
		if err != nil {
			return err
		}
		got.MutationResult = []byte(`[1,2]`) // JSON, but not what keep wrote
		return tx.RunPut(got)
	}); err != nil {
		t.Fatal(err)
	}
	e.resolve(r.ID, kt.ResolveTryAgain)
	e.settle()
	r = e.open(wf)
	if r.Status != kt.StatusFailedInternal || !strings.Contains(r.ErrorMessage, "the stored mutation result of run") || !strings.Contains(r.ErrorMessage, "does not decode") {
		t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
	}
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes %d", n)
	}
}

// An item that needs attention (its write's outcome is unknown) is offered
// Reprocess on its run's card, and Reprocess from the card starts a new
// attempt that writes again (issue 24 #7: only `keep reprocess ITEM` did).
func TestAnItemThatNeedsAttentionIsOfferedReprocess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeInbox(t, e, "a")
	e.sink.Queue(testsink.TimeoutAfter) // applied, no answer, no probe: unknown
	wf := e.deploy(itemScript("", `if (ctx.item.isDone) return
          await ctx.http.request({ method: "POST", url: "%SINK%/write/" + id, json: { id }, timeoutMs: 300 })`))
	e.settle()
	r := e.open(wf)
	cards, err := report.Blocked(e.ctx(), e.k.Store, wf)
	if err != nil || len(cards) != 1 || !slices.Contains(cards[0].Actions, string(kt.ResolveReprocess)) {
		t.Fatalf("card actions %+v %v", cards, err)
	}
	msg := e.resolve(r.ID, kt.ResolveReprocess)
	if !strings.Contains(msg, `item "email:a": attempt 2 started`) {
		t.Fatalf("reprocess: %q", msg)
	}
	e.settle()
	e.noOpenRun(wf)
	ws := e.sink.Writes()
	if len(ws) != 2 || ws[0].Key == ws[1].Key {
		t.Fatalf("writes %+v: want the first attempt's and the second's, under two keys", ws)
	}
	var it kt.Input
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		var err error
		it, err = tx.InputGetByKey(wf, "email:a")
		return err
	}); err != nil || it.Status != kt.ItemDone || it.CurrentAttempt != 2 {
		t.Fatalf("item %+v %v", it, err)
	}
}

// Two installations write under different idempotency keys, so a service
// both write to never drops the second one's writes as repeats; a ledger
// row keeps the key it was created with, so a write an older keep left
// failed (or in flight) is sent again under its old key (issue 24 #9).
func TestIdempotencyKeysCarryTheInstallation(t *testing.T) {
	t.Parallel()
	src := `export default Keep.workflow({ name: "hook", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: { id: "a" } }) } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.files.write({ path: "out/a.txt", content: "a" }) } }) } })`
	var rows []kt.Mutation
	var installs []string
	for i := 0; i < 2; i++ {
		e := newEnv(t)
		wf := e.deploy(src)
		e.settle()
		e.noOpenRun(wf)
		m := e.mutation(wf)
		var id string
		if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
			var err error
			id, err = tx.InstallationID()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		rows, installs = append(rows, m), append(installs, id)
	}
	if rows[0].IdentityKey != rows[1].IdentityKey {
		t.Fatalf("the same write has two identities: %s %s", rows[0].IdentityKey, rows[1].IdentityKey)
	}
	if rows[0].IdempotencyKey == rows[1].IdempotencyKey || rows[0].IdempotencyKey != engine.IdempotencyKey(installs[0], rows[0].IdentityKey) {
		t.Fatalf("keys of two installations: %s %s", rows[0].IdempotencyKey, rows[1].IdempotencyKey)
	}

	// A row keeps the key it was created with, whatever new rows get
	// after (an upgrade that changed the key's making, here a store given
	// another installation id, then a restart).
	e := newEnvWith(t, strings.Replace(testPolicy, "transient_retries = 2", "transient_retries = 0", 1))
	e.sink.Queue(testsink.Status(429)) // certainly not applied: failed, transient
	wf := e.deploy(hookScript("", ""))
	e.settle()
	r := e.open(wf)
	old := e.mutation(wf)
	if err := e.k.Store.Update(e.ctx(), func(tx store.Tx) error { return tx.InstallationSet("another-installation") }); err != nil {
		t.Fatal(err)
	}
	e.restart()
	e.resolve(r.ID, kt.ResolveTryAgain)
	e.settle()
	e.noOpenRun(wf)
	if ws := e.sink.Writes(); len(ws) != 1 || ws[0].Key != old.IdempotencyKey || ws[0].Key == engine.IdempotencyKey("another-installation", old.IdentityKey) {
		t.Fatalf("writes %+v: want one, under the row's own key %s", ws, old.IdempotencyKey)
	}
}

// After It didn't happen, a new send whose outcome is unknown again starts
// its own reconcile attempts: the run says "attempt 1 of 2", never "attempt
// 3 of 2" (issue 27's papercut: "attempt 2 of 1").
func TestAResendCountsItsOwnReconcileAttempts(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, roomyPolicy)
	// The first send times out; both background probes cannot tell: a person is asked.
	e.sink.Queue(testsink.TimeoutBefore, testsink.TimeoutBefore)
	e.sink.QueueProbe(503, 503, 503, 503, 503, 503)
	wf := e.deploy(hookScript("", withProbe))
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusReconciliation || e.mutation(wf).Status != kt.MutationIndeterminate {
		t.Fatalf("run %s %q", r.Status, r.ErrorMessage)
	}
	e.resolve(r.ID, kt.ResolveDidntHappen)
	// The resend times out too; its inline probe cannot tell: keep waits to check again.
	var seen []string
	for i := 0; i < 50; i++ {
		if _, err := e.k.Engine.Step(e.ctx(), wf); err != nil {
			t.Fatal(err)
		}
		r = e.open(wf)
		seen = append(seen, r.ErrorMessage)
		if strings.Contains(r.ErrorMessage, "(attempt ") {
			break
		}
	}
	if !strings.Contains(r.ErrorMessage, "(attempt 1 of 2)") {
		t.Fatalf("after It didn't happen the resend says %q (messages %q)", r.ErrorMessage, seen)
	}
}

// A consumer's write found applied for the same events and attempt with
// significantly different content is refused as the conflict it is (ch 14
// §14.5): its input needs attention and the card offers Reprocess, as it
// says ("skip or reprocess the input"; issue 24 #7), which writes the new
// content once, in a new attempt under a key of its own. The state is
// reached by re-opening a consumed event with other content in the store
// (what an events table restored from an older copy beside a newer ledger
// would hold): the engine's ordinary runs commit a write and its events'
// consumption together.
func TestAConsumerWriteAppliedWithOtherContentIsOfferedReprocess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(hookScript("", ""))
	e.settle()
	e.noOpenRun(wf)
	must(t, e.k.Store.Update(e.ctx(), func(tx store.Tx) error {
		ev, err := tx.EventGet(wf, "job", "a")
		if err != nil {
			return err
		}
		ev.Status, ev.ReservedBy, ev.Payload = kt.EventPending, "", []byte(`{"id":"a","amount":2}`)
		if err := tx.EventUpdate(ev); err != nil {
			return err
		}
		h, err := tx.HandlerGet(wf, "c")
		if err != nil {
			return err
		}
		h.Dirty = true
		return tx.HandlerPut(h)
	}))
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, "different content") {
		t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
	}
	if ins := e.inputs(wf); ins[0].Status != kt.ItemNeedsAttention {
		t.Fatalf("input %s, want needs_attention", ins[0].Status)
	}
	cards, err := report.Blocked(e.ctx(), e.k.Store, wf)
	if err != nil || len(cards) != 1 || !slices.Contains(cards[0].Actions, string(kt.ResolveReprocess)) {
		t.Fatalf("card %+v %v", cards, err)
	}
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes %d before the decision: the conflicting write was sent", n)
	}
	msg := e.resolve(r.ID, kt.ResolveReprocess)
	if !strings.Contains(msg, "attempt 2") {
		t.Fatalf("reprocess: %q", msg)
	}
	e.settle()
	e.noOpenRun(wf)
	ws := e.sink.Writes()
	if len(ws) != 2 || string(ws[1].Body) != `{"amount":2,"id":"a"}` || ws[0].Key == ws[1].Key {
		t.Fatalf("writes %+v: want the new content once more, under a new key", ws)
	}
	if ins := e.inputs(wf); ins[0].Status != kt.ItemDone || ins[0].Attempt != 2 {
		t.Fatalf("input after the reprocess: %+v", ins[0])
	}
}

// Reprocess taken on a stale card while keep checks the write in the
// background, and the check finds it applied: the write is not sent a
// second time under the new attempt's key (proof wins, issue 24 #1). An
// attack found Reprocess accepted there: it closed the run in the
// person's transaction, the step's proof was dropped as a conflict, and
// the new attempt wrote again — two writes at the sink.
func TestReprocessDuringABackgroundCheckDoesNotWriteTwice(t *testing.T) {
	t.Parallel()
	var e *env
	d := &decider{e: &e, point: engine.CrashAfterProbe, what: kt.ResolveReprocess,
		only: func(r kt.Run) bool { return r.Status == kt.StatusReconciliation }}
	e = newEnvAt(t, testPolicy, d.at)
	e.sink.Queue(testsink.TimeoutAfter)
	e.sink.QueueProbe(503)
	wf := e.deploy(hookScript("", withProbe))
	e.settle()
	d.mu.Lock()
	taken, msg, derr := d.taken, d.msg, d.err
	d.mu.Unlock()
	if !taken {
		t.Fatal("no decision was tried during the background check")
	}
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink: %d, want 1 (Reprocess answered %q, %v)", n, msg, derr)
	}
	if derr == nil {
		t.Fatalf("Reprocess was accepted during keep's own check (%q), yet the write was found applied", msg)
	}
	if !strings.Contains(derr.Error(), "checking") {
		t.Fatalf("the refusal does not say keep is checking the write: %v", derr)
	}
	if ins := e.inputs(wf); len(ins) != 1 || ins[0].Status != kt.ItemDone || ins[0].Attempt != 1 {
		t.Fatalf("inputs %+v", ins)
	}
}

// A consumer's write whose identity has an applied row with the same
// content is not sent again: the run takes the recorded result (ch 14
// §14.5). The identity is looked up by the commit that would record the
// write in_flight (ledgerCall.unlooked); finding the row there, that
// commit writes nothing, and the run's trace shows the replay, never an
// in_flight that was not stored. The state is reached as in the test
// above, the consumed event re-opened with its own content.
func TestAConsumerWriteFoundAppliedAtItsInFlightCommitIsNotSentAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(hookScript("", ""))
	e.settle()
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes %d after the first run, want 1", n)
	}
	reopenWithRow(t, e, wf, kt.MutationApplied)
	e.settle()
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes %d: the write applied before was sent again", n)
	}
	var replay *apitype.RunDetail
	for _, r := range e.runs(wf) {
		d, err := report.ShowRun(e.ctx(), e.k.Store, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range d.Trace {
			if strings.Contains(l.Outcome, "already applied: cached result returned") {
				replay = &d
			}
		}
	}
	if replay == nil {
		t.Fatalf("no run replayed the write: %+v", e.runs(wf))
	}
	if replay.Run.Status != string(kt.StatusCommitted) {
		t.Fatalf("the replaying run is %s, want committed", replay.Run.Status)
	}
	for _, l := range replay.Trace {
		if l.Outcome == "in_flight" {
			t.Fatalf("the replaying run's trace says in_flight, which was never stored: %+v", replay.Trace)
		}
	}
}
