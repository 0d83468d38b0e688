package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/schedule"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// taskState is what the host knows while an item script runs.
type taskState struct {
	item   *kt.Input // the item whose handler is running
	isDone bool
	// failStatus is the item status to record when the run fails inside the
	// item; empty means "by the error's class".
	failStatus kt.ItemStatus
	mutations  int
	// In a replay of done work (runExec.impact): wasDone is whether the
	// current item was done before the replay (it runs as if not), entered
	// the items the recorded run entered, and seen those entered again.
	wasDone bool
	renamed bool // the current item is new where done ones were not entered again
	entered map[string]bool
	seen    map[string]bool
}

// ItemView is what ctx.item shows a handler.
type ItemView struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	IsDone  bool   `json:"isDone"`
	Attempt int    `json:"attempt"`
}

// task runs an item script (SPEC §8.3): the handler always runs, items
// are entered and left through withItem, mutations run one at a time
// through the ledger, and replay returns cached results.
func (x *runExec) task(hrow *kt.Handler) (err error) {
	defer func() { x.finished(err) }()
	defer x.startPhase(string(phaseTask)).end(x)
	x.phaseNote(string(x.run.Phase), "task "+x.run.Handler+" started")
	if hrow, err = x.e.handlerRowOf(x.ctx, x.wf.Name, x.run.Handler, hrow); err != nil {
		return err
	}
	h := x.host(phaseTask)
	h.task = &taskState{}
	out, err := x.invoke(h, hrow.State)
	if err == nil && h.task.item != nil {
		err = kt.Errorf(kt.ClassLogic, "task %s returned while item %q was still being processed; await every withItem", x.run.Handler, h.task.item.Key)
	}
	if err == nil {
		err = checkSize("the task's returned state", out.Value)
	}
	if err != nil {
		return x.failTask(h.task, err)
	}
	sched, err := schedule.Parse(x.prog.Decl.Tasks[x.run.Handler].Schedule)
	if err != nil {
		return x.failTask(h.task, kt.Errorf(kt.ClassLogic, "task %s: %v", x.run.Handler, err))
	}
	summary := fmt.Sprintf("%d mutations", h.task.mutations)
	return x.e.update(x.ctx, x.wf.Name, func(tx store.Tx) error {
		return x.commitScheduled(tx, scheduledEnd{state: out.Value, sched: sched, summary: summary})
	})
}

// failTask records the item's state, then fails the run by class.
func (x *runExec) failTask(ts *taskState, cause error) error {
	if errors.Is(cause, store.ErrFenced) {
		return cause // not the item's failure: see fail
	}
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
		if err := x.e.setItemStatus(x.ctx, ts.item, status, x.run); err != nil {
			return err
		}
	}
	return x.fail(cause)
}

