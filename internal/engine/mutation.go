package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// PendingCall is the preview of a mutation kept on a run: what a person
// approves and what a blocked card shows. Its args are redacted.
type PendingCall struct {
	Tool        string         `json:"tool"`
	Method      string         `json:"method"`
	Target      string         `json:"target"`
	Args        map[string]any `json:"args"`
	PayloadHash string         `json:"payloadHash"`
	// CallHash binds an approval to the whole call (engine.CallHash).
	CallHash string `json:"callHash"`
	// DoneItem is the key of the item this call was made on although the
	// item is done: the run failed before sending it, and Skip cannot end
	// that block; Reprocess of the item can (ch 14 §14.2.2).
	DoneItem string `json:"doneItem,omitempty"`
}

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
// may go on to next.
func (e *Engine) executeMutation(ctx context.Context, wf kt.Workflow, prog *script.Program, run *kt.Run, tr *trace, call *capturedCall, reserve []kt.Event) (bool, error) {
	m, err := e.registry.Method(call.Tool, call.Method)
	if err != nil {
		return false, e.fail(ctx, wf, run, tr, kt.Errorf(kt.ClassLogic, "%v", err))
	}
	reserved := reserve
	if reserve == nil {
		if err := e.store.View(ctx, func(tx store.Tx) error {
			var err error
			reserved, err = tx.EventsReservedBy(run.ID)
			return err
		}); err != nil {
			return false, err
		}
	}
	// flush makes the reservations durable on paths that do not record
	// in_flight (a cached result, a blocked ledger row, an approval wait).
	flush := func() error {
		if len(reserve) == 0 {
			return nil
		}
		evs := reserve
		reserve = nil
		if err := e.store.Update(ctx, func(tx store.Tx) error {
			if err := writeReservations(tx, run, evs, e.nowMs()); err != nil {
				return err
			}
			if run.Phase == kt.PhasePrepared {
				return putRun(tx, *run)
			}
			return nil
		}); err != nil {
			return err
		}
		e.crashPoint(CrashAfterPrepared)
		return nil
	}
	causes := map[string]bool{}
	attempt := 1
	for _, ev := range reserved {
		for _, c := range ev.CausedBy {
			causes[c] = true
		}
		if ev.Attempt > attempt {
			attempt = ev.Attempt
		}
	}
	itemKeys := make([]string, 0, len(causes))
	for c := range causes {
		itemKeys = append(itemKeys, c)
	}
	sort.Strings(itemKeys)
	var unit []string
	if err := e.store.View(ctx, func(tx store.Tx) error {
		var err error
		unit, err = UnitOfWork(tx, *run, reserved)
		return err
	}); err != nil {
		return false, err
	}
	identity, payload := m.Split(call.Args)
	subkey, _ := call.Args["subkey"].(string)
	ikey := ConsumerIdentityKey(wf.Name, run.Handler, unit, call.Tool, call.Method, identity, subkey)
	phash := PayloadHash(payload)
	target := targetOf(m, call.Tool, call.Args)
	chash := CallHash(call.Tool, call.Method, target, identity, payload)
	pending := PendingCall{Tool: call.Tool, Method: call.Method, Target: target, Args: m.Redact(call.Args), PayloadHash: phash, CallHash: chash}
	pendingJSON, _ := json.Marshal(pending)
	run.PendingCall = pendingJSON

	mut, found, err := e.lookupMutation(ctx, ikey)
	if err != nil {
		return false, err
	}
	now := e.nowMs()
	if found && mut.Status != kt.MutationFailed && mut.Status != kt.MutationSkipped {
		if err := flush(); err != nil {
			return false, err
		}
	}
	var cmp connector.Comparison
	switch onFound(found, mut, phash, func() connector.Comparison { cmp = comparePayloads(m, mut, payload); return cmp }) {
	case stepConflict:
		tr.add(TraceEntry{At: now, Phase: "mutating", Kind: "mutation", Method: call.Tool + "." + call.Method, Outcome: "already applied; payload differs: " + string(cmp)})
		return false, e.fail(ctx, wf, run, tr, kt.Errorf(kt.ClassLogic,
			"%s was already applied for these inputs with different content, and the difference is significant; keep does not write it twice. Check the change, then skip or reprocess the input", target))
	case stepReplay:
		outcome := "already applied: cached result returned, not sent again"
		if cmp != "" {
			outcome = "already applied; payload differs: " + string(cmp)
		}
		tr.add(TraceEntry{At: now, Phase: "mutating", Kind: "mutation", Method: call.Tool + "." + call.Method, Outcome: outcome})
		var result any
		_ = json.Unmarshal(mut.Result, &result)
		return e.mutationApplied(ctx, wf, run, tr, &mut, result, mut.ResolvedBy)
	case stepBlocked:
		// A write that may have happened: never send it again blindly.
		mut.RunID = run.ID
		return false, e.blockOnMutation(ctx, wf, run, tr, &mut, "")
	case stepReconcile:
		mut.RunID, mut.Status = run.ID, kt.MutationNeedsReconcile
		return e.reconcile(ctx, wf, run, tr, &mut, m, true)
	}
	if !found {
		mut = kt.Mutation{ID: newID(), Workflow: wf.Name, Handler: run.Handler, ItemKeys: itemKeys, Attempt: attempt, Tool: call.Tool, Method: call.Method,
			IdentityKey: ikey, IdempotencyKey: "keep-" + ikey[:32], CreatedAt: now}
	}
	if e.needsApproval(prog, m, call.Tool) && run.ApprovedHash != chash {
		if err := flush(); err != nil {
			return false, err
		}
		if err := advance(run, kt.PhaseMutating); err != nil {
			return false, err
		}
		run.Status, run.ErrorClass, run.UpdatedAt = kt.StatusApproval, "", now
		run.ErrorMessage = fmt.Sprintf("waiting for approval: %s", target)
		tr.add(TraceEntry{At: now, Phase: "mutating", Kind: "mutation", Method: call.Tool + "." + call.Method, Args: pending.Args, Outcome: "waiting for approval"})
		run.Trace = tr.json()
		return false, e.update(ctx, wf.Name, func(tx store.Tx) error { return putRun(tx, *run) })
	}
	params, _ := json.Marshal(call.Args)
	mut.RunID, mut.Params, mut.PayloadHash, mut.Target = run.ID, params, phash, target
	mut.CanReconcile = m.CanReconcile(call.Args)
	mut.Status, mut.ErrorClass, mut.ErrorMessage, mut.ResolvedBy, mut.Result, mut.UpdatedAt = kt.MutationInFlight, "", "", "", nil, now
	mut.SentAt, mut.NotFoundAt = now, 0
	if err := advance(run, kt.PhaseMutating); err != nil {
		return false, err
	}
	tr.add(TraceEntry{At: now, Phase: "mutating", Kind: "mutation", Method: call.Tool + "." + call.Method, Args: pending.Args, Outcome: "in_flight"})
	run.Trace, run.UpdatedAt = tr.json(), now
	// in_flight is on disk before the external call starts (ch 13 §13.7.1).
	if err := e.update(ctx, wf.Name, func(tx store.Tx) error {
		if err := writeReservations(tx, run, reserve, now); err != nil {
			return err
		}
		if err := putMutation(tx, mut); err != nil {
			return err
		}
		return putRun(tx, *run)
	}); err != nil {
		return false, fmt.Errorf("record mutation in_flight (the call was not started): %w", err)
	}
	if len(reserve) > 0 {
		e.crashPoint(CrashAfterPrepared)
	}
	e.crashPoint(CrashAfterInFlight)

	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, e.toolTimeout(call.Args))
	res := m.Do(cctx, connector.Call{Args: call.Args, IdempotencyKey: mut.IdempotencyKey})
	cancel()
	e.crashPoint(CrashAfterCall)
	outcome := map[connector.Outcome]string{connector.OutcomeApplied: "applied", connector.OutcomeFailed: "failed", connector.OutcomeUncertain: "uncertain"}[res.Outcome]
	if res.Err != nil {
		outcome += ": " + res.Err.Message
	}
	tr.add(TraceEntry{At: start.UnixMilli(), Phase: "mutating", Kind: "call", Method: call.Tool + "." + call.Method, Args: pending.Args, Duration: time.Since(start).Milliseconds(), Outcome: outcome})

	switch onOutcome(res.Outcome, mut.CanReconcile) {
	case callApplied:
		return e.mutationApplied(ctx, wf, run, tr, &mut, res.Value, "")
	case callFailed:
		return false, e.mutationFailed(ctx, wf, run, tr, &mut, res.Err, "")
	case callIndeterminate:
		mut.ErrorClass, mut.ErrorMessage, mut.Status = kt.ClassIndeterminate, res.Err.Message, kt.MutationIndeterminate
		return false, e.blockOnMutation(ctx, wf, run, tr, &mut, res.Err.Message)
	}
	mut.ErrorClass, mut.ErrorMessage, mut.Status = kt.ClassIndeterminate, res.Err.Message, kt.MutationNeedsReconcile
	return e.reconcile(ctx, wf, run, tr, &mut, m, true)
}

