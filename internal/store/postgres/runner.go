package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqldb"
)

// runner runs sqldb's statements in one transaction on a pgx connection of
// the pool, with PostgreSQL's placeholders, in as few round trips as the
// answers allow: the transaction's BEGIN and the writes held back (Defer)
// go in one pipeline with the next statement that needs an answer, and
// the last writes with the COMMIT. A transaction that sends no statement
// sends no BEGIN either.
type runner struct {
	ctx  context.Context
	conn *pgx.Conn
	// begin is the BEGIN not sent yet ("" once sent, or for a View
	// without a snapshot); inTx: it was sent.
	begin string
	inTx  bool
	// scoped: a step's transaction, holding its workflow's lock and the
	// writers' lock shared; sharedHeld: it took LockShared.
	scoped, sharedHeld bool
	// write: a write transaction, whose writes may be held back (pending).
	write   bool
	pending []deferred
	// open is the answer being read (its rows), closed before the next send.
	open pgx.BatchResults
	// broken: the connection's state is not known (a send failed midway,
	// the rollback failed): it is closed instead of going back to the pool.
	broken bool
	// trips counts the round trips (Stats.RoundTrips).
	trips *atomic.Int64
	// checkFailed is the failure of a check held back — the fence
	// check's (store.ErrFenced), a conditional write's (store.ErrConflict)
	// — which aborted the transaction: what Update returns, whatever fn
	// made of the failed statement it was answered.
	checkFailed error
	// ahead are the reads sent ahead (Prefetch) whose answers are still
	// good for the Query that asks for them.
	ahead []*prefetched
	// endAhead: a View marked store.ReadsAhead, whose first pipeline of
	// reads sent ahead carries its ROLLBACK too; ended: it did (the
	// snapshot is gone, the answers are kept); missed: the function then
	// asked for a read that was not sent ahead, which fails (errEnded)
	// and makes View run the function again.
	endAhead, ended, missed bool
	// ending: the flush under way is a read sent ahead's, which may end
	// the snapshot (endAhead).
	ending bool
	// gone is why the transaction never began (its BEGIN failed): every
	// statement after fails with it, the COMMIT included.
	gone error
}

// errEnded is the failure of a read asked for after a View's snapshot
// ended with the reads it had named (store.ReadsAhead); View runs the
// function again, so nobody sees it unless the function hides it.
var errEnded = errors.New("a read not sent ahead, after the snapshot had ended with the reads that were: the View runs its function again")

// deferred is a statement held back until the next statement or the
// commit: a write, or a read sent ahead (ahead, its answer kept).
type deferred struct {
	what, q string
	args    []any
	ahead   *prefetched
	// failure is a conditional write's error when it changes no row
	// (DeferChange).
	failure error
}

// Defer holds a write of a write transaction back (sqldb.Deferrer). The
// reads sent ahead that it could change are answered afresh.
func (r *runner) Defer(what, q string, args ...any) bool {
	if !r.write {
		return false
	}
	r.invalidate(q)
	r.pending = append(r.pending, deferred{what: what, q: q, args: args})
	return true
}

// DeferChange holds a conditional write back (sqldb.ChangeDeferrer): it
// is sent as a statement that fails (keep_changed, SQLSTATE changedState)
// when it changes no row, which aborts the transaction, its COMMIT
// included, with failure.
func (r *runner) DeferChange(what string, failure error, q string, args ...any) bool {
	if !r.write {
		return false
	}
	r.invalidate(q) // the table it writes, not every read sent ahead
	r.pending = append(r.pending, deferred{what: what, failure: failure,
		q: `WITH changed AS (` + q + ` RETURNING 1) SELECT keep_changed(count(*)) FROM changed`, args: args})
	return true
}

// changedState is the SQLSTATE keep_changed fails with.
const changedState = "KEEPC"

