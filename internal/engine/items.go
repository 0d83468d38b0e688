package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/schedule"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// taskState is what the host knows while an item script runs.
type taskState struct {
	prog   *script.Program
	wf     kt.Workflow
	item   *kt.Input // the item whose handler is running
	isDone bool
	// failStatus is the item status to record when the run fails inside the
	// item; empty means "by the error's class".
	failStatus string
	mutations  int
}

// ItemView is what ctx.item shows a handler.
type ItemView struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	IsDone  bool   `json:"isDone"`
	Attempt int    `json:"attempt"`
}

func itemDone(status string) bool { return status == kt.ItemDone || status == kt.ItemSkipped }

// execTask runs an item script (SPEC §8.3): the handler always runs, items
// are entered and left through withItem, mutations run one at a time
// through the ledger, and replay returns cached results.
func (e *Engine) execTask(ctx context.Context, wf kt.Workflow, prog *script.Program, run *kt.Run, hrow *kt.Handler) (err error) {
	defer func() {
		if err == nil {
			e.runFinished(run)
		}
	}()
	tr := loadTrace(run.Trace)
	tr.add(TraceEntry{At: e.nowMs(), Kind: "phase", Phase: string(run.Phase), Text: "task " + run.Handler + " started"})
	if hrow, err = e.handlerRowOf(ctx, wf.Name, run.Handler, hrow); err != nil {
		return err
	}
	h := &host{e: e, ctx: ctx, run: run, phase: "task", tr: tr, handler: run.Handler, task: &taskState{prog: prog, wf: wf}}
	out, err := e.invoke(prog, script.Invocation{Kind: kt.HandlerTask, Name: run.Handler, Phase: "run",
		Args: []json.RawMessage{hrow.State}, Tools: e.registry.Tools(), Host: h.call, Limits: e.limits()})
	if err == nil && h.task.item != nil {
		err = kt.Errorf(kt.ClassLogic, "task %s returned while item %q was still being processed; await every withItem", run.Handler, h.task.item.Key)
	}
	if err == nil {
		err = checkSize("the task's returned state", out.Value)
	}
	if err != nil {
		return e.failTask(ctx, wf, run, tr, h.task, err)
	}
	decl := prog.Decl.Tasks[run.Handler]
	sched, err := schedule.Parse(decl.Schedule)
	if err != nil {
		return e.failTask(ctx, wf, run, tr, h.task, kt.Errorf(kt.ClassLogic, "task %s: %v", run.Handler, err))
	}
	now := e.nowMs()
	return e.update(ctx, wf.Name, func(tx store.Tx) error {
		return e.commitScheduled(tx, wf.Name, run, tr, out.Value, sched, now, fmt.Sprintf("%d mutations", h.task.mutations))
	})
}

// failTask records the item's state, then fails the run by class.
func (e *Engine) failTask(ctx context.Context, wf kt.Workflow, run *kt.Run, tr *trace, ts *taskState, cause error) error {
	if ts.item != nil && !ts.isDone {
		status := ts.failStatus
		if status == "" {
			switch kt.ClassOf(cause) {
			case kt.ClassIndeterminate, kt.ClassPermission, kt.ClassPrecondition:
				status = kt.ItemNeedsAttention
			default:
				status = kt.ItemFailed
			}
		}
		if err := e.setItemStatus(ctx, ts.item, status, run); err != nil {
			return err
		}
	}
	return e.fail(ctx, wf, run, tr, cause)
}

func (e *Engine) setItemStatus(ctx context.Context, it *kt.Input, status string, run *kt.Run) error {
	now := e.nowMs()
	return e.store.Update(ctx, func(tx store.Tx) error {
		cur, err := tx.InputGet(it.ID)
		if err != nil {
			return err
		}
		cur.Status, cur.UpdatedAt, cur.LastRun, cur.LastVersion = status, now, run.ID, run.Version
		if err := putItem(tx, cur); err != nil {
			return err
		}
		*it = cur
		return tx.ItemAttemptPut(kt.ItemAttempt{ItemID: cur.ID, Attempt: cur.CurrentAttempt, Status: status, Version: run.Version, StartedAt: now, UpdatedAt: now})
	})
}

