package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/schedule"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// Actions a person records on a blocked run; the engine carries them out.
const (
	ActionRetry = kt.ActionRetry
	ActionSkip  = kt.ActionSkip
)

// handleOpen moves a workflow's unfinished run along when something is due:
// a person's decision, crash recovery, a transient retry, a reconcile
// attempt, or a fixed version for a logic failure.
func (e *Engine) handleOpen(ctx context.Context, wf kt.Workflow, run kt.Run) (bool, error) {
	now := e.NowMs()
	switch {
	case run.Action == ActionSkip:
		return true, e.skip(ctx, wf, run)
	case run.Action == ActionRetry:
		return true, e.retry(ctx, wf, run)
	case run.Action == kt.ActionCheckAgain || run.Action == kt.ActionDidntHappen:
		return true, e.decideOnWrite(ctx, wf, run)
	case run.Status == kt.StatusCrashed || run.Status == kt.StatusActive:
		// Steps of one workflow never overlap and one process owns the data
		// directory, so an active run seen here was left by a step that
		// failed to record its outcome (a full disk, a store error): recover
		// it like a crash.
		return true, e.retry(ctx, wf, run)
	case run.Status == kt.StatusTransient && run.NextAttemptAt > 0 && run.NextAttemptAt <= now:
		return true, e.retry(ctx, wf, run)
	case run.Status == kt.StatusFailedLogic && run.Version < wf.ActiveVersion:
		return true, e.retry(ctx, wf, run)
	case run.Status == kt.StatusReconciliation:
		return e.reconcileDue(ctx, wf, run)
	}
	return false, nil
}

// decideOnWrite carries out a person's Try again or It didn't happen on a
// write whose outcome was unknown when they chose, in one transaction with
// the run: against what the ledger says now, since a check under way when
// they chose may have settled it. Proof wins: a write found applied is
// never marked failed (the run goes on after it); one found not to have
// happened is sent again, as either choice asked.
func (e *Engine) decideOnWrite(ctx context.Context, wf kt.Workflow, run kt.Run) error {
	now := e.NowMs()
	return e.update(ctx, wf.Name, func(tx store.Tx) error {
		mut, err := tx.MutationByRun(run.ID)
		if err != nil && !errors.Is(err, kt.ErrNotFound) {
			return err
		}
		unknown := err == nil && (mut.Status == kt.MutationIndeterminate || mut.Status == kt.MutationNeedsReconcile)
		asked := run.Action
		run.Action, run.UpdatedAt = ActionRetry, now
		var note string
		switch {
		case unknown && asked == kt.ActionCheckAgain:
			mut.Status, mut.ReconcileAttempts, mut.NextReconcileAt, mut.ResolvedBy, mut.UpdatedAt = kt.MutationNeedsReconcile, 0, now, kt.ResolvedByUserRetry, now
			run.Action, run.Status, run.ErrorMessage = "", kt.StatusReconciliation, fmt.Sprintf("a person asked keep to check %s again", mut.Target)
		case unknown:
			mut.Status, mut.ResolvedBy, mut.UpdatedAt = kt.MutationFailed, kt.ResolvedByUserAssertFailed, now
			mut.ErrorMessage = "a person stated that it did not happen"
		case err == nil && mut.Status == kt.MutationApplied:
			note = fmt.Sprintf("%s was found applied before %s was carried out: proof wins, so it is not sent again and the run goes on after it", mut.Target, asked)
		case err == nil:
			note = fmt.Sprintf("%s was found not to have happened before %s was carried out; it is sent again", mut.Target, asked)
		}
		if unknown {
			if err := transition.PutMutation(tx, mut); err != nil {
				return err
			}
		}
		if err := transition.PutRun(tx, &run); err != nil {
			return err
		}
		if note == "" {
			return nil
		}
		return transition.LogDecision(transition.WithActor(ctx, "keep"), tx, kt.Decision{Workflow: run.Workflow, RunID: run.ID, MutationID: mut.ID, Action: string(asked), Detail: note, At: now})
	})
}

