package sqlite_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqldb"
	"github.com/keep-run/keep/internal/store/sqlite"
)

// modes runs a test with a plain View (the control) and a ShortRead View.
var modes = []struct {
	name string
	mark func(context.Context) context.Context
}{
	{"plain", func(c context.Context) context.Context { return c }},
	{"short", store.ShortRead},
}

// store.Store.View promises "a read-only transaction": a write through the
// Tx of a View is refused, and nothing of it stays. A ShortRead View runs
// on the writer's connection, which has no query_only: it is judged by the
// rows the connection changed, which also catches a write that returns
// rows (RETURNING) and so goes through Query, not Exec.
func TestAShortReadRefusesWrites(t *testing.T) {
	writes := []struct {
		name  string
		write func(tx store.Tx) error
	}{
		{"exec", func(tx store.Tx) error {
			return tx.WorkflowPut(kt.Workflow{Name: "written-in-a-view", ActiveVersion: 1})
		}},
		{"returning", func(tx store.Tx) error {
			var name string
			return tx.(*sqldb.Tx).Runner().QueryRow(`UPDATE workflows SET name = 'written-in-a-view' RETURNING name`).Scan(&name)
		}},
		// Found by an attack on the short read. SQLite counts a statement's
		// changes when it ends, and an answer left open kept the writer
		// from committing afterwards.
		{"returning-left-open", func(tx store.Tx) error {
			_, err := tx.(*sqldb.Tx).Runner().Query(`UPDATE workflows SET name = 'written-in-a-view' RETURNING name`)
			return err
		}},
		// The read's transaction ended early: every write after it would
		// autocommit, durably, but for the commit hook's veto.
		{"commit-then-write", func(tx store.Tx) error {
			if _, err := tx.(*sqldb.Tx).Runner().Exec(`COMMIT`); err != nil {
				return err
			}
			return tx.WorkflowPut(kt.Workflow{Name: "written-in-a-view", ActiveVersion: 1})
		}},
	}
	for _, m := range modes {
		for _, w := range writes {
			t.Run(m.name+"/"+w.name, func(t *testing.T) {
				s := openStore(t)
				putWorkflow(t, s, "before")
				var seenInside bool
				err := s.View(m.mark(context.Background()), func(tx store.Tx) error {
					if err := w.write(tx); err != nil {
						return err
					}
					_, gerr := tx.WorkflowGet("written-in-a-view")
					seenInside = gerr == nil
					return nil
				})
				if err == nil {
					t.Fatalf("a write inside a %s View was not refused (the View then saw its own uncommitted write: %v)", m.name, seenInside)
				}
				for name, want := range map[string]bool{"before": true, "written-in-a-view": false} {
					if found, err := hasWorkflow(t, s, context.Background(), name); err != nil || found != want {
						t.Fatalf("after the refused write in a %s View, workflow %q: found %v (%v), want %v", m.name, name, found, err, want)
					}
				}
				putWorkflow(t, s, "after") // the writer writes as before
			})
		}
	}
}

// A short read that sets query_only on the writer (hand-written SQL: the
// store's own never does) is refused, and the writer is set back, so the
// next Update commits (found by an attack: every later Update failed with
// "attempt to write a readonly database" until a restart).
func TestAShortReadThatSetsQueryOnlyLeavesTheWriterWriting(t *testing.T) {
	s := openStore(t)
	putWorkflow(t, s, "before")
	err := s.View(store.ShortRead(context.Background()), func(tx store.Tx) error {
		_, err := tx.(*sqldb.Tx).Runner().Exec(`PRAGMA query_only=1`)
		return err
	})
	if err == nil {
		t.Fatal("a short read that set query_only on the writer was not refused")
	}
	putWorkflow(t, s, "after")
}

