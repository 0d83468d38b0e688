package transition

import (
	"errors"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// writeNoting writes run r with write after noting its wait for a person
// (noteWait); a write that fails leaves r.BlockedAt as the store has it.
func writeNoting(tx store.Tx, r *kt.Run, write func(kt.Run) error) error {
	blockedAt := r.BlockedAt
	if err := noteWait(tx, r); err != nil {
		return err
	}
	if err := write(*r); err != nil {
		r.BlockedAt = blockedAt
		return err
	}
	return nil
}

// noteWait keeps the times run r waits for a person (issue 42's time
// blocked, exact), as it is about to be written: r.BlockedAt is when its
// wait began (the write that made a person the one to act, WhoActs), and
// a wait that ends — a person acted, keep took over, the run ended — is
// recorded whole (store.Tx.BlockedSpanAdd) from then to this write.
// r.BlockedAt is what the store holds: the writer read it, or wrote it.
func noteWait(tx store.Tx, r *kt.Run) error {
	waits, err := waitsForPerson(tx, *r)
	if err != nil {
		return err
	}
	now := max(r.UpdatedAt, r.CreatedAt)
	switch {
	case waits && r.BlockedAt == 0:
		r.BlockedAt = now
	case !waits && r.BlockedAt != 0:
		span := store.BlockedSpan{RunID: r.ID, Handler: r.Handler, From: r.BlockedAt, To: max(now, r.BlockedAt)}
		if err := tx.BlockedSpanAdd(r.Workflow, span); err != nil {
			return err
		}
		r.BlockedAt = 0
	}
	return nil
}

// waitsForPerson says a person must act on run r; its mutation is read
// only where WhoActs looks at it (a run in reconciliation).
func waitsForPerson(tx store.Tx, r kt.Run) (bool, error) {
	if r.Status != kt.StatusReconciliation {
		return kt.WhoActs(r, kt.Mutation{}, false) == kt.APerson, nil
	}
	m, err := tx.MutationByRun(r.ID)
	if err != nil && !errors.Is(err, kt.ErrNotFound) {
		return false, err
	}
	return kt.WhoActs(r, m, err == nil) == kt.APerson, nil
}