// send sends the BEGIN if not sent yet, the writes held back and then q
// (if not ""), in one pipeline, and reads every answer but q's, which the
// caller reads from the results returned (and closes).
func (r *runner) send(q string, args ...any) (pgx.BatchResults, error) {
	if r.gone != nil {
		return nil, r.gone
	}
	if r.ended {
		r.missed = true
		return nil, errEnded
	}
	if err := r.closeOpen(); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	begin := r.begin
	if begin != "" {
		r.inTx = true
		b.Queue(begin)
	}
	ps := r.pending
	for _, p := range ps {
		b.Queue(rebind(p.q), p.args...)
	}
	if q != "" {
		b.Queue(rebind(q), args...)
	}
	if b.Len() == 0 {
		return nil, nil
	}
	// A View's first pipeline, of nothing but the reads it named, ends
	// its snapshot too (store.ReadsAhead): no round trip for the ROLLBACK.
	end := r.ending && begin != "" && q == "" && allAhead(ps)
	if end {
		b.Queue("rollback")
	}
	r.begin, r.pending = "", nil
	r.trips.Add(1)
	br := r.conn.SendBatch(r.ctx, b)
	if err := r.answer(br, begin != "", ps); err != nil {
		return nil, err
	}
	if end {
		if _, err := br.Exec(); err != nil {
			r.fail(br)
			return nil, fmt.Errorf("end the snapshot: %w", err)
		}
		r.inTx, r.ended = false, true
	}
	if q == "" {
		if err := br.Close(); err != nil {
			r.broken = true
			return nil, err
		}
		return nil, nil
	}
	r.open = br
	return br, nil
}

// answer reads the pipeline's answers in the order sent: the BEGIN when
// one was queued, then each statement held back (a read sent ahead keeps
// its own answer). On a failure every read sent ahead that did not run
// learns why, so none waits on an answer that never comes.
func (r *runner) answer(br pgx.BatchResults, began bool, ps []deferred) error {
	if began {
		if _, err := br.Exec(); err != nil {
			// Nothing in the pipeline ran (a statement that did not
			// prepare, a context cancelled), and the transaction never
			// began: the runner refuses everything after (gone), or a
			// read would run outside the snapshot, a write outside the
			// transaction, and a read sent ahead answer nothing.
			r.fail(br)
			r.gone = fmt.Errorf("begin: %w", err)
			unanswered(ps, r.gone)
			return r.gone
		}
	}
	for _, p := range ps {
		var err error
		if p.ahead != nil {
			err = p.ahead.read(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			r.fail(br)
			err = r.failed(p, err)
			unanswered(ps, err) // not run: PostgreSQL skipped them
			return err
		}
	}
	return nil
}

// unanswered gives every read sent ahead in ps that has no answer yet err.
func unanswered(ps []deferred, err error) {
	for _, p := range ps {
		if p.ahead != nil && !p.ahead.done {
			p.ahead.done, p.ahead.err = true, err
		}
	}
}

// allAhead says every statement held back is a read sent ahead.
func allAhead(ps []deferred) bool {
	for _, p := range ps {
		if p.ahead == nil {
			return false
		}
	}
	return len(ps) > 0
}

// failed is the error of a statement held back: the fence check's
// failure is store.ErrFenced, a conditional write's its own failure
// (store.ErrConflict, store.ErrEventChanged, …), and both are remembered:
// Update returns them.
func (r *runner) failed(p deferred, err error) error {
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == fencedState:
		r.checkFailed = fmt.Errorf("%w (%s)", store.ErrFenced, pe.Message)
		return r.checkFailed
	case errors.As(err, &pe) && pe.Code == changedState && p.failure != nil:
		r.checkFailed = fmt.Errorf("%s: %w", p.what, p.failure)
		return r.checkFailed
	}
	return fmt.Errorf("%s: %w", p.what, err)
}

// fail closes a pipeline after an error in it; the transaction is aborted
// (its ROLLBACK follows), and the connection is dropped if even closing fails.
func (r *runner) fail(br pgx.BatchResults) {
	if err := br.Close(); err != nil && r.conn.IsClosed() {
		r.broken = true
	}
}

// closeOpen ends the reading of the previous answer (rows not read to the end).
func (r *runner) closeOpen() error {
	if r.open == nil {
		return nil
	}
	br := r.open
	r.open = nil
	if err := br.Close(); err != nil {
		if r.conn.IsClosed() {
			r.broken = true
		}
		return err
	}
	return nil
}

// flush sends what is held back (the BEGIN, writes) without a statement of its own.
func (r *runner) flush() error {
	_, err := r.send("")
	return err
}

// Exec runs a statement. One without arguments may be several statements
// (a migration's file): it goes by the simple protocol, on its own.
func (r *runner) Exec(q string, args ...any) (sql.Result, error) {
	r.invalidate(q)
	if len(args) == 0 {
		if err := r.flush(); err != nil {
			return nil, err
		}
		r.trips.Add(1)
		tag, err := r.conn.Exec(r.ctx, q)
		if err != nil {
			return nil, err
		}
		return result(tag.RowsAffected()), nil
	}
	br, err := r.send(q, args...)
	if err != nil {
		return nil, err
	}
	r.open = nil
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return result(tag.RowsAffected()), nil
}