func (e *Engine) setItemStatus(ctx context.Context, it *kt.Input, status kt.ItemStatus, run *kt.Run) error {
	now := e.NowMs()
	return e.store.Update(ctx, func(tx store.Tx) error {
		cur, err := tx.InputGet(it.ID)
		if err != nil {
			return err
		}
		cur.Status, cur.UpdatedAt, cur.LastRun, cur.LastVersion = status, now, run.ID, run.Version
		if err := transition.PutItem(tx, cur); err != nil {
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
		ID    json.RawMessage `json:"id"`
		Title any             `json:"title"`
		Name  string          `json:"name"`
		Msg   string          `json:"message"`
		Stack string          `json:"stack"`
	}
	_ = json.Unmarshal(raw, &req)
	id := scriptID(req.ID)
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
		if s := h.prog.CleanStack(req.Stack); s != "" {
			msg += " (" + s + ")"
		}
		return nil, kt.Errorf(kt.ClassLogic, "%s", msg)
	case "item.exit":
		return h.itemExit()
	case "item.enter":
	default:
		return nil, kt.Errorf(kt.ClassLogic, "ctx.%s does not exist", method)
	}
	title, _ := req.Title.(string)
	return h.enterItem(id, title)
}

// itemExit leaves the current item: done, unless it already was.
func (h *host) itemExit() (json.RawMessage, error) {
	ts := h.task
	if ts.item == nil {
		return nil, kt.Errorf(kt.ClassInternal, "item exit without an item")
	}
	if !ts.isDone && !h.dry {
		if err := h.e.setItemStatus(h.ctx, ts.item, kt.ItemDone, h.run); err != nil {
			return nil, kt.Errorf(kt.ClassInternal, "record item %s done: %v", ts.item.Key, err)
		}
	}
	h.tr.add(kt.TraceEntry{At: h.e.NowMs(), Phase: "task", Kind: "item", Text: "item " + ts.item.Key + " done"})
	ts.item, ts.isDone, h.item = nil, false, ""
	return nil, nil
}

// enterItem starts (or resumes) the item id: withItem's entry.
func (h *host) enterItem(id, title string) (json.RawMessage, error) {
	ts := h.task
	switch {
	case id == "":
		return nil, kt.Errorf(kt.ClassLogic, "withItem needs a stable id as its first argument, e.g. `email:${e.id}`")
	case title == "":
		return nil, kt.Errorf(kt.ClassLogic, "withItem(%q): the title must say what the item is, e.g. `Email from alice@example.com: \"Invoice\"`", id)
	case ts.item != nil:
		return nil, kt.Errorf(kt.ClassLogic, "withItem(%q) started while item %q is being processed: items cannot be nested", id, ts.item.Key)
	}
	// An item's id and title are made from outside data (a mail's id and
	// subject): one over keep's bound must not stop the task.
	id, title = h.boundedID("withItem", "item id", id), h.shortTitle("withItem", title)
	now := h.e.NowMs()
	var it kt.Input
	if h.dry {
		return h.enterItemDry(id, title)
	}
	wroteRun := false
	// The run as stored: putRun advances h.run (its revision) inside the
	// transaction, and a transaction that fails — at a later write or at
	// its COMMIT, where PostgreSQL reports held-back writes and the run's
	// conditional write — stored none of it.
	stored := *h.run
	err := h.e.store.Update(h.ctx, func(tx store.Tx) error {
		wroteRun = false
		cur, err := tx.InputGetByKey(h.run.Workflow, id)
		switch {
		case errors.Is(err, kt.ErrNotFound):
			cur = kt.Input{ID: transition.NewID(), Workflow: h.run.Workflow, Key: id, Kind: kt.KindTask, Title: title, Status: kt.ItemProcessing,
				CurrentAttempt: 1, CreatedBy: h.run.ID, CreatedAt: now}
		case err != nil:
			return err
		case cur.Kind != kt.KindTask:
			return kt.Errorf(kt.ClassLogic, "withItem(%q): that key belongs to an input of this workflow; choose item ids with a prefix of their own", id)
		}
		it = cur
		if cur.Status.Finished() && cur.Title == title {
			return nil // nothing changes for a done item
		}
		// The item will point at this run: the run is recorded with it.
		h.run.UpdatedAt = now
		if err := transition.PutRun(tx, h.run); err != nil {
			return err
		}
		wroteRun = true
		if !cur.Status.Finished() {
			cur.Status = kt.ItemProcessing
		}
		cur.Title, cur.LastRun, cur.LastVersion, cur.UpdatedAt = title, h.run.ID, h.run.Version, now
		if err := transition.PutItem(tx, cur); err != nil {
			return err
		}
		it = cur
		if cur.Status == kt.ItemProcessing {
			return tx.ItemAttemptPut(kt.ItemAttempt{ItemID: cur.ID, Attempt: cur.CurrentAttempt, Status: kt.ItemProcessing, Version: h.run.Version, StartedAt: now, UpdatedAt: now})
		}
		return nil
	})
	if err != nil {
		*h.run = stored
		return nil, storeError(err, "record item "+id)
	}
	if wroteRun {
		h.unstored = false // stored now: a later save must not take it for new
	}
	ts.item, ts.isDone = &it, it.Status.Finished()
	h.item = it.ID
	h.noteInputs(it.ID)
	h.tr.add(kt.TraceEntry{At: now, Phase: "task", Kind: "item", Text: fmt.Sprintf("item %s (%s, attempt %d)", it.Key, it.Status, it.CurrentAttempt)})
	return json.Marshal(ItemView{ID: it.Key, Title: it.Title, IsDone: ts.isDone, Attempt: it.CurrentAttempt})
}

// itemMutation runs one mutation of an item handler through the ledger
// (ch 14): applied → the cached result, unknown → blocked, otherwise
// in_flight, the call, the outcome. It returns the result to the script or
// an error that aborts the run.
func (h *host) itemMutation(tool string, m *connector.Method, args map[string]any) (json.RawMessage, error) {
	ts, run := h.task, h.run
	// Outside withItem the table refused it already (host.allowed).
	it := ts.item
	if ts.isDone {
		pc := kt.PendingCall{Tool: tool, Method: m.Name, Target: targetOf(m, tool, args), Args: m.Redact(args), DoneItem: it.Key}
		run.PendingCall, _ = json.Marshal(pc)
		return nil, kt.Errorf(kt.ClassLogic, "ctx.%s.%s on item %q, which is already %s: completed items cannot produce new side effects — check ctx.item.isDone before mutating (deploy the fix with `keep deploy --minor`), or reprocess the item if it must be done again", tool, m.Name, it.Key, it.Status)
	}
	ts.mutations++
	lc, err := h.openLedger("task", tool, m, args, func(id Identity) string {
		return id.ItemKey([]string{it.Key}, it.CurrentAttempt)
	})
	if err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "read the mutation ledger: %v", err)
	}
	pc := lc.pending()
	pc.Item = it.Key
	run.PendingCall, _ = json.Marshal(pc)
	if h.dry {
		return h.itemMutationDry(lc)
	}
	switch lc.step() {
	case stepConflict:
		lc.noteConflict()
		ts.failStatus = kt.ItemNeedsAttention
		return nil, kt.Errorf(kt.ClassLogic, "item %q: %s was already applied in this attempt with different content, and the difference is significant; keep does not write it again. Look at the change, then skip or reprocess the item", it.Key, lc.target)
	case stepReplay:
		lc.noteReplay()
		return lc.cachedResult(), nil
	case stepBlocked:
		// This run now waits on it: the card and the person's actions
		// must find the mutation through this run.
		ts.failStatus = kt.ItemNeedsAttention
		lc.mut.RunID, lc.mut.UpdatedAt, run.UpdatedAt = run.ID, h.e.NowMs(), h.e.NowMs()
		if err := h.saveWithMutation(&lc.mut); err != nil {
			return nil, kt.Errorf(kt.ClassInternal, "record the blocked mutation: %v", err)
		}
		return nil, kt.Errorf(kt.ClassIndeterminate, "item %q: the outcome of %s is unknown; a person must decide (try again, it didn't happen, or skip)", it.Key, lc.target)
	case stepReconcile:
		lc.mut.RunID, lc.mut.Status = run.ID, kt.MutationNeedsReconcile
		return h.itemReconcile(&lc.mut)
	}
	lc.newRow([]string{it.ID}, it.CurrentAttempt)
	if lc.needsApproval() {
		ts.failStatus = kt.ItemProcessing
		return nil, &approvalWait{target: lc.target}
	}
	if err := lc.recordInFlight(); err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "%v", err)
	}
	res, next, err := lc.send()
	if err != nil {
		return nil, err
	}
	switch next {
	case callApplied:
		return h.itemApplied(&lc.mut, res.Value, "")
	case callFailed:
		markFailed(&lc.mut, res.Err, "", h.e.NowMs())
		if err := h.writeMutation(&lc.mut); err != nil {
			return nil, err
		}
		return nil, res.Err
	case callIndeterminate:
		return nil, h.itemBlock(&lc.mut)
	}
	lc.mut.Status = kt.MutationNeedsReconcile
	return h.itemReconcile(&lc.mut)
}

