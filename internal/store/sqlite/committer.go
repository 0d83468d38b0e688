package sqlite

import (
	"context"
	"errors"
	"fmt"

	"github.com/keep-run/keep/internal/store"
)

// Group commit. Every Update of the process goes to one goroutine, the
// committer, which owns the writer connection. It takes the request it was
// handed and every other request already waiting, runs each in its own
// savepoint inside one transaction, and commits once: one fsync for the
// whole group. Each caller is answered only after that commit returned, so
// no caller acts on a transition that is not on disk; a request whose
// function fails is rolled back to its savepoint and leaves the others
// alone. When the commit itself fails, every request of the group gets the
// error, exactly as if its own commit had failed.
//
// A request sees the writes of the requests before it in the same group
// (they commit together or not at all), never writes that are not durable
// once it has been answered.

// maxGroup bounds how many transitions share one commit, so that one
// caller's wait stays short under a flood.
const maxGroup = 64

type request struct {
	fn   func(store.Tx) error
	done chan result
}

type result struct {
	err   error
	panic any
}

// ErrClosed is returned by Update and View after Close.
var ErrClosed = errors.New("the store is closed")

func (s *Store) commitLoop(w *conn) {
	defer close(s.stopped)
	for {
		var first request
		select {
		case first = <-s.reqs:
		case <-s.quit:
			return
		}
		group := []request{first}
	gather:
		for len(group) < maxGroup {
			select {
			case r := <-s.reqs:
				group = append(group, r)
			default:
				break gather
			}
		}
		s.commitGroup(w, group)
	}
}

func (s *Store) commitGroup(w *conn, group []request) {
	results := make([]result, len(group))
	fail := func(err error) {
		for i := range group {
			if results[i].err == nil && results[i].panic == nil {
				results[i].err = err
			}
			group[i].done <- results[i]
		}
	}
	if err := w.exec("BEGIN IMMEDIATE"); err != nil {
		fail(fmt.Errorf("begin transaction: %w", err))
		return
	}
	// A group of one needs no savepoint: its rollback is the transaction's.
	single := len(group) == 1
	committed := 0
	for i, r := range group {
		if !single {
			if err := w.exec("SAVEPOINT t"); err != nil {
				w.exec("ROLLBACK")
				fail(fmt.Errorf("begin transaction: %w", err))
				return
			}
		}
		results[i] = runFn(w, r.fn)
		failed := results[i].err != nil || results[i].panic != nil
		if !failed {
			committed++
		}
		if single {
			break
		}
		if failed {
			// ROLLBACK TO fails when SQLite already rolled the whole
			// transaction back (disk full, I/O error): then no request of
			// the group can commit.
			if err := w.exec("ROLLBACK TO t"); err != nil {
				w.exec("ROLLBACK")
				fail(fmt.Errorf("the transaction was rolled back after an error: %w", err))
				return
			}
		}
		if err := w.exec("RELEASE t"); err != nil {
			w.exec("ROLLBACK")
			fail(fmt.Errorf("the transaction was rolled back after an error: %w", err))
			return
		}
	}
	if committed == 0 {
		// Nothing to make durable: no fsync. (After an error SQLite may have
		// rolled back already; the error that matters is the request's own.)
		w.exec("ROLLBACK")
	} else if err := w.exec("COMMIT"); err != nil {
		w.exec("ROLLBACK")
		fail(fmt.Errorf("commit: %w", err))
		return
	} else {
		s.commits.Add(1)
		s.transactions.Add(int64(committed))
	}
	for i, r := range group {
		r.done <- results[i]
	}
}

func runFn(w *conn, fn func(store.Tx) error) (res result) {
	defer func() {
		if p := recover(); p != nil {
			res = result{panic: p}
		}
	}()
	return result{err: fn(&tx{tx: w})}
}

// submit hands a request to the committer and waits for its answer. A
// request the committer has taken is always waited for, even when ctx ends
// meanwhile: its function may be running.
func (s *Store) submit(ctx context.Context, r request) error {
	if s.reqs == nil {
		return fmt.Errorf("%w: this copy of the data is open read-only", ErrReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r.done = make(chan result, 1)
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.quit:
		return ErrClosed
	}
	res := <-r.done
	if res.panic != nil {
		panic(res.panic)
	}
	return res.err
}
