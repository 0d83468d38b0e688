package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

func (e *Engine) needsApproval(prog *script.Program, m *connector.Method, tool string) bool {
	if m.RequiresApproval {
		return true
	}
	switch v := prog.Decl.RequireApproval.(type) {
	case bool:
		return v
	case []any:
		for _, x := range v {
			if s, _ := x.(string); s == tool+"."+m.Name || s == tool {
				return true
			}
		}
	}
	return false
}

func targetOf(m *connector.Method, tool string, args map[string]any) string {
	if m.Target != nil {
		return m.Target(args)
	}
	return tool + "." + m.Name
}

// executeMutation runs the captured mutation of a consumer run through the
// ledger (SPEC §7). It returns true when the mutation is applied and the run
// may go on to next (the outcome is held for the run's final commit).
func (x *runExec) executeMutation(call *capturedCall) (bool, error) {
	m, err := x.reg.Method(call.Tool, call.Method)
	if err != nil {
		return false, x.fail(kt.Errorf(kt.ClassLogic, "%v", err))
	}
	causes, attempt, unit, err := x.unitOfWork()
	if err != nil {
		return false, err
	}
	lc, err := x.previewLedger("mutating", call.Tool, m, call.Args, func(id Identity) string { return id.ConsumerKey(unit) })
	if err != nil {
		return false, err
	}
	if lc.needsApproval() {
		// The wait for a person is written with no look-up: make it first.
		if err := lc.lookup(); err != nil {
			return false, err
		}
	} else {
		// A write with no row yet (the usual case) is looked up by the
		// commit that records it in_flight, not in a read of its own.
		lc.unlooked = true
	}
	for {
		done, proceed, err := x.ledgerStep(lc, causes, attempt)
		if done {
			return proceed, err
		}
	}
}

// ledgerStep carries a consumer's write through the ledger from its
// identity's row (ledgerCall.step); done is false when the in_flight
// commit found a row after all (identityFound): the run is as it was, and
// the step is made again from that row.
func (x *runExec) ledgerStep(lc *ledgerCall, causes []string, attempt int) (done, proceed bool, err error) {
	switch lc.step() {
	case stepConflict:
		lc.noteConflict()
		pc := lc.pending()
		pc.Conflict = true
		x.run.PendingCall, _ = json.Marshal(pc)
		return true, false, x.fail(kt.Errorf(kt.ClassLogic,
			"%s was already applied for these inputs with different content, and the difference is significant; keep does not write it twice. Check the change, then skip or reprocess the input", lc.target))
	case stepReplay:
		lc.noteReplay()
		var result any
		if len(lc.mut.Result) > 0 {
			if err := decodeStored("result", "mutations", lc.mut.ID, lc.mut.Result, &result); err != nil {
				return true, false, x.fail(err)
			}
		}
		proceed, err = x.mutationApplied(&lc.mut, result, lc.mut.ResolvedBy)
		return true, proceed, err
	case stepBlocked:
		// A write that may have happened: never send it again blindly.
		lc.mut.RunID = x.run.ID
		return true, false, x.blockOnMutation(&lc.mut, "")
	case stepReconcile:
		lc.mut.RunID, lc.mut.Status = x.run.ID, kt.MutationNeedsReconcile
		proceed, err = x.reconcile(&lc.mut, inlineAttempt)
		return true, proceed, err
	}
	lc.newRow(causes, attempt)
	if lc.needsApproval() {
		return true, false, x.waitForApproval(lc)
	}
	run, tr := *x.run, *x.tr
	if err := advance(x.run, kt.PhaseMutating); err != nil {
		return true, false, err
	}
	if err := lc.recordInFlight(); err != nil {
		var found *identityFound
		if !errors.As(err, &found) {
			return true, false, err
		}
		// Nothing was written, and nothing was sent: the run goes back to
		// where it was, and the row found decides.
		*x.run, *x.tr = run, tr
		if err := lc.foundRow(found.row); err != nil {
			return true, false, err
		}
		return false, false, nil
	}
	res, next, err := lc.send()
	if err != nil {
		return true, false, err
	}
	switch next {
	case callApplied:
		proceed, err = x.mutationApplied(&lc.mut, res.Value, "")
		return true, proceed, err
	case callFailed:
		return true, false, x.mutationFailed(&lc.mut, res.Err, "")
	case callIndeterminate:
		lc.mut.Status = kt.MutationIndeterminate
		return true, false, x.blockOnMutation(&lc.mut, res.Err.Message)
	}
	lc.mut.Status = kt.MutationNeedsReconcile
	proceed, err = x.reconcile(&lc.mut, inlineAttempt)
	return true, proceed, err
}