// itemCall serves withItem's host calls.
func (h *host) itemCall(method string, raw json.RawMessage) (json.RawMessage, error) {
	ts := h.task
	if ts == nil {
		return nil, violation("withItem is only available in item scripts (tasks)")
	}
	var req struct {
		ID    any    `json:"id"`
		Title any    `json:"title"`
		Name  string `json:"name"`
		Msg   string `json:"message"`
		Stack string `json:"stack"`
	}
	_ = json.Unmarshal(raw, &req)
	id := ""
	switch v := req.ID.(type) {
	case string:
		id = v
	case float64:
		id = fmt.Sprint(v)
	}
	switch method {
	case "item.nested":
		cur := ""
		if ts.item != nil {
			cur = ts.item.Key
		}
		return nil, kt.Errorf(kt.ClassLogic, "withItem(%q) was called inside the handler of item %q: items cannot be nested; process them one after another", id, cur)
	case "item.badHandler":
		return nil, kt.Errorf(kt.ClassLogic, "withItem(%q, title, handler): handler must be a function", id)
	case "item.fail":
		key := ""
		if ts.item != nil {
			key = ts.item.Key
		}
		msg := fmt.Sprintf("task %s: the handler of item %q threw %s: %s", h.run.Handler, key, req.Name, req.Msg)
		if s := ts.prog.CleanStack(req.Stack); s != "" {
			msg += " (" + s + ")"
		}
		return nil, kt.Errorf(kt.ClassLogic, "%s", msg)
	case "item.exit":
		if ts.item == nil {
			return nil, kt.Errorf(kt.ClassInternal, "item exit without an item")
		}
		if !ts.isDone {
			if err := h.e.setItemStatus(h.ctx, ts.item, kt.ItemDone, h.run); err != nil {
				return nil, kt.Errorf(kt.ClassInternal, "record item %s done: %v", ts.item.Key, err)
			}
		}
		h.tr.add(TraceEntry{At: h.e.nowMs(), Phase: "task", Kind: "item", Text: "item " + ts.item.Key + " done"})
		ts.item, ts.isDone = nil, false
		return nil, nil
	case "item.enter":
	default:
		return nil, kt.Errorf(kt.ClassLogic, "ctx.%s does not exist", method)
	}
	title, _ := req.Title.(string)
	switch {
	case id == "":
		return nil, kt.Errorf(kt.ClassLogic, "withItem needs a stable id as its first argument, e.g. `email:${e.id}`")
	case len(id) > 500:
		return nil, kt.Errorf(kt.ClassLogic, "withItem: the item id is %d characters; keep it under 500", len(id))
	case title == "":
		return nil, kt.Errorf(kt.ClassLogic, "withItem(%q): the title must say what the item is, e.g. `Email from alice@example.com: \"Invoice\"`", id)
	case ts.item != nil:
		return nil, kt.Errorf(kt.ClassLogic, "withItem(%q) started while item %q is being processed: items cannot be nested", id, ts.item.Key)
	}
	now := h.e.nowMs()
	var it kt.Input
	err := h.e.store.Update(h.ctx, func(tx store.Tx) error {
		cur, err := tx.InputGetByKey(h.run.Workflow, id)
		switch {
		case errors.Is(err, kt.ErrNotFound):
			cur = kt.Input{ID: newID(), Workflow: h.run.Workflow, Key: id, Kind: "task", Title: title, Status: kt.ItemProcessing,
				CurrentAttempt: 1, CreatedBy: h.run.ID, CreatedAt: now}
		case err != nil:
			return err
		case cur.Kind != "task":
			return kt.Errorf(kt.ClassLogic, "withItem(%q): that key belongs to an input of this workflow; choose item ids with a prefix of their own", id)
		}
		it = cur
		if itemDone(cur.Status) && cur.Title == title {
			return nil // nothing changes for a done item
		}
		// The item will point at this run: the run is recorded with it.
		h.run.UpdatedAt = now
		if err := putRun(tx, *h.run); err != nil {
			return err
		}
		if !itemDone(cur.Status) {
			cur.Status = kt.ItemProcessing
		}
		cur.Title, cur.LastRun, cur.LastVersion, cur.UpdatedAt = title, h.run.ID, h.run.Version, now
		if err := putItem(tx, cur); err != nil {
			return err
		}
		it = cur
		if cur.Status == kt.ItemProcessing {
			return tx.ItemAttemptPut(kt.ItemAttempt{ItemID: cur.ID, Attempt: cur.CurrentAttempt, Status: kt.ItemProcessing, Version: h.run.Version, StartedAt: now, UpdatedAt: now})
		}
		return nil
	})
	if err != nil {
		var ke *kt.Error
		if errors.As(err, &ke) {
			return nil, err
		}
		return nil, kt.Errorf(kt.ClassInternal, "record item %s: %v", id, err)
	}
	ts.item, ts.isDone = &it, itemDone(it.Status)
	h.tr.add(TraceEntry{At: now, Phase: "task", Kind: "item", Text: fmt.Sprintf("item %s (%s, attempt %d)", it.Key, it.Status, it.CurrentAttempt)})
	return json.Marshal(ItemView{ID: it.Key, Title: it.Title, IsDone: ts.isDone, Attempt: it.CurrentAttempt})
}