func (e *Engine) toolTimeout(args map[string]any) time.Duration {
	if ms, ok := args["timeoutMs"].(float64); ok && ms > 0 {
		return time.Duration(ms)*time.Millisecond + time.Second
	}
	return e.policy.ToolTimeout
}

func (e *Engine) mutationApplied(ctx context.Context, wf kt.Workflow, run *kt.Run, tr *trace, mut *kt.Mutation, value any, resolvedBy string) (bool, error) {
	now := e.nowMs()
	result, err := json.Marshal(value)
	if err != nil {
		return false, e.fail(ctx, wf, run, tr, kt.Errorf(kt.ClassInternal, "encode the result of %s: %v", mut.Target, err))
	}
	if mut.Status != kt.MutationApplied {
		mut.Status, mut.Result, mut.UpdatedAt = kt.MutationApplied, result, now
		mut.ErrorClass, mut.ErrorMessage = "", ""
		if resolvedBy != "" {
			mut.ResolvedBy = resolvedBy
		}
	}
	mut.RunID = run.ID
	if run.Phase != kt.PhaseMutating {
		if err := advance(run, kt.PhaseMutating); err != nil {
			return false, err
		}
	}
	if err := advance(run, kt.PhaseMutated); err != nil {
		return false, err
	}
	mr, _ := json.Marshal(map[string]any{"status": "applied", "result": json.RawMessage(result)})
	run.MutationResult, run.Status, run.ErrorClass, run.ErrorMessage, run.UpdatedAt = mr, kt.StatusActive, "", "", now
	tr.add(TraceEntry{At: now, Phase: "mutated", Kind: "phase", Text: "mutation applied: " + mut.Target})
	run.Trace = tr.json()
	if err := e.update(ctx, wf.Name, func(tx store.Tx) error {
		if err := putMutation(tx, *mut); err != nil {
			return err
		}
		return putRun(tx, *run)
	}); err != nil {
		return false, err
	}
	e.crashPoint(CrashAfterApplied)
	return true, nil
}