// An Update that queues during a ShortRead runs its function on the View
// caller's goroutine (giveWriterBack leads it), before View returns: an
// Update whose function waits for what the View's caller does once its
// read returned never gets it.
func TestAShortReadReturnsWithoutRunningOthersUpdates(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := openStore(t)
			putWorkflow(t, s, "before")
			viewReturned := make(chan struct{})
			fnStarted := make(chan struct{})
			done := make(chan error, 1)
			err := s.View(m.mark(context.Background()), func(tx store.Tx) error {
				go func() {
					done <- s.Update(context.Background(), func(tx store.Tx) error {
						close(fnStarted)
						select {
						case <-viewReturned:
						case <-time.After(time.Minute): // only bounds a hang
							return errors.New("the View's caller never got its read back")
						}
						return tx.WorkflowPut(kt.Workflow{Name: "after", ActiveVersion: 1})
					})
				}()
				// Wait until the update is either running (plain View) or
				// queued behind this read (ShortRead View).
				for {
					select {
					case <-fnStarted:
						return nil
					default:
					}
					if s.Queued() > 0 {
						return nil
					}
					time.Sleep(time.Millisecond)
				}
			})
			close(viewReturned)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("%s View: %v", m.name, err)
			}
		})
	}
}

// A ShortRead View that panics or fails, with Updates queued behind it: the
// writer is given back, the queued Update commits durably, what the View
// wrote (on the writer!) does not leak into that commit, and the store
// stays usable.
func TestAShortReadThatPanicsOrFailsGivesTheWriterBack(t *testing.T) {
	for _, how := range []string{"panic", "error", "write-then-panic", "write-then-error", "write-then-nil"} {
		t.Run(how, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "keep.db")
			s, err := sqlite.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			putWorkflow(t, s, "before")
			done := make(chan error, 1)
			func() {
				defer func() { recover() }()
				_ = s.View(store.ShortRead(context.Background()), func(tx store.Tx) error {
					if how[:5] == "write" {
						_ = tx.WorkflowPut(kt.Workflow{Name: "leak", ActiveVersion: 1})
					}
					go func() {
						done <- s.Update(context.Background(), func(tx store.Tx) error {
							return tx.WorkflowPut(kt.Workflow{Name: "queued", ActiveVersion: 1})
						})
					}()
					waitQueued(t, s, 1)
					switch how {
					case "panic", "write-then-panic":
						panic("boom")
					case "error", "write-then-error":
						return errors.New("boom")
					}
					return nil
				})
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("the queued update: %v", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("the queued update hangs")
			}
			putWorkflow(t, s, "next")
			if found, err := hasWorkflow(t, s, store.ShortRead(context.Background()), "next"); err != nil || !found {
				t.Fatalf("a short read after: %v %v", found, err)
			}
			s.Close()
			s, err = sqlite.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for name, want := range map[string]bool{"queued": true, "next": true, "leak": false} {
				if found, err := hasWorkflow(t, s, context.Background(), name); err != nil || found != want {
					t.Errorf("after reopen: %s found %v (%v), want %v", name, found, err, want)
				}
			}
		})
	}
}

