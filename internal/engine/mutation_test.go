package engine_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/testsink"
)

func TestMutationApplied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(hookScript("", ""))
	e.settle()
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink: %d, want 1", n)
	}
	outs := e.outputs(wf)
	if len(outs) != 1 || outs[0].Status != "applied" || outs[0].Tool != "http" || outs[0].Method != "request" {
		t.Fatalf("outputs: %+v", outs)
	}
	// The Idempotency-Key the sink saw is the ledger's.
	if key := e.sink.Writes()[0].Key; !strings.HasPrefix(key, "keep-") {
		t.Fatalf("Idempotency-Key %q", key)
	}
	ins := e.inputs(wf)
	if len(ins) != 1 || ins[0].Status != "done" || len(outs[0].InputIDs) != 1 || outs[0].InputIDs[0] != ins[0].ID {
		t.Fatalf("inputs %+v outputs %+v", ins, outs)
	}
}

func TestDefiniteFailureIsNotRetriedBlindly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.sink.Queue(testsink.Status(http.StatusConflict))
	wf := e.deploy(hookScript("", ""))
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusApproval || r.ErrorClass != kt.ClassPrecondition || !strings.Contains(r.ErrorMessage, "409") {
		t.Fatalf("run: %s %s %q", r.Status, r.ErrorClass, r.ErrorMessage)
	}
	outs := e.outputs(wf)
	if len(outs) != 1 || outs[0].Status != "failed" || len(e.sink.Writes()) != 0 {
		t.Fatalf("outputs %+v writes %d", outs, len(e.sink.Writes()))
	}
	if in := e.inputs(wf); in[0].Status != "needs_attention" {
		t.Fatalf("input status %s", in[0].Status)
	}
	// A person fixes the target and tries again: the write happens once.
	e.resolve(r.ID, kt.ResolveTryAgain)
	e.settle()
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes after retry: %d", n)
	}
}

func TestTimeoutAfterWriteWithProbeReconcilesToApplied(t *testing.T) {
	t.Parallel()
	for _, fault := range []testsink.Fault{testsink.TimeoutAfter, testsink.Status500, testsink.ResetAfter, testsink.TruncAfter} {
		t.Run(string(fault), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.sink.Queue(fault)
			wf := e.deploy(hookScript("", withProbe))
			e.settle()
			e.noOpenRun(wf)
			if n := len(e.sink.Writes()); n != 1 {
				t.Fatalf("writes at the sink: %d, want exactly 1", n)
			}
			outs := e.outputs(wf)
			if outs[0].Status != "applied" || outs[0].ResolvedBy != kt.ResolvedByReconciliation {
				t.Fatalf("output %+v", outs[0])
			}
			if e.sink.Probes() != 1 {
				t.Fatalf("probes %d", e.sink.Probes())
			}
		})
	}
}

func TestTimeoutBeforeWriteWithProbeSendsAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.sink.Queue(testsink.TimeoutBefore)
	wf := e.deploy(hookScript("", withProbe))
	e.settle()
	e.noOpenRun(wf)
	// The probe proved it did not happen; mutate ran again and the write landed once.
	if n := len(e.sink.Writes()); n != 1 || e.sink.Requests() != 2 {
		t.Fatalf("writes %d requests %d", n, e.sink.Requests())
	}
}

