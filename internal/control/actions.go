package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// resolution is a person's decision on a blocked run as Control's table
// names it: what they chose, and carry, the decision's method that
// carries it out.
type resolution struct {
	what  kt.Resolution
	carry func(*decision) (string, error)
}

// resolveRun records a person's decision on a blocked run in one
// transaction: the resolution's carry records it on the run (and its
// ledger row) and says what will happen.
// It works with or without a running engine: the engine (keep serve or
// keep run) carries the decision out at its next step. Concurrent decisions
// on one run are serialized by the store; the second one is refused.
func resolveRun(ctx context.Context, st store.Store, runID string, r resolution, now time.Time) (string, error) {
	what := r.what
	var msg string
	err := st.Update(ctx, func(tx store.Tx) error {
		d, err := openDecision(tx, runID, now)
		if err != nil {
			return err
		}
		if err := d.checkSkip(what); err != nil {
			return err
		}
		if msg, err = r.carry(d); err != nil {
			return err
		}
		// Each action's own check says why it does not fit (carry,
		// whose writes this error rolls back); any other action the card
		// does not offer is refused here: never recorded, then ignored.
		if !slices.Contains(d.allowed, string(what)) {
			return kt.Refuse("%s is not offered for run %s (%s); its card offers %s", what, runID, d.run.Status, strings.Join(d.allowed, ", "))
		}
		d.run.UpdatedAt = d.ms
		if err := transition.PutRun(tx, &d.run); err != nil {
			return err
		}
		dec := kt.Decision{Workflow: d.run.Workflow, RunID: runID, Action: string(what), Detail: msg, At: d.ms}
		if d.hasMut {
			dec.MutationID = d.mut.ID
		}
		return transition.LogDecision(ctx, tx, dec)
	})
	return msg, err
}

// decision is a person's decision on a blocked run, inside its transaction:
// the run, its ledger row and the actions its state allows (ActionsFor).
type decision struct {
	tx      store.Tx
	run     kt.Run
	mut     kt.Mutation
	hasMut  bool
	allowed []string
	ms      int64
}

// openDecision reads a blocked run for a decision, refusing one that is not
// blocked or already has a decision waiting.
func openDecision(tx store.Tx, runID string, now time.Time) (*decision, error) {
	run, err := tx.RunGet(runID)
	if errors.Is(err, kt.ErrNotFound) {
		return nil, kt.Missing("there is no run %q (see `keep runs WORKFLOW` for run ids)", runID)
	}
	if err != nil {
		return nil, err
	}
	switch {
	case run.Status.Finished():
		return nil, kt.Refuse("run %s is not blocked: it is %s; there is nothing to resolve", runID, run.Status)
	case run.Action != "":
		return nil, kt.Refuse("run %s already has a decision waiting to be carried out (%s); keep carries it out at its next step", runID, run.Action)
	case run.Status == kt.StatusActive:
		return nil, kt.Refuse("run %s is running right now; resolve it only once it is blocked", runID)
	}
	d := &decision{tx: tx, run: run, ms: now.UnixMilli()}
	mut, merr := tx.MutationByRun(runID)
	d.mut, d.hasMut = mut, merr == nil
	if merr != nil && !errors.Is(merr, kt.ErrNotFound) {
		return nil, merr
	}
	held, err := tx.EventsReservedBy(runID)
	if err != nil {
		return nil, err
	}
	d.allowed = ActionsFor(run, mut, d.hasMut, len(held))
	return d, nil
}

// checkSkip explains why Skip is not offered, when it is not; the other
// actions explain their own refusals.
func (d *decision) checkSkip(what kt.Resolution) error {
	if what != kt.ResolveSkip || slices.Contains(d.allowed, string(kt.ResolveSkip)) {
		return nil
	}
	if item := doneItemOf(d.run); item != "" {
		return kt.Refuse("Skip does not apply to run %s: item %q is already done, so skipping it changes nothing and the next run would fail the same way. Reprocess the item (--reprocess) to do it again, or deploy a fix that checks ctx.item.isDone and try again", d.run.ID, item)
	}
	return kt.Refuse("Skip does not apply to run %s: %s failed before it selected any event, so there is nothing to skip and the next run would fail the same way. Fix the script and deploy it with `keep deploy --minor`, or skip the inputs it would take (`keep skip ITEM`)", d.run.ID, d.run.Handler)
}