// approvalWait ends a task run that reached a mutation needing approval.
type approvalWait struct{ target string }

func (a *approvalWait) Error() string { return "waiting for approval: " + a.target }

// writeMutation writes an item's ledger row alone (the run is written
// when the item script ends).
func (h *host) writeMutation(mut *kt.Mutation) error {
	if err := h.e.store.Update(h.ctx, func(tx store.Tx) error { return transition.PutMutation(tx, *mut) }); err != nil {
		return kt.Errorf(kt.ClassInternal, "record mutation %s: %v", mut.Status, err)
	}
	return nil
}

func (h *host) itemApplied(mut *kt.Mutation, value any, resolvedBy string) (json.RawMessage, error) {
	result, err := json.Marshal(value)
	if err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "encode the result of %s: %v", mut.Target, err)
	}
	markApplied(mut, result, resolvedBy, h.e.NowMs())
	if err := h.writeMutation(mut); err != nil {
		return nil, err
	}
	h.e.CrashPoint(CrashAfterApplied)
	return result, nil
}

// itemBlock makes a mutation indeterminate and aborts the run for a
// person, saying why by the call's own answer.
func (h *host) itemBlock(mut *kt.Mutation) error {
	mut.Status, mut.UpdatedAt = kt.MutationIndeterminate, h.e.NowMs()
	if err := h.writeMutation(mut); err != nil {
		return err
	}
	h.task.failStatus = kt.ItemNeedsAttention
	verify := "keep cannot check whether it happened (no reconcile): look at the target, then choose It didn't happen or Skip"
	if mut.CanReconcile {
		verify = "keep could not establish whether it happened; Try again, or look yourself and choose It didn't happen or Skip"
	}
	return kt.Errorf(kt.ClassIndeterminate, "%s", h.e.unknownOutcome(*mut, mut.ErrorMessage, verify))
}