// reconcileDue makes a background reconcile attempt for a run waiting on a
// write whose outcome is not known, when the attempt is due.
func (e *Engine) reconcileDue(ctx context.Context, wf kt.Workflow, run kt.Run) (bool, error) {
	var mut kt.Mutation
	err := e.store.View(ctx, func(tx store.Tx) error {
		var err error
		mut, err = tx.MutationByRun(run.ID)
		return err
	})
	if errors.Is(err, kt.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if mut.Status != kt.MutationNeedsReconcile || mut.NextReconcileAt > e.NowMs() {
		return false, nil
	}
	prog, err := e.Program(ctx, wf.Name, run.Version)
	if err != nil {
		return false, err
	}
	started := false
	err = e.carryOut(ctx, wf, prog, &run, func(x *runExec) error {
		started = true
		if run.HandlerType == kt.HandlerTask {
			return x.reconcileTaskMutation(mut)
		}
		proceed, err := x.reconcileInPhase(&mut, backgroundAttempt)
		if err != nil || !proceed {
			return err
		}
		if err := advance(&run, kt.PhaseEmitting); err != nil {
			return err
		}
		return x.emit(x.declView())
	})
	return started, err
}

// runnable is the program of wf's active version, once the policy its
// runs run under decodes: a decision stops before it writes anything.
func (e *Engine) runnable(ctx context.Context, wf kt.Workflow) (*script.Program, error) {
	if _, err := e.PolicyFor(wf); err != nil {
		return nil, err
	}
	return e.Program(ctx, wf.Name, wf.ActiveVersion)
}

// retry replaces a failed or crashed run with a new run (retry_of → old),
// starting where SPEC §4's reset rules say.
func (e *Engine) retry(ctx context.Context, wf kt.Workflow, old kt.Run) error {
	prog, err := e.runnable(ctx, wf)
	if err != nil {
		return err
	}
	nr := e.newRun(wf, old.Handler, old.HandlerType, kt.PhaseExecuting)
	nr.RetryOf, nr.ApprovedHash = old.ID, old.ApprovedHash
	// Automatic retries count against the policy; a person's decision starts afresh.
	if old.Action == "" && (old.Status == kt.StatusTransient || (old.Status == kt.StatusCrashed && old.RetryCount > 0)) {
		nr.RetryCount = old.RetryCount + 1
		if old.Status == kt.StatusTransient && loadTrace(old.Trace).progressed {
			nr.RetryCount = old.RetryCount // it got somewhere: not counted (scheduleRetry)
		}
	}
	var mut kt.Mutation
	hasMut, step := false, resumePrepare
	if old.HandlerType == kt.HandlerConsumer {
		if step, mut, hasMut, err = e.resumePoint(ctx, old, &nr); err != nil {
			return err
		}
	}
	now := e.NowMs()
	nr.Trace = newTrace(fmt.Sprintf("retry of run %s (%s in %s)", old.ID, old.Status, old.Phase), now).json()
	old.Status, old.Action, old.UpdatedAt, old.FinishedAt = kt.StatusRetried, "", now, now
	err = e.update(ctx, wf.Name, func(tx store.Tx) error {
		if err := transition.PutRun(tx, &old); err != nil {
			return err
		}
		if err := updatePinned(tx, old.ID, now, func(ev *kt.Event) {
			if nr.Phase == kt.PhasePreparing {
				ev.ReservedBy = ""
			} else {
				ev.ReservedBy = nr.ID
			}
		}); err != nil {
			return err
		}
		if hasMut && mut.Status != kt.MutationApplied {
			mut.RunID, mut.UpdatedAt = nr.ID, now
			if err := transition.PutMutation(tx, mut); err != nil {
				return err
			}
		}
		return transition.PutRun(tx, &nr)
	})
	if err != nil {
		return err
	}
	return e.carryOut(ctx, wf, prog, &nr, func(x *runExec) error {
		switch old.HandlerType {
		case kt.HandlerProducer:
			return x.producer(nil)
		case kt.HandlerTask:
			return x.task(nil)
		}
		if step == resumeReconcile {
			// The write may have happened: reconcile it from the ledger's own
			// params; the mutate handler is not run again (ch 13 §13.10).
			mut.RunID, mut.Status = nr.ID, kt.MutationNeedsReconcile
			proceed, err := x.reconcileInPhase(&mut, inlineAttempt)
			if err != nil || !proceed {
				return err
			}
			if err := advance(&nr, kt.PhaseEmitting); err != nil {
				return err
			}
		}
		return x.consumer(nil)
	})
}

// resumePoint applies SPEC §4's reset rules (resumeAt) to the retry nr of
// a consumer run: where it starts (preparing afresh, mutating with the same
// PrepareResult, or emitting after an applied write). It returns the old
// run's ledger row, if it has one.
func (e *Engine) resumePoint(ctx context.Context, old kt.Run, nr *kt.Run) (step resumeStep, mut kt.Mutation, hasMut bool, err error) {
	step, mut, hasMut, err = e.resumeOf(ctx, old)
	if err != nil {
		return step, mut, false, err
	}
	nr.Phase = step.phase()
	switch step {
	case resumeNext:
		nr.PrepareResult, nr.MutationResult = old.PrepareResult, old.MutationResult
	case resumeMutate, resumeReconcile:
		nr.PrepareResult = old.PrepareResult
	}
	return step, mut, hasMut, nil
}

// pinnedCount counts the pending events a run still holds.
func (e *Engine) pinnedCount(ctx context.Context, runID string) (int, error) {
	n := 0
	err := e.store.View(ctx, func(tx store.Tx) error {
		evs, err := tx.EventsReservedBy(runID)
		for _, ev := range evs {
			if ev.Status == kt.EventPending {
				n++
			}
		}
		return err
	})
	return n, err
}

func newTrace(text string, now int64) *trace {
	t := &trace{}
	t.add(kt.TraceEntry{At: now, Kind: "phase", Text: text})
	return t
}

// skip carries out a person's Skip (ch 13 §13.9, SPEC §8.2).
func (e *Engine) skip(ctx context.Context, wf kt.Workflow, old kt.Run) error {
	switch old.HandlerType {
	case kt.HandlerTask:
		// Skip this item (ch 12 §12.7): the item the run was blocked on is
		// skipped and the task runs again for the others.
		if err := e.update(ctx, wf.Name, func(tx store.Tx) error { return e.skipBlockedItem(tx, old) }); err != nil {
			return err
		}
		return e.retry(ctx, wf, old)
	case kt.HandlerProducer:
		return e.skipProducerRun(ctx, wf, old)
	}
	pinned, err := e.pinnedCount(ctx, old.ID)
	if err != nil {
		return err
	}
	now := e.NowMs()
	switch {
	case kt.PhaseRank(old.Phase) >= kt.PhaseRank(kt.PhaseMutated) && old.Phase != kt.PhaseEmitting:
		// The mutation happened (a check under way when the person chose
		// Skip found it applied: proof wins): the run completes.
		return e.retry(ctx, wf, old)
	case old.Phase == kt.PhaseEmitting && old.Status == kt.StatusFailedLogic || pinned == 0:
		// next itself fails, or nothing is reserved: close the run, skip its events, publish nothing.
		return e.update(ctx, wf.Name, func(tx store.Tx) error {
			if err := updatePinned(tx, old.ID, now, func(ev *kt.Event) { ev.Status = kt.EventSkipped }); err != nil {
				return err
			}
			old.Status, old.Action, old.UpdatedAt, old.FinishedAt = kt.StatusSkipped, "", now, now
			return transition.PutRun(tx, &old)
		})
	}
	return e.skipMutation(ctx, wf, old)
}

// skipBlockedItem skips the item a task run was blocked on, and the write
// it was blocked on, inside the decision's transaction.
func (e *Engine) skipBlockedItem(tx store.Tx, old kt.Run) error {
	now := e.NowMs()
	m, err := tx.MutationByRun(old.ID)
	if errors.Is(err, kt.ErrNotFound) {
		// Blocked without a mutation (the handler threw): skip the item it was on.
		ins, err := tx.InputList(old.Workflow)
		if err != nil {
			return err
		}
		for _, it := range ins {
			if it.Kind == kt.KindTask && it.LastRun == old.ID && !it.Status.Finished() {
				m.ItemKeys = append(m.ItemKeys, it.ID)
			}
		}
		m.Status = kt.MutationSkipped
	} else if err != nil {
		return err
	}
	if m.Status != kt.MutationApplied && m.Status != kt.MutationSkipped {
		m.Status, m.ResolvedBy, m.UpdatedAt = kt.MutationSkipped, kt.ResolvedByUserSkip, now
		if err := transition.PutMutation(tx, m); err != nil {
			return err
		}
	}
	for _, id := range m.ItemKeys {
		it, err := tx.InputGet(id)
		if err != nil {
			return err
		}
		if it.Status.Finished() {
			continue
		}
		it.Status, it.UpdatedAt = kt.ItemSkipped, now
		if err := transition.PutItem(tx, it); err != nil {
			return err
		}
		if err := tx.ItemAttemptPut(kt.ItemAttempt{ItemID: it.ID, Attempt: it.CurrentAttempt, Status: kt.ItemSkipped, Version: old.Version, StartedAt: now, UpdatedAt: now}); err != nil {
			return err
		}
	}
	return nil
}

// skipProducerRun ends a failed producer run skipped; the producer runs
// again at its next scheduled time.
func (e *Engine) skipProducerRun(ctx context.Context, wf kt.Workflow, old kt.Run) error {
	prog, err := e.runnable(ctx, wf)
	if err != nil {
		return err
	}
	now := e.NowMs()
	return e.update(ctx, wf.Name, func(tx store.Tx) error {
		old.Status, old.Action, old.UpdatedAt, old.FinishedAt = kt.StatusSkipped, "", now, now
		if err := transition.PutRun(tx, &old); err != nil {
			return err
		}
		h, err := tx.HandlerGet(wf.Name, old.Handler)
		if err != nil {
			return err
		}
		if d, ok := prog.Decl.Producers[old.Handler]; ok {
			if s, err := schedule.Parse(d.Schedule); err == nil {
				h.NextRunAt = s.Next(e.now()).UnixMilli()
			}
		}
		h.Queued, h.UpdatedAt = false, now
		return tx.HandlerPut(h)
	})
}

// skipMutation skips a consumer's write before it applied: next runs with
// {status:'skipped'} and the reserved events end skipped.
func (e *Engine) skipMutation(ctx context.Context, wf kt.Workflow, old kt.Run) error {
	prog, err := e.runnable(ctx, wf)
	if err != nil {
		return err
	}
	now := e.NowMs()
	nr := e.newRun(wf, old.Handler, old.HandlerType, kt.PhaseEmitting)
	nr.RetryOf, nr.PrepareResult = old.ID, old.PrepareResult
	nr.MutationResult = json.RawMessage(`{"status":"skipped"}`)
	nr.Trace = newTrace(fmt.Sprintf("a person skipped the mutation of run %s", old.ID), now).json()
	old.Status, old.Action, old.UpdatedAt, old.FinishedAt = kt.StatusRetried, "", now, now
	if err := e.update(ctx, wf.Name, func(tx store.Tx) error {
		if err := transition.PutRun(tx, &old); err != nil {
			return err
		}
		if err := updatePinned(tx, old.ID, now, func(ev *kt.Event) { ev.ReservedBy = nr.ID }); err != nil {
			return err
		}
		if m, err := tx.MutationByRun(old.ID); err == nil && m.Status != kt.MutationApplied {
			m.Status, m.ResolvedBy, m.RunID, m.UpdatedAt = kt.MutationSkipped, kt.ResolvedByUserSkip, nr.ID, now
			if err := transition.PutMutation(tx, m); err != nil {
				return err
			}
		} else if err != nil && !errors.Is(err, kt.ErrNotFound) {
			return err
		}
		return transition.PutRun(tx, &nr)
	}); err != nil {
		return err
	}
	return e.carryOut(ctx, wf, prog, &nr, func(x *runExec) error { return x.emit(x.declView()) })
}
