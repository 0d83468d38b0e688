package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqldb"
)

// handlerNames lists workflow w's handlers, read afresh.
func handlerNames(t *testing.T, s *Store) []string {
	t.Helper()
	var names []string
	if err := s.View(context.Background(), func(tx store.Tx) error {
		hs, err := tx.HandlerList("w")
		for _, h := range hs {
			names = append(names, h.Name)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return names
}

// The backend of a step's transaction dies in the middle of its last
// pipeline (pg_terminate_backend, sent as one of the writes held back):
// the writes before it ran and the ones after it did not, and none is
// committed — the COMMIT was never reached. Update reports the failure
// (not success, not ErrConflict: nothing says the row changed), and the
// pool's next transaction works on a live connection.
func TestABackendKilledInsideThePipelinedCommitCommitsNothing(t *testing.T) {
	s, fenced := openFenced(t)
	r := kt.Run{ID: "r", Workflow: "w", Handler: "h", HandlerType: kt.HandlerTask, Phase: kt.PhaseExecuting, Status: kt.StatusActive, CreatedAt: 1, UpdatedAt: 1}
	if err := s.Update(fenced, func(tx store.Tx) error { return tx.RunPut(r) }); err != nil {
		t.Fatal(err)
	}
	for _, withRead := range []bool{false, true} {
		t.Run(fmt.Sprintf("read first %v", withRead), func(t *testing.T) {
			next := r
			next.Status = kt.StatusCommitted
			err := s.Update(fenced, func(tx store.Tx) error {
				if withRead { // the fence and the lock go with it: the rest is held back again
					if _, err := tx.HandlerList("w"); err != nil {
						return err
					}
				}
				if err := tx.HandlerPut(kt.Handler{Workflow: "w", Name: "before", Type: kt.HandlerProducer}); err != nil {
					return err
				}
				d, ok := tx.(*sqldb.Tx).Runner().(sqldb.Deferrer)
				if !ok || !d.Defer("end the backend", `SELECT pg_terminate_backend(pg_backend_pid())`) {
					return errors.New("the runner holds no writes back")
				}
				if err := tx.HandlerPut(kt.Handler{Workflow: "w", Name: "after", Type: kt.HandlerProducer}); err != nil {
					return err
				}
				return tx.RunSetIfRev(next)
			})
			if err == nil {
				t.Fatal("a transaction whose backend died before its COMMIT reported success")
			}
			if errors.Is(err, store.ErrConflict) {
				t.Fatalf("a dead backend reported as a conflict (a caller would re-read and go on as if nothing happened to the connection): %v", err)
			}
			if names := handlerNames(t, s); len(names) != 0 {
				t.Fatalf("handlers after the killed transaction: %v, want none (half a transaction committed)", names)
			}
			var got kt.Run
			if err := s.View(context.Background(), func(tx store.Tx) error {
				var err error
				got, err = tx.RunGet("r")
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if got.Status != kt.StatusActive || got.Rev != r.Rev {
				t.Fatalf("run after the killed transaction: %s rev %d, want active rev %d", got.Status, got.Rev, r.Rev)
			}
		})
	}
	// The connection was dropped, not handed out again: the next step writes.
	if err := s.Update(fenced, func(tx store.Tx) error {
		return tx.HandlerPut(kt.Handler{Workflow: "w", Name: "later", Type: kt.HandlerProducer})
	}); err != nil {
		t.Fatalf("the transaction after the killed ones: %v", err)
	}
	if names := handlerNames(t, s); len(names) != 1 || names[0] != "later" {
		t.Fatalf("handlers: %v, want [later]", names)
	}
}

// A conditional write that finds the run written since fails the whole
// transaction at COMMIT: the writes held back with it and the ones made
// after it are not stored either (ErrConflict means "nothing stored"), and
// a fenced step's conflict is reported as ErrFenced, the check that failed
// first.
func TestAConflictAtCommitStoresNothingOfTheTransaction(t *testing.T) {
	s, fenced := openFenced(t)
	r := kt.Run{ID: "r", Workflow: "w", Handler: "h", HandlerType: kt.HandlerTask, Phase: kt.PhaseExecuting, Status: kt.StatusActive, CreatedAt: 1, UpdatedAt: 1}
	if err := s.Update(fenced, func(tx store.Tx) error { return tx.RunPut(r) }); err != nil {
		t.Fatal(err)
	}
	stale := r
	stale.Rev = 7 // not the stored revision
	stale.Status = kt.StatusCommitted
	err := s.Update(fenced, func(tx store.Tx) error {
		if err := tx.HandlerPut(kt.Handler{Workflow: "w", Name: "before", Type: kt.HandlerProducer}); err != nil {
			return err
		}
		if err := tx.RunSetIfRev(stale); err != nil {
			return err
		}
		return tx.HandlerPut(kt.Handler{Workflow: "w", Name: "after", Type: kt.HandlerProducer})
	})
	if !errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrFenced) {
		t.Fatalf("a stale conditional write: %v, want ErrConflict", err)
	}
	if names := handlerNames(t, s); len(names) != 0 {
		t.Fatalf("handlers written with a refused run write: %v, want none", names)
	}
	// Taken over: the fence fails before the conditional write is tried.
	if err := s.Update(context.Background(), func(tx store.Tx) error {
		return tx.LeasePut(kt.Lease{Workflow: "w", Node: "other", Token: 2, ExpiresAt: 1 << 50})
	}); err != nil {
		t.Fatal(err)
	}
	err = s.Update(fenced, func(tx store.Tx) error {
		if err := tx.RunSetIfRev(stale); err != nil {
			return err
		}
		return tx.HandlerPut(kt.Handler{Workflow: "w", Name: "stale", Type: kt.HandlerProducer})
	})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a fenced step's stale run write: %v, want ErrFenced", err)
	}
	if names := handlerNames(t, s); len(names) != 0 {
		t.Fatalf("handlers written by a fenced step: %v, want none", names)
	}
}
