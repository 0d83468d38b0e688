package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// openFenced opens a store with workflow w leased to node n at token 1 and
// returns the context of a step holding that lease.
func openFenced(t *testing.T) (*Store, context.Context) {
	t.Helper()
	s, err := Open(context.Background(), freshSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if err := s.Update(ctx, func(tx store.Tx) error {
		return tx.LeasePut(kt.Lease{Workflow: "w", Node: "n", Token: 1, ExpiresAt: 1 << 50})
	}); err != nil {
		t.Fatal(err)
	}
	return s, store.WithFence(ctx, store.Fence{Workflow: "w", Node: "n", Token: 1})
}

// The fence check (keep_fence) needs no answer of its own: it goes with
// the transaction's first read, and a stale step's transaction is aborted
// by PostgreSQL before anything after the check runs. A step that makes
// what it likes of the failed read (here: "not found", so it writes)
// still writes nothing, and its Update says it was fenced.
func TestTheFenceGoesWithTheFirstRead(t *testing.T) {
	s, fenced := openFenced(t)
	step := func(ctx context.Context, name string) error {
		return s.Update(ctx, func(tx store.Tx) error {
			if _, err := tx.HandlerGet("w", name); err == nil {
				return fmt.Errorf("%s exists already", name)
			}
			return tx.HandlerPut(kt.Handler{Workflow: "w", Name: name, Type: kt.HandlerProducer})
		})
	}
	before := s.Stats().RoundTrips
	if err := step(fenced, "a"); err != nil {
		t.Fatal(err)
	}
	// BEGIN, the fence check and the read; the write and the COMMIT.
	if n := s.Stats().RoundTrips - before; n != 2 {
		t.Errorf("a step's read and write: %d round trips, want 2", n)
	}
	if err := s.Update(context.Background(), func(tx store.Tx) error {
		return tx.LeasePut(kt.Lease{Workflow: "w", Node: "other", Token: 2, ExpiresAt: 1 << 50})
	}); err != nil {
		t.Fatal(err)
	}
	if err := step(fenced, "stale"); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a stale step that read and wrote: %v, want ErrFenced", err)
	}
	// One that only writes sends its check with its writes and COMMIT.
	err := s.Update(fenced, func(tx store.Tx) error {
		return tx.HandlerPut(kt.Handler{Workflow: "w", Name: "stale2", Type: kt.HandlerProducer})
	})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a stale step that only wrote: %v, want ErrFenced", err)
	}
	if err := s.View(context.Background(), func(tx store.Tx) error {
		hs, err := tx.HandlerList("w")
		if err != nil || len(hs) != 1 || hs[0].Name != "a" {
			return fmt.Errorf("handlers after the stale steps: %+v %v (want only a)", hs, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Reads sent ahead (store.Prefetch) go in one round trip with the fence
// check; a read asked for afterwards is answered from them, unless the
// transaction wrote its table since: then it reads again and sees its own
// write. A write to another table leaves the answer good.
func TestReadsSentAhead(t *testing.T) {
	s, fenced := openFenced(t)
	if err := s.Update(fenced, func(tx store.Tx) error {
		for _, n := range []string{"a", "b"} {
			if err := tx.HandlerPut(kt.Handler{Workflow: "w", Name: n, Type: kt.HandlerProducer, State: []byte(`{"n":1}`)}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	before := s.Stats().RoundTrips
	err := s.Update(fenced, func(tx store.Tx) error {
		store.Prefetch(tx, func(tx store.Tx) {
			_, _ = tx.HandlerGet("w", "a")
			_, _ = tx.HandlerList("w")
			_, _ = tx.MutationGet("none")
		})
		a, err := tx.HandlerGet("w", "a") // the round trip of all three
		if err != nil || string(a.State) != `{"n": 1}` && string(a.State) != `{"n":1}` {
			return fmt.Errorf("a, read ahead: %+v %v", a, err)
		}
		if _, err := tx.MutationGet("none"); !errors.Is(err, kt.ErrNotFound) {
			return fmt.Errorf("a missing row, read ahead: %v, want not found", err)
		}
		if err := tx.WorkflowPut(kt.Workflow{Name: "w", CreatedAt: 1, UpdatedAt: 1}); err != nil {
			return err // another table: the list read ahead stays good
		}
		hs, err := tx.HandlerList("w")
		if err != nil || len(hs) != 2 {
			return fmt.Errorf("the list read ahead: %+v %v", hs, err)
		}
		store.Prefetch(tx, func(tx store.Tx) { _, _ = tx.HandlerGet("w", "b") })
		b := hs[1]
		b.State = []byte(`{"n":2}`)
		if err := tx.HandlerPut(b); err != nil { // drops b's answer read ahead
			return err
		}
		got, err := tx.HandlerGet("w", "b")
		if err != nil || string(got.State) != `{"n": 2}` && string(got.State) != `{"n":2}` {
			return fmt.Errorf("b after the transaction's own write: %s %v, want its write", got.State, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// BEGIN, the fence and the three reads; b's read ahead, the two
	// writes and b's read again; the COMMIT.
	if n := s.Stats().RoundTrips - before; n != 3 {
		t.Errorf("%d round trips, want 3", n)
	}
	// A read-only transaction: BEGIN and its reads together, then the rollback.
	before = s.Stats().RoundTrips
	if err := s.View(context.Background(), func(tx store.Tx) error {
		store.Prefetch(tx, func(tx store.Tx) {
			_, _ = tx.HandlerList("w")
			_, _ = tx.HandlerGet("w", "a")
		})
		if hs, err := tx.HandlerList("w"); err != nil || len(hs) != 2 {
			return fmt.Errorf("the list, read ahead: %+v %v", hs, err)
		}
		_, err := tx.HandlerGet("w", "a")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().RoundTrips - before; n != 2 {
		t.Errorf("a view of two reads sent ahead: %d round trips, want 2", n)
	}
}

func TestKindOf(t *testing.T) {
	for _, c := range []struct {
		q      string
		read   bool
		writes string
		tables []string
	}{
		{`SELECT a FROM events WHERE id=?`, true, "", []string{"events"}},
		{`SELECT min(x) FROM (SELECT (SELECT created_at FROM events e) AS x) AS f`, true, "", []string{"events"}},
		{`SELECT a FROM runs r JOIN events e ON e.id=r.id`, true, "", []string{"runs", "events"}},
		{`SELECT 1 FROM leases WHERE workflow=? FOR NO KEY UPDATE`, false, "", nil},
		{"SELECT 1 FROM leases WHERE workflow=?\nFOR UPDATE", false, "", nil},
		{`SELECT pg_advisory_xact_lock(?, 1)`, false, "", nil},
		{`INSERT INTO handlers(workflow) VALUES(?)`, false, "handlers", nil},
		{`UPDATE runs SET a=? WHERE id=?`, false, "runs", nil},
		{`DELETE FROM events WHERE id=?`, false, "events", nil},
		{`WITH x AS (DELETE FROM events RETURNING id) SELECT 1`, false, "", nil},
	} {
		k := kindOf(c.q)
		if k.read != c.read || k.writes != c.writes || fmt.Sprint(k.tables) != fmt.Sprint(c.tables) {
			t.Errorf("%s: %+v, want read %v writes %q tables %v", c.q, k, c.read, c.writes, c.tables)
		}
	}
}

// A run's conditional write (RunSetIfRev) needs no answer of its own
// either: it goes with the COMMIT, and one that finds the run written
// since fails the transaction with store.ErrConflict.
func TestAConditionalWriteGoesWithTheCommit(t *testing.T) {
	s, fenced := openFenced(t)
	r := kt.Run{ID: "r", Workflow: "w", Handler: "h", HandlerType: kt.HandlerTask, Phase: kt.PhaseExecuting, Status: kt.StatusActive, CreatedAt: 1, UpdatedAt: 1}
	if err := s.Update(fenced, func(tx store.Tx) error { return tx.RunPut(r) }); err != nil {
		t.Fatal(err)
	}
	before := s.Stats().RoundTrips
	next := r
	next.Status = kt.StatusCommitted
	if err := s.Update(fenced, func(tx store.Tx) error { return tx.RunSetIfRev(next) }); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().RoundTrips - before; n != 1 {
		t.Errorf("a conditional write alone: %d round trips, want 1 (BEGIN, the fence, the write and the COMMIT)", n)
	}
	err := s.Update(fenced, func(tx store.Tx) error { return tx.RunSetIfRev(next) }) // from the revision before
	if !errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrFenced) {
		t.Fatalf("a conditional write from a stale revision: %v, want ErrConflict", err)
	}
}