// unknown says the run waits on a write whose outcome is not known.
func (d *decision) unknown() bool {
	return d.hasMut && (d.mut.Status == kt.MutationIndeterminate || d.mut.Status == kt.MutationNeedsReconcile)
}

func (d *decision) skip() (string, error) {
	d.run.Action = kt.ActionSkip
	if d.hasMut && d.mut.Status == kt.MutationApplied {
		return fmt.Sprintf("the mutation of run %s already happened; the run will complete", d.run.ID), nil
	}
	if d.checking() {
		return fmt.Sprintf("run %s will be skipped: %s is not sent again — unless the check keep has under way finds it applied: proof wins, and then the run completes", d.run.ID, d.mut.Target), nil
	}
	return fmt.Sprintf("run %s will be skipped", d.run.ID), nil
}

func (d *decision) tryAgain() (string, error) {
	run, mut := &d.run, &d.mut
	if !d.unknown() {
		run.Action = kt.ActionRetry
		msg := fmt.Sprintf("run %s will be retried", run.ID)
		if run.Status == kt.StatusFailedLogic {
			w, err := d.tx.WorkflowGet(run.Workflow)
			if err != nil {
				return "", err
			}
			if w.ActiveVersion > run.Version {
				msg += " on the version deployed since it failed"
			} else {
				msg += " with the same script: if it fails the same way, fix the script and deploy it with `keep deploy --minor FILE` (keep then retries the run on the fix by itself)"
			}
		}
		return msg, transition.Unpause(d.tx, run.Workflow, d.ms)
	}
	if !mut.CanReconcile {
		return "", kt.Refuse("Try again is not available for run %s: %s cannot be checked by keep (no reconcile). Verify it yourself, then use --didnt-happen to send it again or --skip", run.ID, mut.Target)
	}
	// The ledger row is keep's: the engine resets it when it carries the
	// decision out (decideOnWrite), after any step under way.
	run.Action = kt.ActionCheckAgain
	return fmt.Sprintf("keep will check again whether %s happened", mut.Target), nil
}

func (d *decision) didntHappen() (string, error) {
	run, mut := &d.run, &d.mut
	if !d.unknown() {
		return "", kt.Refuse("It didn't happen applies to a mutation whose outcome is unknown; run %s is %s", run.ID, run.Status)
	}
	if !kt.MutationTransitionAllowed(mut.Status, kt.MutationFailed) {
		return "", kt.Refuse("mutation %s is %s and cannot be marked failed", mut.ID, mut.Status)
	}
	run.Action = kt.ActionDidntHappen
	msg := fmt.Sprintf("%s is marked as not done; mutate runs again and sends it once more", mut.Target)
	if d.checking() {
		msg += fmt.Sprintf(" — unless the check keep has under way finds it applied first: proof wins, and then it is not sent again")
	}
	return msg, nil
}

// checking says keep is checking the run's write by itself right now (a
// background reconcile): its answer may settle the write before the
// person's decision is carried out.
func (d *decision) checking() bool {
	return d.hasMut && d.mut.Status == kt.MutationNeedsReconcile && kt.WhoActs(d.run, d.mut, d.hasMut) == kt.Keep
}

func (d *decision) approve() (string, error) {
	run := &d.run
	if !IsApprovalWait(*run) {
		why := string(run.Status)
		if run.ErrorMessage != "" {
			why += ": " + run.ErrorMessage
		}
		return "", kt.Refuse("run %s is not waiting for approval (%s); approving would not change anything. Fix the cause, then use --try-again, or --skip", run.ID, why)
	}
	var pc kt.PendingCall
	if err := json.Unmarshal(run.PendingCall, &pc); err != nil {
		return "", err
	}
	run.ApprovedHash, run.Action = pc.CallHash, kt.ActionRetry
	return fmt.Sprintf("approved: %s will be sent", pc.Target), nil
}