// unitOfWork is what a consumer run's write descends from: the inputs
// behind its events and their newest attempt (causesOf), and the unit of
// work its identity is keyed by (UnitOfWork). The selection the run holds
// (x.reserve, not yet written) makes it without a read; a run resumed
// reads what it reserved.
func (x *runExec) unitOfWork() (causes []string, attempt int, unit []string, err error) {
	unitOf := func(tx store.Tx, evs []kt.Event) error {
		causes, attempt = causesOf(evs)
		x.noteInputs(causes...)
		var err error
		unit, err = UnitOfWork(tx, *x.run, evs)
		return err
	}
	if len(x.reserve) > 0 {
		err = unitOf(nil, x.reserve)
	} else {
		err = x.e.store.View(x.ctx, func(tx store.Tx) error {
			evs, err := tx.EventsReservedBy(x.run.ID)
			if err != nil {
				return err
			}
			return unitOf(tx, evs)
		})
	}
	return causes, attempt, unit, err
}

// waitForApproval parks the run until a person approves exactly this call.
func (x *runExec) waitForApproval(lc *ledgerCall) error {
	run := x.run
	if err := advance(run, kt.PhaseMutating); err != nil {
		return err
	}
	run.Status, run.ErrorClass, run.UpdatedAt = kt.StatusApproval, "", x.e.NowMs()
	run.ErrorMessage = fmt.Sprintf("waiting for approval: %s", lc.target)
	lc.note("waiting for approval", true)
	return x.save(nil)
}

func (x *runExec) toolTimeout(args map[string]any) time.Duration {
	if ms, ok := args["timeoutMs"].(float64); ok && ms > 0 {
		return time.Duration(ms)*time.Millisecond + time.Second
	}
	return x.pol.ToolTimeout
}

// toMutating moves a run that took over a ledger row (recovery, a retry)
// into the mutating phase.
func toMutating(run *kt.Run) error {
	if run.Phase == kt.PhaseMutating {
		return nil
	}
	return advance(run, kt.PhaseMutating)
}

// saveWithMutation writes the run and its ledger row in one transition.
func (x *runExec) saveWithMutation(mut *kt.Mutation) error {
	return x.save(func(tx store.Tx) error { return transition.PutMutation(tx, *mut) })
}

// mutationApplied takes a write's answer (applied) in: the run goes on to
// next, and its final commit records the outcome with next's publishes and
// the consumption (emit). Until then the row stays in_flight (or as it
// was): a crash in between is recovered by reconciling it.
func (x *runExec) mutationApplied(mut *kt.Mutation, value any, resolvedBy string) (bool, error) {
	run, now := x.run, x.e.NowMs()
	result, err := json.Marshal(value)
	if err != nil {
		return false, x.fail(kt.Errorf(kt.ClassInternal, "encode the result of %s: %v", mut.Target, err))
	}
	if mut.Status != kt.MutationApplied {
		markApplied(mut, result, resolvedBy, now)
	}
	mut.RunID = run.ID
	if err := toMutating(run); err != nil {
		return false, err
	}
	if err := advance(run, kt.PhaseMutated); err != nil {
		return false, err
	}
	mr, _ := json.Marshal(map[string]any{"status": "applied", "result": json.RawMessage(result)})
	run.MutationResult, run.Status, run.ErrorClass, run.ErrorMessage, run.UpdatedAt = mr, kt.StatusActive, "", "", now
	x.phaseNote("mutated", "mutation applied: "+mut.Target)
	held := *mut
	x.outcome = &held
	return true, nil
}

// mutationFailed records a definite failure: the write did not happen, so the
// run fails by the error's class and a retry runs mutate again — the ledger
// row and the run in one transaction (issue 24 #3: two once let a crash
// between them leave the run waiting behind a stale message).
func (x *runExec) mutationFailed(mut *kt.Mutation, cause *kt.Error, resolvedBy string) error {
	markFailed(mut, cause, resolvedBy, x.e.NowMs())
	return x.failWith(cause, func(tx store.Tx) error { return transition.PutMutation(tx, *mut) })
}