// itemReconcile is the inline reconcile of an item mutation.
func (h *host) itemReconcile(mut *kt.Mutation) (json.RawMessage, error) {
	ans := h.askReconcile(mut, "task", inlineAttempt)
	now := h.e.NowMs()
	var why string
	switch ans.step {
	case recApplied:
		return h.itemApplied(mut, ans.value, kt.ResolvedByReconciliation)
	case recUncheckable, recExhausted:
		return nil, h.itemBlock(mut)
	case recFailed:
		markFailed(mut, nil, kt.ResolvedByReconciliation, now)
		if err := h.writeMutation(mut); err != nil {
			return nil, err
		}
		return nil, kt.Errorf(kt.ClassTransient, "reconciliation found that %s did not happen; it will be sent again", mut.Target)
	case recRecheck:
		markRecheck(mut, ans.settleAt, now)
		why = fmt.Sprintf("%s was not found at the target yet; a slow service may still apply it, so keep checks once more before it would send it again", mut.Target)
	default:
		markRecheck(mut, ans.retryAt, now)
		why = fmt.Sprintf("outcome of %s is not known yet; keep checks again in %s", mut.Target, ans.delay)
	}
	if err := h.writeMutation(mut); err != nil {
		return nil, err
	}
	h.task.failStatus = kt.ItemNeedsAttention
	return nil, kt.Errorf(kt.ClassIndeterminate, "%s", why)
}

// reconcileTaskMutation is a background reconcile attempt for a task run
// blocked on a mutation; a settled outcome lets the task run again (replay).
func (x *runExec) reconcileTaskMutation(mut kt.Mutation) error {
	defer x.startPhase(phaseReconcile).end(x)
	run := x.run
	ans := x.askReconcile(&mut, "task", backgroundAttempt)
	now := x.e.NowMs()
	switch ans.step {
	case recApplied:
		result, _ := json.Marshal(ans.value)
		markApplied(&mut, result, kt.ResolvedByReconciliation, now)
		run.Action = ActionRetry
	case recRecheck:
		mut.NextReconcileAt = ans.settleAt
	case recFailed:
		markFailed(&mut, nil, kt.ResolvedByReconciliation, now)
		run.Action = ActionRetry
	case recExhausted, recUncheckable:
		mut.Status = kt.MutationIndeterminate
		why := fmt.Sprintf("reconciliation could not tell whether it happened (%d attempts)", mut.ReconcileAttempts)
		if ans.err != nil {
			why += "; last answer: " + ans.err.Error()
		}
		run.ErrorMessage = x.e.unknownOutcome(mut, why, "Try again, or look yourself and choose It didn't happen or Skip")
	case recRetryLater:
		mut.NextReconcileAt = ans.retryAt
	}
	mut.UpdatedAt, run.UpdatedAt = now, now
	return x.saveWithMutation(&mut)
}