func TestTimeoutWithoutReconcileEscalates(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*env, string, kt.Run) {
		e := newEnv(t)
		e.sink.Queue(testsink.TimeoutAfter)
		wf := e.deploy(hookScript("", ""))
		e.settle()
		r := e.open(wf)
		if r.Status != kt.StatusReconciliation || r.Phase != kt.PhaseMutating {
			t.Fatalf("run %s %s: %s", r.Status, r.Phase, r.ErrorMessage)
		}
		outs := e.outputs(wf)
		if outs[0].Status != "indeterminate" {
			t.Fatalf("output %+v", outs[0])
		}
		cards, err := report.Blocked(e.ctx(), e.k.Store, wf)
		if err != nil || len(cards) != 1 {
			t.Fatalf("cards %v %v", cards, err)
		}
		c := cards[0]
		if c.Mutation == nil || c.Mutation.Tool != "http" || !strings.Contains(c.Mutation.Target, "POST "+e.sink.URL+"/write/a") ||
			!strings.Contains(c.Reason, "outcome unknown") || !strings.Contains(c.Reason, `give it one, reconcile: { method: "GET", url: "…/{idempotencyKey}" }`) ||
			strings.Count(c.Reason, e.sink.URL+"/write/a") != 1 || strings.Join(c.Actions, ",") != "skip,didnt-happen,reprocess" || len(c.Inputs) != 1 {
			t.Fatalf("card %+v", c)
		}
		if _, err := resolve(e.ctx(), e.k.Store, r.ID, kt.ResolveTryAgain, nowT()); err == nil || !strings.Contains(err.Error(), "no reconcile") {
			t.Fatalf("try again without reconcile: %v", err)
		}
		return e, wf, r
	}
	t.Run("skip", func(t *testing.T) {
		t.Parallel()
		e, wf, r := setup(t)
		e.resolve(r.ID, kt.ResolveSkip)
		e.settle()
		e.noOpenRun(wf)
		if ev := e.events(wf, "job"); ev[0].Status != kt.EventSkipped {
			t.Fatalf("event %s", ev[0].Status)
		}
		if in := e.inputs(wf); in[0].Status != "skipped" {
			t.Fatalf("input %s", in[0].Status)
		}
		if o := e.outputs(wf); o[0].Status != "skipped" || o[0].ResolvedBy != kt.ResolvedByUserSkip {
			t.Fatalf("output %+v", o[0])
		}
		if n := len(e.sink.Writes()); n != 1 {
			t.Fatalf("writes %d", n)
		}
		assertSkippedNextRan(t, e, wf)
	})
	t.Run("didnt-happen", func(t *testing.T) {
		t.Parallel()
		e, wf, r := setup(t)
		e.resolve(r.ID, kt.ResolveDidntHappen)
		e.settle()
		e.noOpenRun(wf)
		// The person asserted it did not happen: keep sends it again, as told.
		if e.sink.Requests() != 2 {
			t.Fatalf("requests %d", e.sink.Requests())
		}
		if o := e.outputs(wf); o[0].Status != "applied" {
			t.Fatalf("output %+v", o[0])
		}
		if in := e.inputs(wf); in[0].Status != "done" {
			t.Fatalf("input %s", in[0].Status)
		}
	})
}

func TestTryAgainAfterReconcileExhausted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.sink.Queue(testsink.TimeoutAfter)
	e.sink.QueueProbe(500, 500, 500) // inline + 2 background attempts cannot tell
	wf := e.deploy(hookScript("", withProbe))
	e.settle()
	r := e.open(wf)
	if o := e.outputs(wf); o[0].Status != "indeterminate" || r.Status != kt.StatusReconciliation {
		t.Fatalf("output %+v run %s", o[0], r.Status)
	}
	if e.sink.Probes() != 3 {
		t.Fatalf("probes %d, want 3 (inline + 2)", e.sink.Probes())
	}
	e.resolve(r.ID, kt.ResolveTryAgain)
	e.settle()
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes %d", n)
	}
	if o := e.outputs(wf); o[0].Status != "applied" || o[0].ResolvedBy != kt.ResolvedByReconciliation {
		t.Fatalf("output %+v", o[0])
	}
}

func TestTransientBackoffThenEscalation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.sink.Queue(testsink.Status(429), testsink.Status(429), testsink.Status(429), testsink.Status(429))
	wf := e.deploy(hookScript("", ""))
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusTransient || r.NextAttemptAt != 0 || !strings.Contains(r.ErrorMessage, "keep retried 2 times and gave up") {
		t.Fatalf("run %s next=%d %q", r.Status, r.NextAttemptAt, r.ErrorMessage)
	}
	if e.sink.Requests() != 3 || len(e.sink.Writes()) != 0 {
		t.Fatalf("requests %d writes %d (want 1 + 2 retries, none applied)", e.sink.Requests(), len(e.sink.Writes()))
	}
	// The chain of retries is visible.
	n := 0
	for _, x := range e.runs(wf) {
		if x.Handler == "c" && x.RetryOf != "" {
			n++
		}
	}
	if n < 2 {
		t.Fatalf("retry runs %d", n)
	}
	st, _ := report.Statuses(e.ctx(), e.k.Store, wf)
	if st[0].Status != "blocked" || st[0].BlockedRunID != r.ID {
		t.Fatalf("status %+v", st[0])
	}
	e.resolve(r.ID, kt.ResolveTryAgain)
	e.settle()
	e.noOpenRun(wf)
	if len(e.sink.Writes()) != 1 {
		t.Fatalf("writes %d", len(e.sink.Writes()))
	}
}

func TestApprovalBoundToPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(hookScript(`requireApproval: ["http.request"],`, ""))
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusApproval || len(e.sink.Writes()) != 0 {
		t.Fatalf("run %s writes %d", r.Status, len(e.sink.Writes()))
	}
	cards, _ := report.Blocked(e.ctx(), e.k.Store, wf)
	if len(cards) != 1 || cards[0].Mutation == nil || !strings.Contains(cards[0].Mutation.Target, "/write/a") || strings.Join(cards[0].Actions, ",") != "approve,skip" {
		t.Fatalf("card %+v", cards)
	}
	var pc kt.PendingCall
	_ = json.Unmarshal(r.PendingCall, &pc)
	if pc.Args["json"] == nil {
		t.Fatalf("the preview shows the real call: %+v", pc)
	}
	if _, err := resolve(e.ctx(), e.k.Store, r.ID, kt.ResolveDidntHappen, nowT()); err == nil {
		t.Fatal("didnt-happen on an approval must be refused")
	}
	e.resolve(r.ID, kt.ResolveApprove)
	if _, err := resolve(e.ctx(), e.k.Store, r.ID, kt.ResolveApprove, nowT()); err == nil || !strings.Contains(err.Error(), "already has a decision") {
		t.Fatalf("second approve: %v", err)
	}
	e.settle()
	e.noOpenRun(wf)
	if len(e.sink.Writes()) != 1 {
		t.Fatalf("writes %d", len(e.sink.Writes()))
	}
}

func TestApprovalOfChangedPayloadAsksAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// mutate sends something new every time it runs: the approval of the
	// first payload must not cover the second.
	src := strings.Replace(hookScript(`requireApproval: true,`, ""), "json: p.data", "json: { id: p.data.id, nonce: ctx.random() }", 1)
	wf := e.deploy(src)
	e.settle()
	r := e.open(wf)
	e.resolve(r.ID, kt.ResolveApprove)
	e.settle()
	r2 := e.open(wf)
	if r2.ID == r.ID || r2.Status != kt.StatusApproval || len(e.sink.Writes()) != 0 {
		t.Fatalf("want a new approval; run %s %s writes %d", r2.ID, r2.Status, len(e.sink.Writes()))
	}
}

// assertSkippedNextRan checks that next ran with {status:'skipped'} and committed.
func assertSkippedNextRan(t *testing.T, e *env, wf string) {
	t.Helper()
	found := false
	_ = e.k.Store.View(e.ctx(), func(tx storeTx) error {
		rs, err := tx.RunList(wf, 0)
		for _, r := range rs {
			if r.Status == kt.StatusCommitted && string(r.MutationResult) == `{"status":"skipped"}` {
				found = true
			}
		}
		return err
	})
	if !found {
		t.Fatal("no committed run whose next saw {status:'skipped'}")
	}
}

// An approval binds the whole call, not only the payload: a repair that keeps
// the JSON but sends it to another URL must be approved again (issue 11 #4).
func TestApprovalBoundToTheTarget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := hookScript(`requireApproval: ["http.request"],`, "")
	wf := e.deploy(src)
	e.settle()
	r := e.open(wf)
	var pc kt.PendingCall
	_ = json.Unmarshal(r.PendingCall, &pc)
	if r.Status != kt.StatusApproval || !strings.Contains(pc.Target, "/write/a") || pc.CallHash == "" {
		t.Fatalf("run %s pending %+v", r.Status, pc)
	}
	// The person approves what the card shows; before keep carries it out, a
	// minor version changes the URL and keeps the JSON.
	if err := pause(e, wf); err != nil {
		t.Fatal(err)
	}
	e.resolve(r.ID, kt.ResolveApprove)
	e.redeploy(strings.Replace(src, `"%SINK%/write/" + p.data.id`, `"%SINK%/other/" + p.data.id`, 1), kt.DeployMinor)
	if err := resume(e, wf); err != nil {
		t.Fatal(err)
	}
	e.settle()
	r2 := e.open(wf)
	_ = json.Unmarshal(r2.PendingCall, &pc)
	if r2.Status != kt.StatusApproval || !strings.Contains(pc.Target, "/other/a") {
		t.Fatalf("want a new approval for the new target; run %s %s pending %s", r2.ID, r2.Status, r2.PendingCall)
	}
	if e.sink.Requests() != 0 {
		t.Fatalf("the sink got %d requests before the new target was approved", e.sink.Requests())
	}
	e.resolve(r2.ID, kt.ResolveApprove)
	e.settle()
	e.noOpenRun(wf)
	if w := e.sink.Writes(); len(w) != 1 {
		t.Fatalf("writes %d", len(w))
	}
}

