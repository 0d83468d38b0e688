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

// A View marked store.ReadsAhead ends its snapshot in the pipeline of the
// reads it named: one round trip, no ROLLBACK of its own. A read it did not
// name runs the function again in a transaction of its own, which still
// sees one snapshot, and answers what the database holds. Nothing is left
// open on the connection: the next transaction on it writes.
func TestAViewEndsWithTheReadsItNamed(t *testing.T) {
	ctx := context.Background()
	s := openOneConnection(t)
	put := func(name string) {
		t.Helper()
		if err := s.Update(ctx, func(tx store.Tx) error {
			return tx.HandlerPut(kt.Handler{Workflow: "w", Name: name, Type: kt.HandlerProducer})
		}); err != nil {
			t.Fatal(err)
		}
	}
	put("a")
	named := func(tx store.Tx) {
		_, _ = tx.HandlerGet("w", "a")
		_, _ = tx.HandlerList("w")
	}

	// All its reads named: one round trip.
	runs := 0
	before := s.Stats().RoundTrips
	if err := s.View(store.ReadsAhead(ctx), func(tx store.Tx) error {
		runs++
		store.Prefetch(tx, named)
		if _, err := tx.HandlerGet("w", "a"); err != nil {
			return err
		}
		hs, err := tx.HandlerList("w")
		if err != nil || len(hs) != 1 {
			return fmt.Errorf("handlers: %+v, %v", hs, err)
		}
		// A named read asked again is answered again, from what came.
		if _, err := tx.HandlerGet("w", "a"); err != nil {
			return fmt.Errorf("the named read asked again: %w", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().RoundTrips - before; n != 1 || runs != 1 {
		t.Errorf("a View of named reads: %d round trips and %d runs of its function, want 1 and 1", n, runs)
	}
	// The connection is in no transaction: a write on it commits.
	put("b")

	// A read it did not name: the function runs again, and its answers
	// are what is stored.
	runs = 0
	var got []string
	if err := s.View(store.ReadsAhead(ctx), func(tx store.Tx) error {
		runs++
		got = nil
		store.Prefetch(tx, named)
		hs, err := tx.HandlerList("w")
		if err != nil {
			return err
		}
		for _, h := range hs {
			got = append(got, h.Name)
		}
		if _, err := tx.HandlerGet("w", "b"); err != nil { // not named
			return fmt.Errorf("read the handler b: %w", err)
		}
		return nil
	}); err != nil {
		t.Fatalf("a View with a read it did not name: %v", err)
	}
	if runs != 2 || fmt.Sprint(got) != "[a b]" {
		t.Errorf("a View with a read it did not name ran %d times and read %v, want 2 and [a b]", runs, got)
	}
	if n := s.Stats().Rereads; n != 1 {
		t.Errorf("%d Views run again, want 1", n)
	}
	put("c")

	// Unmarked, a View keeps its snapshot to the end, as before: its
	// function runs once, whatever it reads.
	runs = 0
	if err := s.View(ctx, func(tx store.Tx) error {
		runs++
		store.Prefetch(tx, named)
		if _, err := tx.HandlerGet("w", "a"); err != nil {
			return err
		}
		_, err := tx.HandlerGet("w", "c")
		return err
	}); err != nil || runs != 1 {
		t.Fatalf("an unmarked View: %d runs, %v", runs, err)
	}

	// A function that hides the failure of the read it did not name (it
	// takes any error for "not found") still runs again and sees the row.
	runs = 0
	found := false
	if err := s.View(store.ReadsAhead(ctx), func(tx store.Tx) error {
		runs++
		store.Prefetch(tx, named)
		if _, err := tx.HandlerGet("w", "a"); err != nil {
			return err
		}
		_, err := tx.HandlerGet("w", "c")
		found = err == nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if runs != 2 || !found {
		t.Errorf("a function that hid the failed read: %d runs, found %v; want 2, true", runs, found)
	}
	if err := s.View(store.ReadsAhead(ctx), func(tx store.Tx) error {
		store.Prefetch(tx, named)
		_, err := tx.HandlerGet("w", "nobody")
		return err
	}); !errors.Is(err, kt.ErrNotFound) {
		t.Fatalf("a read not named, of a row that is not there: %v, want not found", err)
	}
	put("d")
}

// A transaction whose BEGIN failed (here: a read sent ahead that does not
// prepare, its failure swallowed by the function) began nothing: every
// statement after fails with that failure — a read is not run outside the
// snapshot, a write held back is not dropped while the COMMIT says yes —
// and a read sent ahead with it answers the failure, not an empty page.
func TestATransactionWhoseBeginFailedRefusesTheRest(t *testing.T) {
	ctx := context.Background()
	s := openOneConnection(t)
	const bad = `SELECT no_such_column FROM handlers WHERE workflow=?`
	good := `SELECT name FROM handlers WHERE workflow=?`
	for _, write := range []bool{false, true} {
		begin := "begin isolation level repeatable read read only"
		if write {
			begin = "begin"
		}
		var after, goodErr, commitErr error
		if err := s.onConn(ctx, begin, write, func(r *runner) error {
			tx := sqldb.NewTx(r)
			if write {
				if err := tx.HandlerPut(kt.Handler{Workflow: "w", Name: "lost", Type: kt.HandlerProducer}); err != nil {
					return err
				}
			}
			r.Prefetch(good, "w")
			r.Prefetch(bad, "w")
			rows, err := r.Query(bad, "w")
			if err == nil {
				rows.Close()
				return fmt.Errorf("a statement that does not prepare was answered")
			}
			// The function takes the failure for "nothing there" and goes on.
			if rows, goodErr = r.Query(good, "w"); goodErr == nil {
				rows.Close()
			}
			if rows, after = r.Query(`SELECT current_setting('transaction_read_only')`); after == nil {
				rows.Close()
			}
			if write {
				commitErr = r.commit()
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if goodErr == nil || after == nil || (write && commitErr == nil) {
			t.Errorf("write %v: after a failed BEGIN, the read sent ahead answered %v, the next read %v, the commit %v; want each to fail", write, goodErr, after, commitErr)
		}
	}
	if err := s.View(ctx, func(tx store.Tx) error {
		hs, err := tx.HandlerList("w")
		if err != nil || len(hs) != 0 {
			return fmt.Errorf("handlers after the failed transactions: %+v, %v (want none)", hs, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// openOneConnection opens a store in a fresh schema whose pool holds one
// connection: every transaction runs on the one the last used, so a
// transaction or snapshot left open there would show.
func openOneConnection(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), freshSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.db.SetMaxOpenConns(1)
	return s
}