// mutationFailed records a definite failure: the write did not happen, so the
// run fails by the error's class and a retry runs mutate again.
func (e *Engine) mutationFailed(ctx context.Context, wf kt.Workflow, run *kt.Run, tr *trace, mut *kt.Mutation, cause *kt.Error, resolvedBy string) error {
	mut.Status, mut.ErrorClass, mut.ErrorMessage, mut.UpdatedAt = kt.MutationFailed, cause.Class, cause.Message, e.nowMs()
	if resolvedBy != "" {
		mut.ResolvedBy = resolvedBy
	}
	if err := e.store.Update(ctx, func(tx store.Tx) error { return putMutation(tx, *mut) }); err != nil {
		return err
	}
	return e.fail(ctx, wf, run, tr, cause)
}

// blockOnMutation escalates: the outcome is unknown and cannot be checked.
func (e *Engine) blockOnMutation(ctx context.Context, wf kt.Workflow, run *kt.Run, tr *trace, mut *kt.Mutation, why string) error {
	now := e.nowMs()
	if run.Phase != kt.PhaseMutating {
		if err := advance(run, kt.PhaseMutating); err != nil {
			return err
		}
	}
	mut.Status, mut.UpdatedAt = kt.MutationIndeterminate, now
	if why == "" {
		why = mut.ErrorMessage
	}
	if why == "" {
		// Recovered after a crash: nothing recorded an answer.
		why = "keep stopped while the call was under way, before its answer was recorded"
	}
	e.ensurePendingCall(run, *mut)
	verify := "keep cannot check whether it happened (this call has no reconcile): look at the target yourself, then choose It didn't happen (send again) or Skip"
	if mut.CanReconcile {
		verify = "keep could not establish whether it happened; Try again to check once more, or look yourself and choose It didn't happen or Skip"
	}
	run.Status, run.ErrorClass, run.UpdatedAt = kt.StatusReconciliation, kt.ClassIndeterminate, now
	run.ErrorMessage = fmt.Sprintf("outcome unknown: %s — %s. %s", mut.Target, strings.TrimSuffix(why, "."), verify)
	tr.add(TraceEntry{At: now, Phase: "mutating", Kind: "error", Outcome: "indeterminate", Text: run.ErrorMessage})
	run.Trace = tr.json()
	e.log.Warn("mutation indeterminate", "workflow", wf.Name, "run", run.ID, "target", mut.Target)
	return e.update(ctx, wf.Name, func(tx store.Tx) error {
		if err := putMutation(tx, *mut); err != nil {
			return err
		}
		return putRun(tx, *run)
	})
}

