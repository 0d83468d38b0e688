package sqlite

import (
	"context"
	"errors"
	"fmt"

	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqldb"
)

// Group commit. Every Update of the process runs on the one writer
// connection. A caller that finds no commit under way becomes the leader:
// it takes its own request and every other request waiting, runs each in
// its own savepoint inside one transaction, and commits once: one fsync for
// the whole group. Callers that arrive meanwhile queue up and are taken by
// the leader's next round, so under load each fsync carries many
// transitions, and an uncontended Update runs on its caller's goroutine
// with no hand-off. Each caller is answered only after the commit that
// carries its request returned, so no caller acts on a transition that is
// not on disk; a request whose function fails is rolled back to its
// savepoint and leaves the others alone. When the commit itself fails,
// every request of the group gets the error, exactly as if its own commit
// had failed.
//
// A request sees the writes of the requests before it in the same group
// (they commit together or not at all), never writes that are not durable
// once it has been answered.

// maxGroup bounds how many transitions share one commit, so that one
// caller's wait stays short under a flood.
const maxGroup = 64

type request struct {
	fn     func(store.Tx) error
	done   chan result
	taken  bool // by a leader; guarded by Store.mu
	noSync bool // store.NoSync: its loss in a power cut is harmless
	// leads: the writer was handed to this request's caller to lead the
	// queue (handLead); guarded by Store.mu.
	leads bool
}

type result struct {
	err   error
	panic any
	// lead (not a result): the caller is to lead the queue now.
	lead bool
}

// handLead makes r's caller the leader of the queue (s.mu held, s.leading
// set and kept: the lead passes without a moment unled). r is queued and
// not taken, so its done channel is empty.
func (s *Store) handLead(r *request) {
	r.leads = true
	r.done <- result{lead: true}
}

// ErrClosed is returned by Update and View after Close.
var ErrClosed = errors.New("the store is closed")