// itemMutation runs one mutation of an item handler through the ledger
// (ch 14): applied → the cached result, unknown → blocked, otherwise
// in_flight, the call, the outcome. It returns the result to the script or
// an error that aborts the run.
func (h *host) itemMutation(tool string, m *connector.Method, args map[string]any) (json.RawMessage, error) {
	e, ts, run := h.e, h.task, h.run
	ctx := h.ctx
	if ts.item == nil {
		return nil, violation("ctx.%s.%s is a mutation outside withItem; in an item script every mutation belongs to an item: wrap it in ctx.withItem(id, title, async (ctx) => { ... })", tool, m.Name)
	}
	it := ts.item
	if ts.isDone {
		pc := PendingCall{Tool: tool, Method: m.Name, Target: targetOf(m, tool, args), Args: m.Redact(args), DoneItem: it.Key}
		run.PendingCall, _ = json.Marshal(pc)
		return nil, kt.Errorf(kt.ClassLogic, "ctx.%s.%s on item %q, which is already %s: completed items cannot produce new side effects — check ctx.item.isDone before mutating (deploy the fix with `keep deploy --minor`), or reprocess the item if it must be done again", tool, m.Name, it.Key, it.Status)
	}
	ts.mutations++
	identity, payload := m.Split(args)
	subkey, _ := args["subkey"].(string)
	ikey := IdentityKey(run.Workflow, run.Handler, []string{it.Key}, it.CurrentAttempt, tool, m.Name, identity, subkey)
	phash := PayloadHash(payload)
	target := targetOf(m, tool, args)
	redacted := m.Redact(args)
	chash := CallHash(tool, m.Name, target, identity, payload)
	pending := PendingCall{Tool: tool, Method: m.Name, Target: target, Args: redacted, PayloadHash: phash, CallHash: chash}
	run.PendingCall, _ = json.Marshal(pending)
	mut, found, lerr := e.lookupMutation(ctx, ikey)
	if lerr != nil {
		return nil, kt.Errorf(kt.ClassInternal, "read the mutation ledger: %v", lerr)
	}
	now := e.nowMs()
	cached := func() (json.RawMessage, error) {
		h.tr.add(TraceEntry{At: now, Phase: "task", Kind: "mutation", Method: tool + "." + m.Name, Args: redacted, Outcome: "already applied: cached result returned, not sent again"})
		if len(mut.Result) == 0 {
			return json.RawMessage("null"), nil
		}
		return mut.Result, nil
	}
	var cmp connector.Comparison
	switch onFound(found, mut, phash, func() connector.Comparison { cmp = comparePayloads(m, mut, payload); return cmp }) {
	case stepConflict:
		h.tr.add(TraceEntry{At: now, Phase: "task", Kind: "mutation", Method: tool + "." + m.Name, Outcome: "already applied; payload differs: " + string(cmp)})
		ts.failStatus = kt.ItemNeedsAttention
		return nil, kt.Errorf(kt.ClassLogic, "item %q: %s was already applied in this attempt with different content, and the difference is significant; keep does not write it again. Look at the change, then skip or reprocess the item", it.Key, target)
	case stepReplay:
		if cmp != "" {
			h.tr.add(TraceEntry{At: now, Phase: "task", Kind: "mutation", Method: tool + "." + m.Name, Outcome: "already applied; payload differs: " + string(cmp)})
		}
		return cached()
	case stepBlocked:
		// This run now waits on it: the card and the person's actions
		// must find the mutation through this run.
		ts.failStatus = kt.ItemNeedsAttention
		mut.RunID, mut.UpdatedAt = run.ID, now
		run.Trace, run.UpdatedAt = h.tr.json(), now
		if err := e.store.Update(ctx, func(tx store.Tx) error {
			if err := putRun(tx, *run); err != nil {
				return err
			}
			return putMutation(tx, mut)
		}); err != nil {
			return nil, kt.Errorf(kt.ClassInternal, "record the blocked mutation: %v", err)
		}
		return nil, kt.Errorf(kt.ClassIndeterminate, "item %q: the outcome of %s is unknown; a person must decide (try again, it didn't happen, or skip)", it.Key, target)
	case stepReconcile:
		mut.RunID, mut.Status = run.ID, kt.MutationNeedsReconcile
		return h.itemReconcile(&mut, m)
	}
	if !found {
		mut = kt.Mutation{ID: newID(), Workflow: run.Workflow, Handler: run.Handler, ItemKeys: []string{it.ID}, Attempt: it.CurrentAttempt, Tool: tool, Method: m.Name,
			IdentityKey: ikey, IdempotencyKey: "keep-" + ikey[:32], CreatedAt: now}
	}
	if e.needsApproval(ts.prog, m, tool) && run.ApprovedHash != chash {
		ts.failStatus = kt.ItemProcessing
		return nil, &approvalWait{target: target}
	}
	params, _ := json.Marshal(args)
	mut.RunID, mut.Params, mut.PayloadHash, mut.Target = run.ID, params, phash, target
	mut.CanReconcile = m.CanReconcile(args)
	mut.Status, mut.ErrorClass, mut.ErrorMessage, mut.ResolvedBy, mut.Result, mut.UpdatedAt = kt.MutationInFlight, "", "", "", nil, now
	mut.SentAt, mut.NotFoundAt = now, 0
	h.tr.add(TraceEntry{At: now, Phase: "task", Kind: "mutation", Method: tool + "." + m.Name, Args: redacted, Outcome: "in_flight"})
	run.Trace, run.UpdatedAt = h.tr.json(), now
	if err := e.store.Update(ctx, func(tx store.Tx) error {
		// The run is on disk with its in_flight mutation, so a crash leaves a
		// run to recover and the ledger never points at a run that does not exist.
		if err := putRun(tx, *run); err != nil {
			return err
		}
		return putMutation(tx, mut)
	}); err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "record mutation in_flight (the call was not started): %v", err)
	}
	e.crashPoint(CrashAfterInFlight)
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, e.toolTimeout(args))
	res := m.Do(cctx, connector.Call{Args: args, IdempotencyKey: mut.IdempotencyKey})
	cancel()
	e.crashPoint(CrashAfterCall)
	outcome := map[connector.Outcome]string{connector.OutcomeApplied: "applied", connector.OutcomeFailed: "failed", connector.OutcomeUncertain: "uncertain"}[res.Outcome]
	if res.Err != nil {
		outcome += ": " + res.Err.Message
	}
	h.tr.add(TraceEntry{At: start.UnixMilli(), Phase: "task", Kind: "call", Method: tool + "." + m.Name, Args: redacted, Duration: time.Since(start).Milliseconds(), Outcome: outcome})
	switch onOutcome(res.Outcome, mut.CanReconcile) {
	case callApplied:
		return h.itemApplied(&mut, res.Value, "")
	case callFailed:
		mut.Status, mut.ErrorClass, mut.ErrorMessage, mut.UpdatedAt = kt.MutationFailed, res.Err.Class, res.Err.Message, e.nowMs()
		if err := e.store.Update(ctx, func(tx store.Tx) error { return putMutation(tx, mut) }); err != nil {
			return nil, kt.Errorf(kt.ClassInternal, "record mutation failed: %v", err)
		}
		return nil, res.Err
	case callIndeterminate:
		mut.ErrorClass, mut.ErrorMessage = kt.ClassIndeterminate, res.Err.Message
		return nil, h.itemBlock(&mut)
	}
	mut.ErrorClass, mut.ErrorMessage, mut.Status = kt.ClassIndeterminate, res.Err.Message, kt.MutationNeedsReconcile
	return h.itemReconcile(&mut, m)
}