func (d *decision) reprocessItem() (string, error) {
	run := &d.run
	if d.checking() {
		// A Skip or an "it didn't happen" waits for the check under way
		// (the step carries it out after); a reprocess closes the run at
		// once, so the check's proof would be dropped and the new attempt
		// would send the write a second time.
		return "", kt.Refuse("Reprocess is not available for run %s right now: keep is checking whether %s happened (a background check is under way), and a new attempt now could send it a second time. Wait for the check: if it finds the write applied the run completes; if it cannot tell, the card offers Reprocess again. Or Skip it now", run.ID, d.mut.Target)
	}
	if run.HandlerType == kt.HandlerConsumer {
		return d.reprocessInputs()
	}
	key := doneItemOf(*run)
	if key == "" {
		key = blockedItemOf(*run)
	}
	if key == "" || !slices.Contains(d.allowed, string(kt.ResolveReprocess)) {
		return "", kt.Refuse("Reprocess applies to a task run blocked on an item (one that needs attention, or one already done); run %s is %s", run.ID, run.Status)
	}
	it, err := transition.FindItem(d.tx, run.Workflow, key)
	if err != nil {
		return "", err
	}
	msg, err := transition.Reprocess(d.tx, it, d.ms)
	if err != nil {
		return "", err
	}
	if d.unknown() {
		// The person chose to do the item again: the write whose outcome
		// was unknown is no longer waited on (the new attempt writes anew).
		d.mut.Status, d.mut.ResolvedBy, d.mut.UpdatedAt = kt.MutationSkipped, kt.ResolvedByUserSkip, d.ms
		if err := transition.PutMutation(d.tx, d.mut); err != nil {
			return "", err
		}
		msg += fmt.Sprintf(" (its write %s, whose outcome is unknown, is not waited on: the new attempt writes again)", d.mut.Target)
	}
	// reprocess wrote the run (its item's last run) in this transaction.
	cur, err := d.tx.RunGet(run.ID)
	if err != nil {
		return "", err
	}
	run.Rev, run.Action = cur.Rev, kt.ActionRetry
	return msg + fmt.Sprintf("; run %s is retried", run.ID), nil
}

