// Package postgres is keep's store on PostgreSQL, for when one machine is
// not enough: `keep serve --store postgres://user@host/db` (or KEEP_STORE).
// The ledger's statements are sqldb's, the same as SQLite's; this package
// owns the connections (pgx v5 through database/sql, so that the one SQL
// implementation serves both), the transactions and the schema.
//
// Writers are serialized by a transaction-scoped advisory lock, as SQLite's
// single writer serializes them: every Update sees the state the previous
// one committed. Reads are repeatable-read snapshots of committed data.
//
// It may import store, sqldb, keeptype and redact.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib" // also the pgx driver for database/sql

	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqldb"
)

//go:embed migrations/*.sql
var migrations embed.FS

// writerLock is the advisory lock every write transaction takes.
const writerLock = 0x6b6570 // with the schema's hash: pg_advisory_xact_lock(int, int)

// ErrClosed is returned by a closed store.
var ErrClosed = errors.New("the store is closed")

// Store is the PostgreSQL store.
type Store struct {
	db                    *sql.DB
	commits, transactions atomic.Int64
	closed                atomic.Bool
	// channel is where commits are announced (NOTIFY) to the other nodes
	// of this schema.
	channel string
}

// Open connects to a PostgreSQL database by its URL and applies the
// schema's migrations; a database whose schema is newer than this keep
// knows is refused.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	db, err := sql.Open("pgx", rawURL)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", Redact(rawURL), err)
	}
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(8)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("PostgreSQL at %s cannot be reached: %w", Redact(rawURL), err)
	}
	s := &Store{db: db}
	var schema string
	if err := db.QueryRowContext(pctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("PostgreSQL at %s: %w", Redact(rawURL), err)
	}
	s.channel = pgx.Identifier{"keep_" + schema}.Sanitize()
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Redact hides a password in a store URL.
func Redact(rawURL string) string {
	if _, err := url.Parse(rawURL); err != nil {
		return "(the store URL, not shown: it may hold a password)"
	}
	return redact.URL(rawURL)
}

// migrate applies the embedded migrations not yet applied, under the
// writers' lock, so that several nodes starting together apply each once.
func (s *Store) migrate(ctx context.Context) error {
	return s.Update(ctx, func(t store.Tx) error {
		r := t.(*sqldb.Tx).Runner()
		if _, err := r.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		entries, err := migrations.ReadDir("migrations")
		if err != nil {
			return err
		}
		known := map[string]bool{}
		var names []string
		for _, e := range entries {
			known[e.Name()] = true
			names = append(names, e.Name())
		}
		sort.Strings(names)
		applied, err := appliedMigrations(r)
		if err != nil {
			return err
		}
		for name := range applied {
			if !known[name] {
				return fmt.Errorf("the database's schema has migration %s, which this keep does not know: it was written by a newer keep; run that one (or newer)", name)
			}
		}
		for _, name := range names {
			if applied[name] {
				continue
			}
			body, _ := migrations.ReadFile("migrations/" + name)
			if _, err := r.Exec(string(body)); err != nil {
				return fmt.Errorf("migrate %s: %w", name, err)
			}
			if _, err := r.Exec(`INSERT INTO schema_migrations(name, applied_at) VALUES(?, ?)`, name, time.Now().UnixMilli()); err != nil {
				return fmt.Errorf("migrate %s: %w", name, err)
			}
		}
		return nil
	})
}

func appliedMigrations(r sqldb.Runner) (map[string]bool, error) {
	rows, err := r.Query(`SELECT name FROM schema_migrations`)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out[n] = true
	}
	return out, rows.Err()
}

// Update runs fn in one write transaction, committed (durably, by
// PostgreSQL's own WAL) before Update returns. A panic in fn rolls the
// transaction back and reaches the caller.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) (err error) {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	// Keyed by the schema too: installations in two schemas of one
	// database do not wait for each other.
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))`, writerLock); err != nil {
		return fmt.Errorf("take the writers' lock: %w", err)
	}
	if err := store.Fenced(ctx, fn)(sqldb.NewTx(runner{ctx: ctx, tx: tx})); err != nil {
		return err
	}
	// Delivered to the listening nodes when, and only if, this commits.
	if s.channel != "" {
		if _, err := tx.ExecContext(ctx, `NOTIFY `+s.channel); err != nil {
			return fmt.Errorf("announce the change: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	committed = true
	s.commits.Add(1)
	s.transactions.Add(1)
	return nil
}

// View runs fn in a read-only snapshot of committed data.
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback()
	return fn(sqldb.NewTx(runner{ctx: ctx, tx: tx}))
}

// Stats reports the commits made.
func (s *Store) Stats() store.Stats {
	return store.Stats{Commits: s.commits.Load(), Transactions: s.transactions.Load()}
}

// engineLock is a session advisory lock for commands that must not run
// beside each other on one database (keep migrate from a PostgreSQL
// source). keep serve nodes do not take it: they share the database,
// each workflow under its lease.
const engineLock = 0x6b656e

// ErrEngineBusy means another engine holds the database.
var ErrEngineBusy = errors.New("another keep engine runs this PostgreSQL database's workflows")

// LockEngine takes the database's engine lock for as long as release is
// not called (a connection of its own holds it; if the process dies,
// PostgreSQL releases it with the connection).
func (s *Store) LockEngine(ctx context.Context) (release func(), err error) {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var ok bool
	if err := c.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1, hashtext(current_schema()))`, engineLock).Scan(&ok); err != nil {
		c.Close()
		return nil, err
	}
	if !ok {
		c.Close()
		return nil, ErrEngineBusy
	}
	return func() {
		_, _ = c.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1, hashtext(current_schema()))`, engineLock)
		c.Close()
	}, nil
}

// Close refuses new transactions and closes the connections.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.db.Close()
}

// Listen calls changed whenever any node commits to this schema (LISTEN),
// until ctx ends, reconnecting after a lost connection: nodes wake each
// other at once instead of waiting for their next poll.
func (s *Store) Listen(ctx context.Context, changed func()) {
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, changed)
		if ctx.Err() != nil {
			return
		}
		_ = err // the connection was lost: polling covers the gap; try again
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Store) listenOnce(ctx context.Context, changed func()) error {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		if _, err := pc.Exec(ctx, `LISTEN `+s.channel); err != nil {
			return err
		}
		for {
			if _, err := pc.WaitForNotification(ctx); err != nil {
				return err
			}
			changed()
		}
	})
}

// runner runs sqldb's statements in a transaction, with PostgreSQL's
// placeholders.
type runner struct {
	ctx context.Context
	tx  *sql.Tx
}

func (r runner) Exec(q string, args ...any) (sql.Result, error) {
	return r.tx.ExecContext(r.ctx, rebind(q), args...)
}

func (r runner) Query(q string, args ...any) (*sql.Rows, error) {
	return r.tx.QueryContext(r.ctx, rebind(q), args...)
}

func (r runner) QueryRow(q string, args ...any) sqldb.Row {
	return r.tx.QueryRowContext(r.ctx, rebind(q), args...)
}

var rebound sync.Map // statement text → its PostgreSQL form

// rebind turns ? placeholders into $1, $2, … (outside quoted literals).
func rebind(q string) string {
	if v, ok := rebound.Load(q); ok {
		return v.(string)
	}
	var b strings.Builder
	n, quoted := 0, false
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