// Query runs a statement that returns rows: the answer of the same read
// sent ahead (Prefetch), when it is still good, without a round trip of
// its own.
func (r *runner) Query(q string, args ...any) (sqldb.Rows, error) {
	if p := r.takeAhead(q, args); p != nil {
		if !p.done {
			// The reads sent ahead, and with them the snapshot's end
			// when the View is marked so (endAhead): only a read answered
			// ahead may end it, never a statement sent on its own.
			r.ending = r.endAhead
			err := r.flush()
			r.ending = false
			if err != nil {
				return nil, err
			}
		}
		if p.err != nil {
			return nil, p.err
		}
		return &bufRows{p: p, m: r.conn.TypeMap(), i: -1}, nil
	}
	r.invalidate(q) // a write with RETURNING, a lock
	br, err := r.send(q, args...)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		r.open = nil
		br.Close()
		return nil, err
	}
	return &pgRows{Rows: rows, r: r, br: br}, nil
}

// QueryRow runs a statement that returns at most one row.
func (r *runner) QueryRow(q string, args ...any) sqldb.Row {
	rows, err := r.Query(q, args...)
	if err != nil {
		return errRow{err}
	}
	return oneRow{rows}
}

// commit sends what is held back and the COMMIT, in one round trip.
func (r *runner) commit() error {
	if r.gone != nil {
		return r.gone
	}
	if r.begin != "" && len(r.pending) == 0 {
		return nil // nothing was sent: nothing to commit
	}
	br, err := r.send("commit")
	if err != nil {
		return err
	}
	r.open = nil
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if tag.String() == "ROLLBACK" { // the transaction had failed: PostgreSQL rolled it back
		return fmt.Errorf("commit: %w", pgx.ErrTxCommitRollback)
	}
	return nil
}

// rollback ends a transaction that is not committed (nothing to do when
// no BEGIN was sent); a connection left in an unknown state is dropped.
func (r *runner) rollback() {
	if err := r.closeOpen(); err != nil && r.conn.IsClosed() {
		r.broken = true
		return
	}
	if r.begin != "" || !r.inTx || r.broken || r.conn.IsClosed() {
		r.broken = r.broken || r.conn.IsClosed()
		return
	}
	r.trips.Add(1)
	if _, err := r.conn.Exec(context.Background(), "rollback"); err != nil {
		r.broken = true
	}
}

// pgRows are a Query's rows; closing them ends the pipeline they came in.
type pgRows struct {
	pgx.Rows
	r  *runner
	br pgx.BatchResults
}

func (p *pgRows) Close() error {
	p.Rows.Close()
	err := p.Rows.Err()
	if p.r.open == p.br {
		p.r.open = nil
		if cerr := p.br.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// oneRow is QueryRow's answer, read as database/sql's *sql.Row.
type oneRow struct{ rows sqldb.Rows }

func (o oneRow) Scan(dest ...any) error {
	if !o.rows.Next() {
		if err := o.rows.Close(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	err := o.rows.Scan(dest...)
	if cerr := o.rows.Close(); err == nil {
		err = cerr
	}
	return err
}

type errRow struct{ err error }

func (e errRow) Scan(...any) error { return e.err }

// result is an Exec's answer: the rows it changed.
type result int64

func (n result) RowsAffected() (int64, error) { return int64(n), nil }
func (result) LastInsertId() (int64, error) {
	return 0, errors.New("PostgreSQL has no last insert id: use RETURNING")
}

var rebound sync.Map // statement text → its PostgreSQL form

// rebind turns ? placeholders into $1, $2, … (outside quoted literals).
func rebind(q string) string {
	if v, ok := rebound.Load(q); ok {
		return v.(string)
	}
	var b strings.Builder
	quoted, n := false, 0
	for _, c := range q {
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	out := b.String()
	rebound.Store(q, out)
	return out
}

// ServerNowSQL reads PostgreSQL's clock (sqldb.ServerClock): the one every
// node on this database compares leases and heartbeats by. clock_timestamp,
// not now(): the time of the statement, not of the transaction's start.
func (r *runner) ServerNowSQL() string {
	return `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`
}