// Issue 11 #5: a slow server applies the write after the call timed out; a
// probe right after the timeout finds nothing. keep must not take that one
// answer as proof: it checks again once the call's own timeout has passed,
// finds the write, and never sends it twice.
func TestASlowServerDoesNotGetTheWriteTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.sink.Queue(testsink.ApplyLate)
	wf := e.deploy(hookScript("", withProbe))
	e.settle()
	e.noOpenRun(wf)
	if w := e.sink.Writes(); len(w) != 1 {
		t.Fatalf("writes at the sink: %d, want exactly 1", len(w))
	}
	if e.sink.Requests() != 1 {
		t.Fatalf("requests at the sink: %d (keep sent the write again)", e.sink.Requests())
	}
	outs := e.outputs(wf)
	if len(outs) != 1 || outs[0].Status != "applied" || outs[0].ResolvedBy != kt.ResolvedByReconciliation {
		t.Fatalf("outputs %+v", outs)
	}
	// Issue 10 #6: after reconciliation the result is the probe's answer,
	// marked as such, and next saw exactly what keep outputs shows.
	var res map[string]any
	_ = json.Unmarshal(outs[0].Result, &res)
	if res["reconciled"] != true || !strings.HasPrefix(fmt.Sprint(res["via"]), "GET ") || res["status"] != float64(200) {
		t.Fatalf("reconciled result %s", outs[0].Result)
	}
	var committed kt.Run
	_ = e.k.Store.View(e.ctx(), func(tx storeTx) error {
		r, err := tx.RunGet(outs[0].RunID)
		committed = r
		return err
	})
	var mr struct {
		Status string          `json:"status"`
		Result json.RawMessage `json:"result"`
	}
	_ = json.Unmarshal(committed.MutationResult, &mr)
	var a, b any
	_ = json.Unmarshal(mr.Result, &a)
	_ = json.Unmarshal(outs[0].Result, &b)
	if mr.Status != "applied" || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("next saw %s, outputs show %s", committed.MutationResult, outs[0].Result)
	}
}

// TestGivingUpNamesTheAnswer: a run blocked after repeated 503s says what
// the service answered, not only that keep gave up (issue 27's papercut).
func TestGivingUpNamesTheAnswer(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		fault testsink.Fault
		opts  string
		want  string
	}{
		"429 on a write":              {testsink.Status(429), "", "429"},
		"503 then proven not applied": {testsink.Status(503), withProbe, "503"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, roomyPolicy)
			e.sink.Queue(c.fault, c.fault, c.fault, c.fault, c.fault, c.fault)
			wf := e.deploy(hookScript("", c.opts))
			e.settle()
			r := e.open(wf)
			if r.Status != kt.StatusTransient || !strings.Contains(r.ErrorMessage, "gave up") || !strings.Contains(r.ErrorMessage, c.want) {
				t.Fatalf("run %s %q", r.Status, r.ErrorMessage)
			}
			cards, err := report.Blocked(e.ctx(), e.k.Store, wf)
			if err != nil || len(cards) != 1 || !strings.Contains(cards[0].Reason, c.want) {
				t.Fatalf("card %+v %v", cards, err)
			}
		})
	}
}

// A 5xx answer to a write: the card names its target once ("POST X — POST X
// answered 503" read it twice) and says how to make keep able to check.
func TestUnknownOutcomeNamesTheTargetOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.sink.Queue(testsink.Status503)
	wf := e.deploy(hookScript("", ""))
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusReconciliation {
		t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
	}
	target := "POST " + e.sink.URL + "/write/a"
	want := "outcome unknown: " + target + " — answered 503 Service Unavailable"
	if !strings.HasPrefix(r.ErrorMessage, want) || strings.Count(r.ErrorMessage, target) != 1 {
		t.Fatalf("the run's error:\n%s\nwant it to start %q and name the target once", r.ErrorMessage, want)
	}
}