// ensurePendingCall gives a run that took over a ledger row (a retry after a
// crash, which does not run mutate again) the preview of the call as it was
// sent, so its card shows what, to what, and how.
func (e *Engine) ensurePendingCall(run *kt.Run, mut kt.Mutation) {
	if len(run.PendingCall) > 0 {
		return
	}
	var args map[string]any
	_ = json.Unmarshal(mut.Params, &args)
	pc := PendingCall{Tool: mut.Tool, Method: mut.Method, Target: mut.Target, PayloadHash: mut.PayloadHash}
	if m, err := e.registry.Method(mut.Tool, mut.Method); err == nil && args != nil {
		identity, payload := m.Split(args)
		pc.Args, pc.CallHash = m.Redact(args), CallHash(mut.Tool, mut.Method, mut.Target, identity, payload)
	}
	run.PendingCall, _ = json.Marshal(pc)
}

// reconcile asks the connector whether an uncertain write happened. The
// inline attempt (right after the call, or on recovery) does not count
// against the policy's background attempts.
func (e *Engine) reconcile(ctx context.Context, wf kt.Workflow, run *kt.Run, tr *trace, mut *kt.Mutation, m *connector.Method, inline bool) (bool, error) {
	e.ensurePendingCall(run, *mut)
	call, err := reconcileCall(*mut)
	if err != nil || m.Reconcile == nil || !mut.CanReconcile {
		return false, e.blockOnMutation(ctx, wf, run, tr, mut, "")
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, e.toolTimeout(call.Args))
	status, value, rerr := m.Reconcile(cctx, call)
	cancel()
	text := string(status)
	if rerr != nil {
		text += ": " + rerr.Error()
	}
	tr.add(TraceEntry{At: start.UnixMilli(), Phase: "mutating", Kind: "call", Method: mut.Tool + "." + mut.Method + ".reconcile", Duration: time.Since(start).Milliseconds(), Outcome: text})
	if !inline && status != connector.ReconcileApplied && status != connector.ReconcileFailed {
		mut.ReconcileAttempts++
	}
	var settleAt int64
	if status == connector.ReconcileFailed {
		settleAt = e.notHappenedYet(mut, call.Args)
	}
	switch onReconcile(status, settleAt, reconcileExhausted(inline, mut.ReconcileAttempts, e.policy.ReconcileAttempts)) {
	case recApplied:
		return e.mutationApplied(ctx, wf, run, tr, mut, value, kt.ResolvedByReconciliation)
	case recRecheck:
		if run.Phase != kt.PhaseMutating {
			_ = advance(run, kt.PhaseMutating)
		}
		return false, e.recheckLater(ctx, wf, run, tr, mut, settleAt)
	case recFailed:
		if run.Phase != kt.PhaseMutating {
			_ = advance(run, kt.PhaseMutating)
		}
		// Proven not to have happened: mutate runs again with the same PrepareResult.
		return false, e.mutationFailed(ctx, wf, run, tr, mut,
			kt.Errorf(kt.ClassTransient, "reconciliation found that %s did not happen; it will be sent again", mut.Target), kt.ResolvedByReconciliation)
	case recExhausted:
		why := fmt.Sprintf("reconciliation could not tell whether it happened (%d background attempts)", mut.ReconcileAttempts)
		if rerr != nil {
			why += "; last answer: " + rerr.Error()
		}
		return false, e.blockOnMutation(ctx, wf, run, tr, mut, why)
	}
	now := e.nowMs()
	delay := config.Backoff(e.policy.ReconcileBackoff, e.policy.ReconcileBackoffMax, mut.ReconcileAttempts+1)
	mut.Status, mut.NextReconcileAt, mut.UpdatedAt, mut.RunID = kt.MutationNeedsReconcile, now+delay.Milliseconds(), now, run.ID
	if run.Phase != kt.PhaseMutating {
		if err := advance(run, kt.PhaseMutating); err != nil {
			return false, err
		}
	}
	run.Status, run.ErrorClass, run.UpdatedAt = kt.StatusReconciliation, kt.ClassIndeterminate, now
	run.ErrorMessage = fmt.Sprintf("outcome of %s is not known yet; keep checks again in %s (attempt %d of %d)", mut.Target, delay, mut.ReconcileAttempts+1, e.policy.ReconcileAttempts)
	run.Trace = tr.json()
	return false, e.update(ctx, wf.Name, func(tx store.Tx) error {
		if err := putMutation(tx, *mut); err != nil {
			return err
		}
		return putRun(tx, *run)
	})
}

