// Package transition is the one place where a run, an item, a ledger row
// (mutation) or a handler's row changes: the writers that check each move
// against keeptype's state machines and write only from the revision the
// writer read (River's JobSetStateIfRunning, in keep's shape), the
// workflow read every action starts from, and the decision log. The
// engine's steps, people's actions (control) and intake all write through
// it, so none of them needs another's package to change a row.
package transition

import (
	"errors"
	"fmt"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// PutRun saves a run after checking its status change against the run
// status machine (keeptype's table): the one writer of runs.
// An existing run is written only from the revision its writer read
// (r.Rev, store.Tx.RunSetIfRev), and r.Rev follows the write: a writer
// that read an older state — a step under way when a person's decision
// came in, another node — gets store.ErrConflict and re-reads instead of
// writing over it. A forbidden move is refused as an internal error.
func PutRun(tx store.Tx, r *kt.Run) error {
	prev, err := tx.RunGet(r.ID)
	if errors.Is(err, kt.ErrNotFound) {
		return PutNewRun(tx, r)
	}
	if err != nil {
		return err
	}
	if prev.Rev != r.Rev {
		return fmt.Errorf("run %s was written since this writer read it (revision %d, now %d): %w", r.ID, r.Rev, prev.Rev, store.ErrConflict)
	}
	return PutRunFrom(tx, prev.Status, r)
}

// PutRunFrom overwrites run r, stored with status from at revision r.Rev,
// after checking the move; RunSetIfRev refuses (store.ErrConflict) when the
// run was written since that revision.
func PutRunFrom(tx store.Tx, from kt.Status, r *kt.Run) error {
	if !kt.RunStatusTransitionAllowed(from, r.Status) {
		return kt.Errorf(kt.ClassInternal, "run %s: status %q → %q is not allowed", r.ID, from, r.Status)
	}
	if err := writeNoting(tx, r, tx.RunSetIfRev); err != nil {
		return err
	}
	r.Rev++
	return nil
}

// PutNewRun writes a run known not to be in the store yet (the engine's runExec.unstored:
// a new run of a step, under a fresh id), without reading the row first.
func PutNewRun(tx store.Tx, r *kt.Run) error {
	if !kt.RunStatusTransitionAllowed("", r.Status) {
		return kt.Errorf(kt.ClassInternal, "run %s: a new run cannot start as %q", r.ID, r.Status)
	}
	return writeNoting(tx, r, tx.RunPut)
}

// PutItem saves an item after checking a task item's state change against
// the item machine of ch 12 §12.4 (keeptype's table); an input's status is
// derived, not stored, and is not checked here.
func PutItem(tx store.Tx, it kt.Input) error {
	if it.Kind == kt.KindTask {
		from, err := storedState(func() (kt.Input, error) { return tx.InputGet(it.ID) }, func(p kt.Input) kt.ItemStatus { return p.Status })
		if err != nil {
			return err
		}
		if from != it.Status && !kt.ItemTransitionAllowed(from, it.Status) {
			return kt.Errorf(kt.ClassInternal, "item %s: state %q → %q is not allowed", it.Key, from, it.Status)
		}
	}
	return tx.InputPut(it)
}

// PutMutation saves a ledger row after checking its state change against
// the state machine of ch 13 (keeptype's table); a forbidden move is a host bug.
func PutMutation(tx store.Tx, m kt.Mutation) error {
	from, err := storedState(func() (kt.Mutation, error) { return tx.MutationGet(m.ID) }, func(p kt.Mutation) kt.MutationStatus { return p.Status })
	if err != nil {
		return err
	}
	return PutMutationFrom(tx, from, m)
}

// PutMutationFrom saves a ledger row whose stored state is from ("" for a
// row not stored yet), after checking the move.
func PutMutationFrom(tx store.Tx, from kt.MutationStatus, m kt.Mutation) error {
	if err := checkLedgerMove(from, m); err != nil {
		return err
	}
	return tx.MutationPut(m)
}

// PutMutationHeld saves a ledger row whose stored status this step wrote
// (from), after checking the move: no read, and store.ErrStale when the
// row is no longer so.
func PutMutationHeld(tx store.Tx, m kt.Mutation, from kt.MutationStatus) error {
	if err := checkLedgerMove(from, m); err != nil {
		return err
	}
	return tx.MutationPutFrom(m, from)
}

// checkLedgerMove refuses a move of a ledger row that ch 13's table does
// not allow (from "" for a row not stored yet).
func checkLedgerMove(from kt.MutationStatus, m kt.Mutation) error {
	if from != m.Status && !kt.MutationTransitionAllowed(from, m.Status) {
		return kt.Errorf(kt.ClassInternal, "mutation %s: ledger state %q → %q is not allowed", m.ID, from, m.Status)
	}
	return nil
}

// InsertMutation creates a ledger row on the condition that no row has
// its identity (store.ErrIdentityTaken otherwise), after checking the move
// from nothing.
func InsertMutation(tx store.Tx, m kt.Mutation) error {
	if err := checkLedgerMove("", m); err != nil {
		return err
	}
	return tx.MutationInsert(m)
}

// storedState reads the state of a row about to be written: "" for a new one.
func storedState[T any, S ~string](read func() (T, error), state func(T) S) (S, error) {
	prev, err := read()
	switch {
	case err == nil:
		return state(prev), nil
	case errors.Is(err, kt.ErrNotFound):
		return "", nil
	}
	return "", err
}

// Touch stamps a change of a handler's row: its UpdatedAt moves forward
// with every write, even in the same millisecond or with a clock behind
// the last writer's, so a run tells a wake-up that came in while it
// prepared from the one that started it by the row alone
// (saveConsumerState). Every writer of a consumer's row stamps it so.
func Touch(h *kt.Handler, now int64) {
	h.UpdatedAt = max(now, h.UpdatedAt+1)
}