// approvalWait ends a task run that reached a mutation needing approval.
type approvalWait struct{ target string }

func (a *approvalWait) Error() string { return "waiting for approval: " + a.target }

func (h *host) itemApplied(mut *kt.Mutation, value any, resolvedBy string) (json.RawMessage, error) {
	result, err := json.Marshal(value)
	if err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "encode the result of %s: %v", mut.Target, err)
	}
	mut.Status, mut.Result, mut.UpdatedAt, mut.ErrorClass, mut.ErrorMessage = kt.MutationApplied, result, h.e.nowMs(), "", ""
	if resolvedBy != "" {
		mut.ResolvedBy = resolvedBy
	}
	if err := h.e.store.Update(h.ctx, func(tx store.Tx) error { return putMutation(tx, *mut) }); err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "record mutation applied: %v", err)
	}
	h.e.crashPoint(CrashAfterApplied)
	return result, nil
}

// itemBlock makes a mutation indeterminate and aborts the run for a person.
func (h *host) itemBlock(mut *kt.Mutation) error {
	mut.Status, mut.UpdatedAt = kt.MutationIndeterminate, h.e.nowMs()
	if err := h.e.store.Update(h.ctx, func(tx store.Tx) error { return putMutation(tx, *mut) }); err != nil {
		return kt.Errorf(kt.ClassInternal, "record mutation indeterminate: %v", err)
	}
	h.task.failStatus = kt.ItemNeedsAttention
	verify := "keep cannot check whether it happened (no reconcile): look at the target, then choose It didn't happen or Skip"
	if mut.CanReconcile {
		verify = "keep could not establish whether it happened; Try again, or look yourself and choose It didn't happen or Skip"
	}
	return kt.Errorf(kt.ClassIndeterminate, "outcome unknown: %s — %s. %s", mut.Target, mut.ErrorMessage, verify)
}