// notHappenedYet applies the settle rule to a reconcile that answered "did
// not happen" (issue 11 #5: a server that took 2 s got a write twice when a
// probe 1 s after a 1 s timeout found nothing yet). Such an answer is proof
// only when an earlier one agrees and the settle time (the policy's, or the
// call's own timeout when longer) has passed since the call went out. It
// returns 0 when the answer is proof, else when to check again; it records
// the first answer on mut.
func (e *Engine) notHappenedYet(mut *kt.Mutation, args map[string]any) int64 {
	now := e.nowMs()
	settle := e.toolTimeout(args)
	if e.policy.ReconcileSettle > settle {
		settle = e.policy.ReconcileSettle
	}
	sent := mut.SentAt
	if sent == 0 {
		sent = mut.CreatedAt
	}
	settled := sent + settle.Milliseconds()
	if mut.NotFoundAt > 0 && mut.NotFoundAt < now && now >= settled {
		return 0
	}
	if mut.NotFoundAt == 0 {
		mut.NotFoundAt = now
	}
	return max(settled, now+settleRecheck.Milliseconds())
}

// settleRecheck is the least wait between two "did not happen" answers.
const settleRecheck = time.Second

// recheckLater keeps a write whose reconcile found nothing yet in
// needs_reconcile until the settle time has passed; it does not count as
// one of the policy's attempts.
func (e *Engine) recheckLater(ctx context.Context, wf kt.Workflow, run *kt.Run, tr *trace, mut *kt.Mutation, at int64) error {
	now := e.nowMs()
	mut.Status, mut.NextReconcileAt, mut.UpdatedAt, mut.RunID = kt.MutationNeedsReconcile, at, now, run.ID
	run.Status, run.ErrorClass, run.UpdatedAt = kt.StatusReconciliation, kt.ClassIndeterminate, now
	run.ErrorMessage = fmt.Sprintf("%s was not found at the target yet; a slow service may still apply it, so keep checks once more in %s before it would send it again", mut.Target, time.Duration(at-now)*time.Millisecond)
	tr.add(TraceEntry{At: now, Phase: "mutating", Kind: "phase", Text: run.ErrorMessage})
	run.Trace = tr.json()
	return e.update(ctx, wf.Name, func(tx store.Tx) error {
		if err := putMutation(tx, *mut); err != nil {
			return err
		}
		return putRun(tx, *run)
	})
}

// putRun saves a run after checking its status change against the run
// status machine (keeptype's table): the one writer of runs in the engine.
// A forbidden move — a finished run written over, which a stale step could
// attempt — is refused as an internal error and nothing is written.
func putRun(tx store.Tx, r kt.Run) error {
	prev, err := tx.RunGet(r.ID)
	from := kt.Status("")
	switch {
	case err == nil:
		from = prev.Status
	case !errors.Is(err, kt.ErrNotFound):
		return err
	}
	if !kt.RunStatusTransitionAllowed(from, r.Status) {
		return kt.Errorf(kt.ClassInternal, "run %s: status %q → %q is not allowed", r.ID, from, r.Status)
	}
	return tx.RunPut(r)
}

// putItem saves an item after checking a task item's state change against
// the item machine of ch 12 §12.4 (keeptype's table); an input's status is
// derived, not stored, and is not checked here.
func putItem(tx store.Tx, it kt.Input) error {
	if it.Kind == "task" {
		prev, err := tx.InputGet(it.ID)
		from := ""
		switch {
		case err == nil:
			from = prev.Status
		case !errors.Is(err, kt.ErrNotFound):
			return err
		}
		if from != it.Status && !kt.ItemTransitionAllowed(from, it.Status) {
			return kt.Errorf(kt.ClassInternal, "item %s: state %q → %q is not allowed", it.Key, from, it.Status)
		}
	}
	return tx.InputPut(it)
}

// putMutation saves a ledger row after checking its state change against
// the state machine of ch 13 (keeptype's table); a forbidden move is a host bug.
func putMutation(tx store.Tx, m kt.Mutation) error {
	prev, err := tx.MutationGet(m.ID)
	from := kt.MutationStatus("")
	switch {
	case err == nil:
		from = prev.Status
	case !errors.Is(err, kt.ErrNotFound):
		return err
	}
	if from != m.Status && !kt.MutationTransitionAllowed(from, m.Status) {
		return kt.Errorf(kt.ClassInternal, "mutation %s: ledger state %q → %q is not allowed", m.ID, from, m.Status)
	}
	return tx.MutationPut(m)
}

// lookupMutation finds a ledger row by identity; found is false when there is none.
func (e *Engine) lookupMutation(ctx context.Context, identityKey string) (mut kt.Mutation, found bool, err error) {
	err = e.store.View(ctx, func(tx store.Tx) error {
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
	if m.ComparePayload == nil {
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