// blockOnMutation escalates: the outcome is unknown and cannot be checked.
func (x *runExec) blockOnMutation(mut *kt.Mutation, why string) error {
	run, now := x.run, x.e.NowMs()
	if err := toMutating(run); err != nil {
		return err
	}
	mut.Status, mut.UpdatedAt = kt.MutationIndeterminate, now
	if why == "" {
		why = mut.ErrorMessage
	}
	if why == "" {
		// Recovered after a crash: nothing recorded an answer.
		why = "keep stopped while the call was under way, before its answer was recorded"
	}
	if err := x.e.ensurePendingCall(run, *mut); err != nil {
		return err
	}
	verify := "keep cannot check whether it happened (this call has no reconcile): look at the target yourself, then choose It didn't happen (send again) or Skip"
	if mut.Tool == "http" && mut.Method == "request" {
		// The one connector whose check the script gives: say how, so the
		// next uncertain call needs nobody.
		verify = "keep cannot check whether it happened (this call has no reconcile; give it one, reconcile: { method: \"GET\", url: \"…/{idempotencyKey}\" }, and keep checks such a call itself): look at the target yourself, then choose It didn't happen (send again) or Skip"
	}
	if mut.CanReconcile {
		verify = "keep could not establish whether it happened; Try again to check once more, or look yourself and choose It didn't happen or Skip"
	}
	run.Status, run.ErrorClass, run.UpdatedAt = kt.StatusReconciliation, kt.ClassIndeterminate, now
	run.ErrorMessage = x.e.unknownOutcome(*mut, why, verify)
	x.tr.add(kt.TraceEntry{At: now, Phase: "mutating", Kind: "error", Outcome: "indeterminate", Text: run.ErrorMessage})
	x.e.log.Warn("mutation indeterminate", "workflow", x.wf.Name, "run", run.ID, "target", mut.Target)
	return x.saveWithMutation(mut)
}

// unknownOutcome is the card's reason for a write whose outcome keep could
// not establish — the one rule of every path: a consumer's write or an
// item's, after the call, after the inline check or after the background
// attempts, in keep run or keep serve. It says what, why, what the
// connector says a person looks for at the target (connector.Method's
// Evidence: email.send's Message-ID) when the reason does not name it
// already, and what a person can do.
func (e *Engine) unknownOutcome(mut kt.Mutation, why, verify string) string {
	// The connector's message often starts with the target the card
	// names already ("POST X — POST X: …" read twice).
	why = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(why, mut.Target+": "), mut.Target+" "), ".")
	if m, err := e.registry.Method(mut.Tool, mut.Method); err == nil && m.Evidence != nil {
		if call, err := reconcileCall(mut); err == nil {
			if mark, where := m.Evidence(call); mark != "" && !strings.Contains(why, mark) {
				why += "; to check yourself, look for " + mark + " " + where
			}
		}
	}
	return fmt.Sprintf("outcome unknown: %s — %s. %s", mut.Target, why, verify)
}

// ensurePendingCall gives a run that took over a ledger row (a retry after a
// crash, which does not run mutate again) the preview of the call as it was
// sent, so its card shows what, to what, and how.
func (e *Engine) ensurePendingCall(run *kt.Run, mut kt.Mutation) error {
	if len(run.PendingCall) > 0 {
		return nil
	}
	var args map[string]any
	if len(mut.Params) > 0 {
		if err := decodeStored("params", "mutations", mut.ID, mut.Params, &args); err != nil {
			return err
		}
	}
	pc := kt.PendingCall{Tool: mut.Tool, Method: mut.Method, Target: mut.Target, PayloadHash: mut.PayloadHash}
	if m, err := e.registry.Method(mut.Tool, mut.Method); err == nil && args != nil {
		identity, payload := m.Split(args)
		pc.Args, pc.CallHash = m.Redact(args), CallHash(mut.Tool, mut.Method, mut.Target, identity, payload)
	}
	run.PendingCall, _ = json.Marshal(pc)
	return nil
}