// reprocessInputs starts a new attempt of every input whose events a
// blocked consumer run holds: the run is closed (its unfinished write is
// not sent again), their events re-open under the new attempt, and the
// consumer takes them in a new run (as keep reprocess INPUT does, for all
// of the run's inputs in one transaction).
func (d *decision) reprocessInputs() (string, error) {
	if !slices.Contains(d.allowed, string(kt.ResolveReprocess)) {
		return "", kt.Refuse("Reprocess does not apply to run %s (%s): it applies to a run blocked on a write whose outcome is unknown, or refused because it was applied before with other content; to start a new attempt of one of its inputs, use keep reprocess INPUT", d.run.ID, d.run.Status)
	}
	held, err := d.tx.EventsReservedBy(d.run.ID)
	if err != nil {
		return "", err
	}
	var ids []string
	for _, ev := range held {
		for _, id := range ev.CausedBy {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return "", kt.Refuse("run %s holds no input's events: nothing to reprocess; use --skip or --try-again", d.run.ID)
	}
	var msgs []string
	for _, id := range ids {
		it, err := d.tx.InputGet(id)
		if err != nil {
			return "", err
		}
		msg, err := transition.ReprocessInput(d.tx, it, d.ms)
		if err != nil {
			return "", err
		}
		msgs = append(msgs, msg)
	}
	// reprocessInput closed the run in this transaction: Resolve writes
	// that state again with the decision (no action left to carry out).
	cur, err := d.tx.RunGet(d.run.ID)
	if err != nil {
		return "", err
	}
	d.run = cur
	return strings.Join(msgs, "; "), nil
}

// IsApprovalWait reports whether a run waits for a person to approve a
// mutation (and not for a fix of access or of a missing resource, which
// share its status): only then is Approve offered or accepted.
func IsApprovalWait(r kt.Run) bool {
	return r.Status == kt.StatusApproval && r.ErrorClass == "" && len(r.PendingCall) > 0
}

// ActionsFor lists what a person can do with a blocked run — only actions
// that can end the block — safest first (kt.Choices: what each risks).
// The card shows them and Resolve accepts them. mut is the run's mutation
// (hasMut false when it has none); held counts the events the run holds.
func ActionsFor(r kt.Run, mut kt.Mutation, hasMut bool, held int) []string {
	var out []string
	for _, c := range ChoicesFor(r, mut, hasMut, held) {
		out = append(out, string(c.Action))
	}
	return out
}

// ChoicesFor is ActionsFor with what each choice risks (issue 42), safest
// first: on a write whose outcome is unknown, asking the target again
// risks nothing, skipping risks a missing write, sending again (It didn't
// happen, Reprocess) risks a write twice.
func ChoicesFor(r kt.Run, mut kt.Mutation, hasMut bool, held int) []kt.Choice {
	return kt.Choices(offered(r, mut, hasMut, held), WriteUncertain(mut, hasMut))
}

// WriteUncertain says the run's write may have applied: its outcome is unknown.
func WriteUncertain(mut kt.Mutation, hasMut bool) bool {
	return hasMut && (mut.Status == kt.MutationIndeterminate || mut.Status == kt.MutationNeedsReconcile)
}

// offered lists the actions that can end a run's block, in no order of risk.
func offered(r kt.Run, mut kt.Mutation, hasMut bool, held int) []string {
	switch {
	case WriteUncertain(mut, hasMut):
		var out []string
		if mut.CanReconcile {
			out = append(out, string(kt.ResolveTryAgain))
		}
		out = append(out, string(kt.ResolveDidntHappen), string(kt.ResolveSkip))
		checking := mut.Status == kt.MutationNeedsReconcile && kt.WhoActs(r, mut, hasMut) == kt.Keep
		if (blockedItemOf(r) != "" || inputsReprocessable(r, held)) && !checking {
			// The item needs attention (ch 12 §12.7): a new attempt of it.
			// Not while keep checks the write by itself: a new attempt is
			// carried out at once, and would write again what the check
			// may find applied (proof wins; reprocessCheck says why).
			out = append(out, string(kt.ResolveReprocess))
		}
		return out
	case IsApprovalWait(r):
		return []string{string(kt.ResolveApprove), string(kt.ResolveSkip)}
	case doneItemOf(r) != "" && r.Status == kt.StatusFailedLogic:
		// Skipping an item that is already done changes nothing: the next
		// run would fail the same way.
		return []string{string(kt.ResolveReprocess), string(kt.ResolveTryAgain)}
	case r.Status == kt.StatusFailedLogic && blockedItemOf(r) != "":
		// A write of the item conflicts with one applied in this attempt
		// (the item needs attention): reprocess it, or skip it.
		return []string{string(kt.ResolveTryAgain), string(kt.ResolveSkip), string(kt.ResolveReprocess)}
	case r.Status == kt.StatusFailedLogic && PayloadConflict(r) && inputsReprocessable(r, held):
		// The same for a consumer's write: its inputs need attention; a new
		// attempt of them writes the new content under a new identity.
		return []string{string(kt.ResolveTryAgain), string(kt.ResolveSkip), string(kt.ResolveReprocess)}
	case r.HandlerType == kt.HandlerConsumer && r.Phase == kt.PhasePreparing && held == 0:
		// prepare failed before it selected anything: there is nothing a
		// Skip could skip, and the next run would fail the same way.
		return []string{string(kt.ResolveTryAgain)}
	}
	return []string{string(kt.ResolveTryAgain), string(kt.ResolveSkip)}
}

// PayloadConflict says a consumer run failed because its write was
// already applied for its inputs with significantly different content
// (ch 14 §14.5): its inputs need attention (report.InputStatus) and its
// card offers Reprocess.
func PayloadConflict(r kt.Run) bool {
	return r.HandlerType == kt.HandlerConsumer && r.Status == kt.StatusFailedLogic && pendingOf(r).Conflict
}

// inputsReprocessable says a blocked consumer run's inputs can start a new
// attempt (ch 12 §12.7, keep reprocess ITEM of each as one action): it
// holds their events and its write has not happened (reprocessInput
// closes the run; a run past its write must complete first). Offered on a
// write whose outcome is unknown and on a write refused because the same
// write was applied with other content (PayloadConflict).
func inputsReprocessable(r kt.Run, held int) bool {
	return r.HandlerType == kt.HandlerConsumer && held > 0 && kt.PhaseRank(r.Phase) < kt.PhaseRank(kt.PhaseMutated)
}

// doneItemOf is the done item a run's handler tried to mutate, if any.
func doneItemOf(r kt.Run) string { return pendingOf(r).DoneItem }

// blockedItemOf is the task item a task run's last write was on, if any.
func blockedItemOf(r kt.Run) string {
	if r.HandlerType != kt.HandlerTask {
		return ""
	}
	return pendingOf(r).Item
}

// pendingOf is the call a run was making; a run without one, or whose
// stored preview does not decode (the card then shows no call), has none.
func pendingOf(r kt.Run) kt.PendingCall {
	var pc kt.PendingCall
	if len(r.PendingCall) > 0 && json.Unmarshal(r.PendingCall, &pc) != nil {
		return kt.PendingCall{}
	}
	return pc
}

// pauseWorkflow stops scheduling a workflow; a running run finishes its step.
func pauseWorkflow(ctx context.Context, st store.Store, wf string, now time.Time) error {
	return st.Update(ctx, func(tx store.Tx) error {
		w, err := transition.Workflow(tx, wf)
		if err != nil {
			return err
		}
		if w.Paused {
			return kt.Refuse("workflow %s is already paused", wf)
		}
		w.Paused, w.PausedReason, w.UpdatedAt = true, "paused by a person", now.UnixMilli()
		if err := tx.WorkflowPut(w); err != nil {
			return err
		}
		return transition.LogDecision(ctx, tx, kt.Decision{Workflow: wf, Action: "pause", Detail: wf + " paused", At: now.UnixMilli()})
	})
}

// resumeWorkflow lets a paused workflow run again; a run that failed with an internal error is retried.
func resumeWorkflow(ctx context.Context, st store.Store, wf string, now time.Time) error {
	return st.Update(ctx, func(tx store.Tx) error {
		w, err := transition.Workflow(tx, wf)
		if err != nil {
			return err
		}
		if !w.Paused {
			return kt.Refuse("workflow %s is not paused", wf)
		}
		w.Paused, w.PausedReason, w.UpdatedAt = false, "", now.UnixMilli()
		if err := tx.WorkflowPut(w); err != nil {
			return err
		}
		if err := transition.LogDecision(ctx, tx, kt.Decision{Workflow: wf, Action: "resume", Detail: wf + " resumed", At: now.UnixMilli()}); err != nil {
			return err
		}
		if r, err := tx.RunOpen(wf); err == nil && r.Status == kt.StatusFailedInternal && r.Action == "" {
			r.Action, r.UpdatedAt = kt.ActionRetry, now.UnixMilli()
			return transition.PutRun(tx, &r)
		}
		return nil
	})
}

// runNow queues every producer of a workflow; refused while a run is blocked.
func runNow(ctx context.Context, st store.Store, wf string, now time.Time) (int, error) {
	n := 0
	err := st.Update(ctx, func(tx store.Tx) error {
		if _, err := transition.Workflow(tx, wf); err != nil {
			return err
		}
		if r, err := tx.RunOpen(wf); err == nil {
			return kt.Refuse("workflow %s has a blocked run (%s, %s); resolve it first (`keep show run %s`)", wf, r.ID, r.Status, r.ID)
		}
		var err error
		if n, err = transition.QueueScheduled(tx, wf, now.UnixMilli()); err != nil {
			return err
		}
		return transition.LogDecision(ctx, tx, kt.Decision{Workflow: wf, Action: "run-now", Detail: fmt.Sprintf("%s of %s queued", kt.Count(n, "producer"), wf), At: now.UnixMilli()})
	})
	return n, err
}