// Many short reads, plain reads, durable, NoSync, failing and panicking
// updates at once (run with -race). Each update moves two counters
// together: a read must see them equal (one snapshot, never half a group,
// never an uncommitted write). Every acknowledged durable update is there
// after a reopen; no refused one is.
func TestShortReadsUnderConcurrentUpdates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keep.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(tx store.Tx, name string, n int) error {
		return tx.HandlerPut(kt.Handler{Workflow: "w", Name: name, Type: kt.HandlerProducer, State: json.RawMessage(strconv.Itoa(n))})
	}
	get := func(tx store.Tx, name string) (int, error) {
		h, err := tx.HandlerGet("w", name)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(string(h.State))
	}
	if err := s.Update(ctx, func(tx store.Tx) error {
		if err := put(tx, "a", 0); err != nil {
			return err
		}
		return put(tx, "b", 0)
	}); err != nil {
		t.Fatal(err)
	}
	const writers, perWriter, readers, perReader = 8, 60, 6, 300
	var wg sync.WaitGroup
	acked := make([][]bool, writers)
	var bad atomic.Value
	var okIncrements atomic.Int64
	for w := 0; w < writers; w++ {
		acked[w] = make([]bool, perWriter)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				c := ctx
				if (w+i)%4 == 0 {
					c = store.NoSync(ctx)
				}
				var cancel context.CancelFunc = func() {}
				if i%7 == 3 {
					c, cancel = context.WithCancel(c)
					go cancel()
				}
				var uerr error
				func() {
					defer func() {
						if p := recover(); p != nil {
							uerr = fmt.Errorf("panic %v", p)
						}
					}()
					uerr = s.Update(c, func(tx store.Tx) error {
						a, err := get(tx, "a")
						if err != nil {
							return err
						}
						if err := put(tx, "a", a+1); err != nil {
							return err
						}
						b, err := get(tx, "b")
						if err != nil {
							return err
						}
						if err := put(tx, "b", b+1); err != nil {
							return err
						}
						if err := put(tx, fmt.Sprintf("m-%d-%d", w, i), 1); err != nil {
							return err
						}
						switch i % 5 {
						case 1:
							return errors.New("refused")
						case 2:
							panic("boom")
						}
						return nil
					})
				}()
				cancel()
				if uerr == nil {
					acked[w][i] = true
					okIncrements.Add(1)
				}
			}
		}()
	}
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perReader; i++ {
				c := ctx
				if r%3 != 0 {
					c = store.ShortRead(ctx)
				}
				if i%11 == 5 {
					var cancel context.CancelFunc
					c, cancel = context.WithCancel(c)
					cancel()
				}
				var err error
				func() {
					defer func() {
						if p := recover(); p != nil && p != "reader boom" {
							err = fmt.Errorf("panic %v", p)
						}
					}()
					err = s.View(c, func(tx store.Tx) error {
						a, err := get(tx, "a")
						if err != nil {
							return err
						}
						b, err := get(tx, "b")
						if err != nil {
							return err
						}
						if a != b {
							return fmt.Errorf("a=%d b=%d: a read saw half a transaction", a, b)
						}
						if i%13 == 0 {
							panic("reader boom")
						}
						return nil
					})
				}()
				if err != nil && !errors.Is(err, context.Canceled) {
					bad.Store(err.Error())
				}
			}
		}()
	}
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	s.Close()
	s, err = sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.View(ctx, func(tx store.Tx) error {
		a, err := get(tx, "a")
		if err != nil {
			return err
		}
		if int64(a) != okIncrements.Load() {
			return fmt.Errorf("a=%d after reopen, %d updates acknowledged", a, okIncrements.Load())
		}
		for w := range acked {
			for i, ok := range acked[w] {
				_, gerr := tx.HandlerGet("w", fmt.Sprintf("m-%d-%d", w, i))
				if ok != (gerr == nil) {
					return fmt.Errorf("update %d/%d acknowledged=%v, on disk: %v", w, i, ok, gerr)
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A ShortRead whose callback panics hands the queued Updates their lead
// while it unwinds; a queued Update's function panics too: each caller
// gets its own.
func TestPanicsOnBothSidesOfAShortRead(t *testing.T) {
	s := openStore(t)
	putWorkflow(t, s, "before")
	updPanic := make(chan any, 1)
	var viewPanic any
	func() {
		defer func() { viewPanic = recover() }()
		_ = s.View(store.ShortRead(context.Background()), func(tx store.Tx) error {
			// The Update starts once the read holds the writer, so that it
			// queues behind it (started before, it could commit first and
			// never queue: CI saw this test wait for it for ten minutes).
			go func() {
				defer func() { updPanic <- recover() }()
				_ = s.Update(context.Background(), func(tx store.Tx) error {
					panic("update boom")
				})
			}()
			waitQueued(t, s, 1)
			panic("view boom")
		})
	}()
	if viewPanic != "view boom" {
		t.Fatalf("view panic %v", viewPanic)
	}
	select {
	case p := <-updPanic:
		if p != "update boom" {
			t.Fatalf("update panic %v", p)
		}
	case <-time.After(time.Minute):
		t.Fatal("update hangs")
	}
	putWorkflow(t, s, "after")
}

// Close while a ShortRead holds the writer with an Update queued; an
// Update cancelled while queued behind a ShortRead.
func TestCloseAndCancelDuringAShortRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keep.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	putWorkflow(t, s, "before")
	queued := make(chan error, 1)
	cancelled := make(chan error, 1)
	closed := make(chan struct{})
	cctx, cancel := context.WithCancel(context.Background())
	_ = s.View(store.ShortRead(context.Background()), func(tx store.Tx) error {
		go func() {
			cancelled <- s.Update(cctx, func(tx store.Tx) error {
				return tx.WorkflowPut(kt.Workflow{Name: "cancelled", ActiveVersion: 1})
			})
		}()
		waitQueued(t, s, 1)
		go func() {
			queued <- s.Update(context.Background(), func(tx store.Tx) error {
				return tx.WorkflowPut(kt.Workflow{Name: "queued", ActiveVersion: 1})
			})
		}()
		waitQueued(t, s, 2)
		cancel()
		if err := <-cancelled; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled queued update: %v", err)
		}
		go func() { s.Close(); close(closed) }()
		return nil
	})
	qerr := <-queued
	<-closed
	s, err = sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	found, err := hasWorkflow(t, s, context.Background(), "queued")
	if err != nil || found != (qerr == nil) {
		t.Fatalf("queued update returned %v, on disk %v (%v)", qerr, found, err)
	}
	if found, _ := hasWorkflow(t, s, context.Background(), "cancelled"); found {
		t.Fatal("the cancelled update is on disk")
	}
	t.Logf("queued update: %v", qerr)
}

// The first caller queued behind a short read is handed the lead as the
// read ends; if it gives up (its context cancelled) at that moment, it
// still leads the others before it returns: the one behind it commits and
// nothing hangs. Either way round, the given-up Update is on disk exactly
// when it said it committed.
func TestALeadHandedToACallerThatGivesUpStillLeads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keep.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 100; i++ {
		first, second := fmt.Sprintf("first-%d", i), fmt.Sprintf("second-%d", i)
		ctx, cancel := context.WithCancel(context.Background())
		firstErr, secondErr := make(chan error, 1), make(chan error, 1)
		if err := s.View(store.ShortRead(context.Background()), func(tx store.Tx) error {
			go func() {
				firstErr <- s.Update(ctx, func(tx store.Tx) error { return tx.WorkflowPut(kt.Workflow{Name: first, ActiveVersion: 1}) })
			}()
			waitQueued(t, s, 1)
			go func() {
				secondErr <- s.Update(context.Background(), func(tx store.Tx) error { return tx.WorkflowPut(kt.Workflow{Name: second, ActiveVersion: 1}) })
			}()
			waitQueued(t, s, 2)
			if i%2 == 0 {
				cancel() // just before the read ends and hands the lead over
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		cancel() // just after
		var ferr, serr error
		for _, c := range []struct {
			ch  chan error
			err *error
		}{{firstErr, &ferr}, {secondErr, &serr}} {
			select {
			case *c.err = <-c.ch:
			case <-time.After(time.Minute): // only bounds a hang
				t.Fatalf("round %d: an Update queued behind a short read never returned", i)
			}
		}
		if serr != nil {
			t.Fatalf("round %d: the second Update: %v", i, serr)
		}
		if ferr != nil && !errors.Is(ferr, context.Canceled) {
			t.Fatalf("round %d: the first Update: %v", i, ferr)
		}
		for name, want := range map[string]bool{first: ferr == nil, second: true} {
			if found, err := hasWorkflow(t, s, context.Background(), name); err != nil || found != want {
				t.Fatalf("round %d: %s on disk %v, want %v (%v)", i, name, found, want, err)
			}
		}
	}
}

// waitQueued waits until n Updates are queued behind the writer's holder.
// A minute is only the bound of a hang (they queue at once). Called on
// the test's goroutine (in a View's function too).
func waitQueued(t *testing.T, s *sqlite.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for s.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d updates never queued behind the short read (%d did)", n, s.Queued())
		}
		time.Sleep(time.Millisecond)
	}
}