// reconcile asks the connector whether an uncertain write of a consumer run
// happened, and carries the answer out. The inline attempt (right after the
// call, or on recovery) does not count against the policy's background
// attempts.
func (x *runExec) reconcile(mut *kt.Mutation, when reconcileAttempt) (bool, error) {
	if err := x.e.ensurePendingCall(x.run, *mut); err != nil {
		return false, err
	}
	ans := x.askReconcile(mut, "mutating", when)
	switch ans.step {
	case recApplied:
		return x.mutationApplied(mut, ans.value, kt.ResolvedByReconciliation)
	case recUncheckable:
		return false, x.blockOnMutation(mut, "")
	case recExhausted:
		why := fmt.Sprintf("reconciliation could not tell whether it happened (%d background attempts)", mut.ReconcileAttempts)
		if ans.err != nil {
			why += "; last answer: " + ans.err.Error()
		}
		return false, x.blockOnMutation(mut, why)
	}
	if err := toMutating(x.run); err != nil {
		return false, err
	}
	switch ans.step {
	case recFailed:
		// Proven not to have happened: mutate runs again with the same PrepareResult.
		// What the call answered stays in the message: a person who finds the run
		// blocked after the retries must see why the write kept failing (a 503).
		why := fmt.Sprintf("reconciliation found that %s did not happen", mut.Target)
		if mut.ErrorMessage != "" {
			why += " (the call's answer: " + mut.ErrorMessage + ")"
		}
		return false, x.mutationFailed(mut, kt.Errorf(kt.ClassTransient, "%s; it will be sent again", why), kt.ResolvedByReconciliation)
	case recRecheck:
		return false, x.checkAgainAt(mut, ans.settleAt, fmt.Sprintf("%s was not found at the target yet; a slow service may still apply it, so keep checks once more in %s before it would send it again",
			mut.Target, time.Duration(ans.settleAt-x.e.NowMs())*time.Millisecond))
	}
	return false, x.checkAgainAt(mut, ans.retryAt, fmt.Sprintf("outcome of %s is not known yet; keep checks again in %s (attempt %d of %d)",
		mut.Target, ans.delay, mut.ReconcileAttempts+1, x.pol.ReconcileAttempts))
}

// checkAgainAt keeps a write whose outcome is not known yet in
// needs_reconcile until at, and the run waiting on it with why.
func (x *runExec) checkAgainAt(mut *kt.Mutation, at int64, why string) error {
	run, now := x.run, x.e.NowMs()
	markRecheck(mut, at, now)
	mut.RunID = run.ID
	run.Status, run.ErrorClass, run.ErrorMessage, run.UpdatedAt = kt.StatusReconciliation, kt.ClassIndeterminate, why, now
	x.tr.add(kt.TraceEntry{At: now, Phase: "mutating", Kind: "phase", Text: why})
	return x.saveWithMutation(mut)
}

// lookupMutation finds a ledger row by identity; found is false when there is none.
func (e *Engine) lookupMutation(ctx context.Context, identityKey string) (mut kt.Mutation, found bool, err error) {
	err = e.store.View(store.NoSnapshot(ctx), func(tx store.Tx) error { // one read
		var gerr error
		mut, gerr = tx.MutationByIdentity(identityKey)
		switch {
		case gerr == nil:
			found = true
		case !errors.Is(gerr, kt.ErrNotFound):
			return gerr
		}
		return nil
	})
	return mut, found, err
}

// comparePayloads compares the payload of an applied mutation with a new
// one (ch 14 §14.5): no comparePayload means any difference is significant.
func comparePayloads(m *connector.Method, applied kt.Mutation, payload map[string]any) connector.Comparison {
	if m.ComparePayload == nil || applied.PrunedAt != 0 {
		// Pruned (issue 44): its params are gone, and a comparison with
		// nothing (the method's comparePayload of {}) could call the
		// change minor and pass it silently.
		return connector.Significant
	}
	var oldArgs map[string]any
	_ = json.Unmarshal(applied.Params, &oldArgs)
	_, oldPayload := m.Split(oldArgs)
	return m.ComparePayload(oldPayload, payload)
}

// handlerRowOf returns the row a caller has just read (the scheduler step
// reads them all), or reads it.
func (e *Engine) handlerRowOf(ctx context.Context, wf, name string, read *kt.Handler) (*kt.Handler, error) {
	if read != nil {
		return read, nil
	}
	h, err := e.handlerRow(ctx, wf, name)
	if err != nil {
		return nil, err
	}
	return &h, nil
}

// handlerRow reads the durable state of one handler.
func (e *Engine) handlerRow(ctx context.Context, wf, name string) (kt.Handler, error) {
	var h kt.Handler
	err := e.store.View(ctx, func(tx store.Tx) error {
		var err error
		h, err = tx.HandlerGet(wf, name)
		return err
	})
	return h, err
}