// itemReconcile is the inline reconcile of an item mutation.
func (h *host) itemReconcile(mut *kt.Mutation, m *connector.Method) (json.RawMessage, error) {
	call, err := reconcileCall(*mut)
	if err != nil || !mut.CanReconcile || m.Reconcile == nil {
		return nil, h.itemBlock(mut)
	}
	cctx, cancel := context.WithTimeout(h.ctx, h.e.toolTimeout(call.Args))
	status, value, rerr := m.Reconcile(cctx, call)
	cancel()
	text := string(status)
	if rerr != nil {
		text += ": " + rerr.Error()
	}
	h.tr.add(TraceEntry{At: h.e.nowMs(), Phase: "task", Kind: "call", Method: mut.Tool + "." + mut.Method + ".reconcile", Outcome: text})
	var settleAt int64
	if status == connector.ReconcileFailed {
		settleAt = h.e.notHappenedYet(mut, call.Args)
	}
	switch onReconcile(status, settleAt, reconcileExhausted(true, mut.ReconcileAttempts, h.e.policy.ReconcileAttempts)) {
	case recApplied:
		return h.itemApplied(mut, value, kt.ResolvedByReconciliation)
	case recRecheck:
		now := h.e.nowMs()
		mut.Status, mut.NextReconcileAt, mut.UpdatedAt = kt.MutationNeedsReconcile, settleAt, now
		if err := h.e.store.Update(h.ctx, func(tx store.Tx) error { return putMutation(tx, *mut) }); err != nil {
			return nil, kt.Errorf(kt.ClassInternal, "record needs_reconcile: %v", err)
		}
		h.task.failStatus = kt.ItemNeedsAttention
		return nil, kt.Errorf(kt.ClassIndeterminate, "%s was not found at the target yet; a slow service may still apply it, so keep checks once more before it would send it again", mut.Target)
	case recFailed:
		mut.Status, mut.ResolvedBy, mut.UpdatedAt = kt.MutationFailed, kt.ResolvedByReconciliation, h.e.nowMs()
		if err := h.e.store.Update(h.ctx, func(tx store.Tx) error { return putMutation(tx, *mut) }); err != nil {
			return nil, kt.Errorf(kt.ClassInternal, "record mutation failed: %v", err)
		}
		return nil, kt.Errorf(kt.ClassTransient, "reconciliation found that %s did not happen; it will be sent again", mut.Target)
	case recExhausted:
		return nil, h.itemBlock(mut)
	}
	now := h.e.nowMs()
	delay := config.Backoff(h.e.policy.ReconcileBackoff, h.e.policy.ReconcileBackoffMax, 1)
	mut.Status, mut.NextReconcileAt, mut.UpdatedAt = kt.MutationNeedsReconcile, now+delay.Milliseconds(), now
	if err := h.e.store.Update(h.ctx, func(tx store.Tx) error { return putMutation(tx, *mut) }); err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "record needs_reconcile: %v", err)
	}
	h.task.failStatus = kt.ItemNeedsAttention
	return nil, kt.Errorf(kt.ClassIndeterminate, "outcome of %s is not known yet; keep checks again in %s", mut.Target, delay)
}