// submit runs a request in a group commit and waits for its answer. A
// request a leader has taken is always waited for, even when ctx ends
// meanwhile: its function may be running.
func (s *Store) submit(ctx context.Context, fn func(store.Tx) error) error {
	if s.writer == nil {
		return fmt.Errorf("%w: this copy of the data is open read-only", ErrReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &request{fn: fn, done: make(chan result, 1), noSync: store.IsNoSync(ctx)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.queue = append(s.queue, r)
	if !s.leading {
		s.leading = true
		s.lead() // returns with s.mu unlocked
	} else {
		s.mu.Unlock()
	}
	var res result
	for {
		select {
		case res = <-r.done:
		case <-ctx.Done():
			s.mu.Lock()
			if !r.taken {
				s.dequeue(r)
				if r.leads {
					// Handed the lead as it gave up: lead the others
					// all the same (its hand-over is still in done).
					<-r.done
					s.lead() // returns with s.mu unlocked
					return ctx.Err()
				}
				s.mu.Unlock()
				return ctx.Err()
			}
			s.mu.Unlock()
			res = <-r.done
		}
		if !res.lead {
			break
		}
		s.mu.Lock()
		s.lead() // takes r among the first; returns with s.mu unlocked
	}
	if res.panic != nil {
		panic(res.panic)
	}
	return res.err
}

func (s *Store) dequeue(r *request) {
	for i, q := range s.queue {
		if q == r {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			return
		}
	}
}

// lead commits groups until the queue is empty. Called with s.mu held and
// s.leading set; returns with s.mu released and s.leading cleared.
func (s *Store) lead() {
	for len(s.queue) > 0 {
		n := min(len(s.queue), maxGroup)
		group := make([]*request, n)
		copy(group, s.queue)
		for _, r := range group {
			r.taken = true
		}
		s.queue = append(s.queue[:0], s.queue[n:]...)
		s.mu.Unlock()
		s.commitGroup(s.writer, group)
		s.mu.Lock()
	}
	s.leading = false
	s.idle.Broadcast()
	s.mu.Unlock()
}

func (s *Store) commitGroup(w *conn, group []*request) {
	results := make([]result, len(group))
	fail := func(err error) {
		for i := range group {
			if results[i].err == nil && results[i].panic == nil {
				results[i].err = err
			}
			group[i].done <- results[i]
		}
	}
	noSync, err := s.syncFor(w, group)
	if err != nil {
		fail(err)
		return
	}
	if noSync {
		defer func() {
			if w.exec("PRAGMA synchronous=FULL") == nil {
				s.notFull = false
			}
		}()
	}
	if err := w.exec("BEGIN IMMEDIATE"); err != nil {
		fail(fmt.Errorf("begin transaction: %w", err))
		return
	}
	committed, err := runGroup(w, group, results)
	if err != nil {
		fail(err)
		return
	}
	var seq int64
	if committed == 0 {
		// Nothing to make durable: no fsync. (After an error SQLite may have
		// rolled back already; the error that matters is the request's own.)
		w.exec("ROLLBACK")
	} else if err := w.QueryRow(`UPDATE commit_seq SET seq = seq + 1 WHERE id = 1 RETURNING seq`).Scan(&seq); err != nil {
		w.exec("ROLLBACK")
		fail(fmt.Errorf("commit: %w", err))
		return
	} else if err := w.exec("COMMIT"); err != nil {
		w.exec("ROLLBACK")
		fail(fmt.Errorf("commit: %w", err))
		return
	} else {
		// Another process (keep deploy beside keep serve) commits too: the
		// number comes from the database, so the note never runs ahead of it.
		// A commit without an fsync is not noted: the note must never run
		// ahead of what a power cut leaves (the next durable commit notes).
		if !noSync {
			s.noteSeq(seq)
			s.commits.Add(1)
		}
		s.transactions.Add(int64(committed))
	}
	for i, r := range group {
		r.done <- results[i]
	}
}

// syncFor sets the writer's synchronous mode for group and says whether
// the group commits without an fsync. A group of writes whose loss is
// harmless (store.NoSync: an empty poll's cleared wake-up) commits without
// one; one durable write in the group makes the whole group durable. The
// writer is put back to synchronous=FULL before any durable group commits:
// until that succeeds, no group commits at all (the error). When it says
// no fsync, the caller puts synchronous=FULL back after the commit.
func (s *Store) syncFor(w *conn, group []*request) (noSync bool, err error) {
	if s.notFull {
		if err := w.exec("PRAGMA synchronous=FULL"); err != nil {
			return false, fmt.Errorf("make commits durable again: %w", err)
		}
		s.notFull = false
	}
	for _, r := range group {
		if !r.noSync {
			return false, nil
		}
	}
	if err := w.exec("PRAGMA synchronous=NORMAL"); err != nil {
		return false, nil // commit it durably, as any other
	}
	s.notFull = true
	return true, nil
}

// runGroup runs each request of group in the open transaction, each under
// its own savepoint so one that fails leaves the others' writes, and says
// how many succeeded. An error means the whole transaction is gone (rolled
// back here): no request of the group can commit.
func runGroup(w *conn, group []*request, results []result) (committed int, err error) {
	// A group of one needs no savepoint: its rollback is the transaction's.
	single := len(group) == 1
	for i, r := range group {
		if !single {
			if err := w.exec("SAVEPOINT t"); err != nil {
				w.exec("ROLLBACK")
				return 0, fmt.Errorf("begin transaction: %w", err)
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
				return 0, fmt.Errorf("the transaction was rolled back after an error: %w", err)
			}
		}
		if err := w.exec("RELEASE t"); err != nil {
			w.exec("ROLLBACK")
			return 0, fmt.Errorf("the transaction was rolled back after an error: %w", err)
		}
	}
	return committed, nil
}

func runFn(w *conn, fn func(store.Tx) error) (res result) {
	defer func() {
		if p := recover(); p != nil {
			res = result{panic: p}
		}
	}()
	return result{err: fn(sqldb.NewTx(w))}
}