// enterItemDry is withItem's entry in a dry run: the item as the ledger
// has it (or a new one), nothing written.
func (h *host) enterItemDry(id, title string) (json.RawMessage, error) {
	ts := h.task
	var it kt.Input
	found := true
	err := h.e.store.View(h.ctx, func(tx store.Tx) error {
		cur, err := tx.InputGetByKey(h.run.Workflow, id)
		switch {
		case errors.Is(err, kt.ErrNotFound):
			found = false
			cur = kt.Input{Workflow: h.run.Workflow, Key: id, Kind: kt.KindTask, Title: title, Status: kt.ItemProcessing, CurrentAttempt: 1}
		case err != nil:
			return err
		case cur.Kind != kt.KindTask:
			return kt.Errorf(kt.ClassLogic, "withItem(%q): that key belongs to an input of this workflow; choose item ids with a prefix of their own", id)
		}
		it = cur
		if h.impact && ts.entered == nil {
			ts.entered, ts.seen = map[string]bool{}, map[string]bool{}
			all, err := tx.InputList(h.run.Workflow)
			if err != nil {
				return err
			}
			for _, in := range all {
				if in.Kind == kt.KindTask && in.LastRun == h.run.ID {
					ts.entered[in.Key] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, storeError(err, "read item "+id)
	}
	ts.item, ts.isDone = &it, it.Status.Finished()
	if h.impact {
		// Done items run again, their writes compared with the ledger's.
		// An item the ledger does not have, before every item the recorded
		// run entered was entered again, is done work under a new id.
		ts.wasDone, ts.isDone = ts.isDone, false
		ts.seen[id] = true
		ts.renamed = false
		if !found {
			if missing := unseen(ts.entered, ts.seen); len(missing) > 0 {
				// Noted, and the replay goes on: every item is named.
				h.noteIDDiff("item "+id, "items "+strings.Join(missing, ", ")+" (not entered again)", "a new item "+id+" (the ids of done items changed?)")
				if len(h.diffs) >= maxReplayDiffs {
					return nil, errDiffers
				}
				ts.renamed = true
			} else {
				// Past what the recorded run reached: new work, not compared.
				return nil, &errDryWrite{write: "a new item " + id}
			}
		}
	}
	return json.Marshal(ItemView{ID: it.Key, Title: title, IsDone: ts.isDone, Attempt: it.CurrentAttempt})
}

// unseen lists the items of want not seen (sorted, the first five).
func unseen(want, seen map[string]bool) []string {
	var out []string
	for k := range want {
		if !seen[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	if len(out) > 5 {
		out = append(out[:5], "…")
	}
	return out
}

// errDryWrite stops a dry run at the first write that would be sent.
type errDryWrite struct {
	write, identity string
	// the write itself, when it is one (not a new item): compared by
	// CompareUnseen (unseen.go)
	tool string
	m    *connector.Method
	args map[string]any
}

func (e *errDryWrite) Error() string { return "dry run: reached " + e.write }

// itemMutationDry is a write in a dry run: one the ledger has applied
// replays its recorded result, as the real run would; one applied with a
// significantly different payload fails, as the real run would; the first
// new one stops the run, never sent.
func (h *host) itemMutationDry(lc *ledgerCall) (json.RawMessage, error) {
	if h.impact {
		// A replay of done work: the write the ledger has, with the same
		// payload, replays; any other write of a done item is a difference;
		// a new write of an item not done is new work, where the replay ends.
		switch {
		case h.task.renamed:
			return json.RawMessage("null"), nil // its difference is noted
		case lc.found && lc.mut.Status == kt.MutationApplied && lc.mut.PayloadHash == lc.payloadHash:
			return lc.cachedResult(), nil
		case lc.found && lc.mut.Status == kt.MutationApplied:
			h.noteDiff("item "+h.task.item.Key, lc.method()+" "+lc.mut.Target, lc.method()+" "+lc.target+" with another payload")
		case h.task.wasDone:
			h.noteIDDiff("item "+h.task.item.Key, "done", lc.method()+" "+lc.target+", a write the ledger does not have (another target or identity: written again)")
		default:
			return nil, &errDryWrite{write: lc.method(), identity: lc.identityKey, tool: lc.tool, m: lc.m, args: lc.args}
		}
		if len(h.diffs) >= maxReplayDiffs {
			return nil, errDiffers
		}
		return lc.cachedResult(), nil // noted; the replay goes on to name the rest
	}
	switch lc.step() {
	case stepConflict:
		return nil, kt.Errorf(kt.ClassLogic, "item %q: %s was already applied in this attempt with different content; the real run would stop there", h.task.item.Key, lc.target)
	case stepReplay:
		return lc.cachedResult(), nil
	}
	return nil, &errDryWrite{write: lc.method(), identity: lc.identityKey, tool: lc.tool, m: lc.m, args: lc.args}
}