// reconcileTaskMutation is a background reconcile attempt for a task run
// blocked on a mutation; a settled outcome lets the task run again (replay).
func (e *Engine) reconcileTaskMutation(ctx context.Context, wf kt.Workflow, run kt.Run, mut kt.Mutation) error {
	m, err := e.registry.Method(mut.Tool, mut.Method)
	if err != nil {
		return err
	}
	call, err := reconcileCall(mut)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, e.toolTimeout(call.Args))
	status, value, rerr := m.Reconcile(cctx, call)
	cancel()
	now := e.nowMs()
	tr := loadTrace(run.Trace)
	text := string(status)
	if rerr != nil {
		text += ": " + rerr.Error()
	}
	tr.add(TraceEntry{At: now, Phase: "task", Kind: "call", Method: mut.Tool + "." + mut.Method + ".reconcile", Outcome: text})
	run.Trace, run.UpdatedAt = tr.json(), now
	var settleAt int64
	switch status {
	case connector.ReconcileFailed:
		settleAt = e.notHappenedYet(&mut, call.Args)
	case connector.ReconcileApplied:
	default:
		mut.ReconcileAttempts++
	}
	switch onReconcile(status, settleAt, reconcileExhausted(false, mut.ReconcileAttempts, e.policy.ReconcileAttempts)) {
	case recApplied:
		result, _ := json.Marshal(value)
		mut.Status, mut.Result, mut.ResolvedBy, mut.ErrorClass, mut.ErrorMessage = kt.MutationApplied, result, kt.ResolvedByReconciliation, "", ""
		run.Action = ActionRetry
	case recRecheck:
		mut.NextReconcileAt = settleAt
	case recFailed:
		mut.Status, mut.ResolvedBy = kt.MutationFailed, kt.ResolvedByReconciliation
		run.Action = ActionRetry
	case recExhausted:
		mut.Status = kt.MutationIndeterminate
		run.ErrorMessage = fmt.Sprintf("outcome unknown: %s — reconciliation could not tell whether it happened (%d attempts). Try again, or look yourself and choose It didn't happen or Skip", mut.Target, mut.ReconcileAttempts)
	case recRetryLater:
		mut.NextReconcileAt = now + config.Backoff(e.policy.ReconcileBackoff, e.policy.ReconcileBackoffMax, mut.ReconcileAttempts+1).Milliseconds()
	}
	mut.UpdatedAt = now
	return e.update(ctx, wf.Name, func(tx store.Tx) error {
		if err := putMutation(tx, mut); err != nil {
			return err
		}
		return putRun(tx, run)
	})
}
