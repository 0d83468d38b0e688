// Package sqldb is what keep's SQL backends share: the ledger's statements
// (Tx, store.Tx over a Runner) and the versioned migrations. The SQLite and
// PostgreSQL backends own their connections, transactions and schema files;
// the SQL that reads and writes the ledgers is written once, here.
package sqldb

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/keep-run/keep/internal/store"
)

// Runner runs the statements of one transaction.
type Runner interface {
	Exec(q string, args ...any) (sql.Result, error)
	Query(q string, args ...any) (Rows, error)
	QueryRow(q string, args ...any) Row
}

// Rows are the rows of a Query, read as database/sql's are (*sql.Rows is
// one): a backend that talks to its database directly (PostgreSQL's pgx)
// returns its own.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// Row is one row of a QueryRow.
type Row interface {
	Scan(dest ...any) error
}

// SharedLocker is what a backend's Runner implements when write
// transactions of different workflows may run at once (PostgreSQL): the
// rows that belong to no workflow (connections, secrets, notices, the
// installation) are read and written only after LockShared, which
// serializes those transactions on them. A Runner without it (SQLite's
// single writer) needs nothing.
type SharedLocker interface {
	LockShared() error
}

// shared takes the backend's lock on the rows of no workflow, if it has one.
func (t *Tx) shared() error {
	if l, ok := t.r.(SharedLocker); ok {
		return l.LockShared()
	}
	return nil
}

// Deferrer is what a backend's Runner implements when it can hold back a
// write whose only answer is success or an error and send it with the
// next statement that needs an answer, or at commit: one round trip for
// several writes (PostgreSQL). Defer reports false when it did not take
// the statement (a read-only transaction); the caller runs it then.
type Deferrer interface {
	Defer(what, q string, args ...any) bool
}

// ChangeDeferrer is what a backend's Runner implements when it can hold
// back a conditional write too (PostgreSQL): one that must change a row,
// the transaction failing with failure (naming what) when it changes none.
type ChangeDeferrer interface {
	DeferChange(what string, failure error, q string, args ...any) bool
}

// writeChanging runs a conditional write: one that changes no row is
// failure (store.ErrConflict, store.ErrEventChanged, …), now or, held back
// (ChangeDeferrer), at a later statement or at commit, which then fails.
func (t *Tx) writeChanging(what string, failure error, q string, args ...any) error {
	if d, ok := t.r.(ChangeDeferrer); ok && d.DeferChange(what, failure, q, args...) {
		return nil
	}
	res, err := t.r.Exec(q, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, failure)
	}
	return nil
}

// write runs a statement whose result is only its error, deferred when the
// backend can (Deferrer): then a failure fails the transaction at a later
// statement or at commit, naming what failed. Nothing in the engine goes on
// after a failed write, so the later report changes no outcome.
func (t *Tx) write(what, q string, args ...any) error {
	if d, ok := t.r.(Deferrer); ok && d.Defer(what, q, args...) {
		return nil
	}
	if _, err := t.r.Exec(q, args...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Prefetcher is what a backend's Runner implements when it can send a
// read ahead: held back like a write and sent with the next statement
// that needs an answer, its answer kept for the Query that asks for it
// (PostgreSQL: one round trip for several reads). Prefetch reports false
// when it did not take the statement.
type Prefetcher interface {
	Prefetch(q string, args ...any) bool
}

// Prefetch sends the reads fn makes ahead (store.Prefetch), when the
// backend can: fn runs on a transaction that records its reads instead of
// making them (every read answers "not found", every write fails), so fn
// names reads by the calls that make them.
func (t *Tx) Prefetch(fn func(store.Tx)) {
	if p, ok := t.r.(Prefetcher); ok {
		fn(NewTx(recorder{p}))
	}
}

// recorder is the Runner Prefetch's fn runs on.
type recorder struct{ p Prefetcher }

var errRecording = errors.New("a write inside Prefetch: only reads are sent ahead")

func (r recorder) Exec(string, ...any) (sql.Result, error) { return nil, errRecording }

func (r recorder) Query(q string, args ...any) (Rows, error) {
	r.p.Prefetch(q, args...)
	return noRows{}, nil
}

func (r recorder) QueryRow(q string, args ...any) Row {
	r.p.Prefetch(q, args...)
	return noRows{}
}

// noRows is what a recorded read answers.
type noRows struct{}

func (noRows) Next() bool        { return false }
func (noRows) Scan(...any) error { return sql.ErrNoRows }
func (noRows) Err() error        { return nil }
func (noRows) Close() error      { return nil }
