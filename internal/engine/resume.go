package engine

import (
	"context"
	"errors"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// resumeStep is where the retry of a consumer run resumes (SPEC §4's reset
// rules). It is decided once, by resumeAt, for both the real retry
// (Engine.retry) and the Maintainer's dry run (dryConsumer), so the dry run
// replays what the retry will run and nothing else (issue 41).
type resumeStep int

const (
	// resumePrepare: prepare runs afresh, the run's pinned events released.
	resumePrepare resumeStep = iota
	// resumeMutate: mutating again on the same PrepareResult; the ledger
	// shows no write that may have happened, so mutate runs again.
	resumeMutate
	// resumeReconcile: mutating on the same PrepareResult with a write that
	// may have happened: the real retry reconciles it from the ledger's
	// own params (mutate is not run again, ch 13 §13.10); the dry run runs
	// mutate to check that the proposed version makes the same write.
	resumeReconcile
	// resumeNext: past the write: only next runs again, on the recorded
	// PrepareResult and MutationResult.
	resumeNext
)

// resumeAt is the one rule: old is the failed or crashed run, mut its
// ledger row (nil without one), pinned how many pending events it still
// holds. It reads nothing.
func resumeAt(old kt.Run, mut *kt.Mutation, pinned int) resumeStep {
	happened := mut != nil && mayHaveHappened(*mut)
	switch {
	case kt.PhaseRank(old.Phase) >= kt.PhaseRank(kt.PhaseMutated):
		return resumeNext
	case old.Status == kt.StatusFailedLogic && !happened:
		// A repair (or a person's Try again) after a logic failure
		// prepares afresh: the pinned events are released.
		return resumePrepare
	case old.Phase == kt.PhaseMutating && pinned > 0 && happened:
		return resumeReconcile
	case old.Phase == kt.PhaseMutating && pinned > 0:
		return resumeMutate
	}
	return resumePrepare
}

// phase is the phase the retry run starts in.
func (s resumeStep) phase() kt.Phase {
	switch s {
	case resumeNext:
		return kt.PhaseEmitting
	case resumeMutate, resumeReconcile:
		return kt.PhaseMutating
	}
	return kt.PhasePreparing
}

// replayed is what the dry run replays for s (DryRunResult.Replayed).
func (s resumeStep) replayed() string {
	switch s {
	case resumeNext:
		return "next"
	case resumeMutate, resumeReconcile:
		return "mutate"
	}
	return "prepare"
}

// mayHaveHappened says a ledger row's write may have reached the target.
func mayHaveHappened(mut kt.Mutation) bool {
	return mut.Status == kt.MutationInFlight || mut.Status == kt.MutationNeedsReconcile
}

// resumeOf reads what resumeAt needs about the consumer run old (its
// ledger row and its pinned events) and applies it. It returns the ledger
// row, if there is one.
func (e *Engine) resumeOf(ctx context.Context, old kt.Run) (step resumeStep, mut kt.Mutation, hasMut bool, err error) {
	err = e.store.View(ctx, func(tx store.Tx) error {
		m, err := tx.MutationByRun(old.ID)
		switch {
		case err == nil:
			mut, hasMut = m, true
		case !errors.Is(err, kt.ErrNotFound):
			return err
		}
		return nil
	})
	if err != nil {
		return resumePrepare, mut, false, err
	}
	pinned, err := e.pinnedCount(ctx, old.ID)
	if err != nil {
		return resumePrepare, mut, false, err
	}
	var m *kt.Mutation
	if hasMut {
		m = &mut
	}
	return resumeAt(old, m, pinned), mut, hasMut, nil
}
