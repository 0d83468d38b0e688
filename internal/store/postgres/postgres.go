// Package postgres is keep's store on PostgreSQL, for when one machine is
// not enough: `keep serve --store postgres://user@host/db` (or KEEP_STORE).
// The ledger's statements are sqldb's, the same as SQLite's; this package
// owns the connections (pgx v5 through database/sql, so that the one SQL
// implementation serves both), the transactions and the schema.
//
// Writers are serialized per workflow (Update): every Update sees the state
// the previous writer of its workflow committed, as under SQLite's single
// writer, while different workflows' steps write at once. Reads are
// repeatable-read snapshots of committed data.
package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"slices"
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

// idleInTransaction ends (PostgreSQL's idle_in_transaction_session_timeout)
// a transaction whose process stopped between two statements — paused
// (SIGSTOP), a frozen VM — so that the locks it holds (the writers' lock,
// a workflow's) hold up the other nodes for this long at most; keep's own
// transactions never wait between statements. A store URL that sets the
// parameter keeps its own.
const (
	idleParam         = "idle_in_transaction_session_timeout"
	idleInTransaction = "10s"
)

// ErrClosed is returned by a closed store.
var ErrClosed = errors.New("the store is closed")

// Store is the PostgreSQL store.
type Store struct {
	db                    *sql.DB
	commits, transactions atomic.Int64
	trips                 atomic.Int64 // statements sent, begin and commit included
	rereads               atomic.Int64 // Views run again (store.ReadsAhead)
	closed                atomic.Bool
	// channel is where commits are announced (NOTIFY) to the other nodes
	// of this schema; channelName is the same unquoted, for pg_notify.
	channel, channelName string
	// notify carries commits to the announcer; stop ends it, announced
	// says it ended.
	notify, stop, announced chan struct{}
	// cfg is the connection's configuration, for the listener's own
	// connection.
	cfg *pgx.ConnConfig
	// self is this store's notice payload: its own listener drops the
	// notices it sent (its commits wake this process already).
	// listenerApps is the application_name every listener of this schema
	// starts with (a LIKE pattern), listenerApp this store's listener's:
	// by them the announcer sees whether another listener is there.
	self, listenerApps, listenerApp string
	// listenerPID is the backend of this store's own listener (0 while
	// it does not listen).
	listenerPID atomic.Uint32
	// others caches whether another listener was there, and when that
	// was last asked (announcer's goroutine only).
	others        bool
	othersAskedAt time.Time
	// wakeOthers marks commits since the last notice that may give
	// another node's scheduler work (announce).
	wakeOthers atomic.Bool
	// sent and spared count the notices sent and those not sent because
	// no other node listened, heard those this store's listener received,
	// its own included (tests, docs/performance.md).
	sent, spared, heard atomic.Int64
	listenMu            sync.Mutex // one listener connection at a time
}

// maxConns bounds the pool's connections; maxConnIdle is how long one
// not used stays open.
const (
	maxConns    = 16
	maxConnIdle = 5 * time.Minute
)

// Open connects to a PostgreSQL database by its URL and applies the
// schema's migrations; a database whose schema is newer than this keep
// knows is refused.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", Redact(rawURL), err)
	}
	if _, set := cfg.RuntimeParams[idleParam]; !set {
		cfg.RuntimeParams[idleParam] = idleInTransaction
	}
	db := stdlib.OpenDB(*cfg)
	// Every connection the pool opens is kept while it is in use now and
	// then: one closed and opened again costs PostgreSQL a new backend
	// (a fork, its caches warmed again, plpgsql loaded for keep_fence)
	// and keep its prepared statements. With fewer idle than open, 32
	// workflows' steps closed and reopened a connection every few runs
	// (issue 25: PostgreSQL's CPU per run, TestTheConnectionsAreKept).
	// One idle for maxConnIdle is given back.
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(maxConnIdle)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("PostgreSQL at %s cannot be reached: %w", Redact(rawURL), err)
	}
	s := &Store{db: db, cfg: cfg, notify: make(chan struct{}, 1), stop: make(chan struct{}), announced: make(chan struct{})}
	var id [8]byte
	rand.Read(id[:])
	s.self = hex.EncodeToString(id[:])
	var schema string
	if err := db.QueryRowContext(pctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("PostgreSQL at %s: %w", Redact(rawURL), err)
	}
	s.channelName = "keep_" + schema
	s.channel = pgx.Identifier{s.channelName}.Sanitize()
	s.listenerApps, s.listenerApp = listenerApp(schema, s.self)
	go s.announcer()
	if err := s.migrate(ctx); err != nil {
		s.Close()
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
			if err := sqldb.AfterMigration(name, r); err != nil {
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
//
// Writers are serialized per workflow, not per schema: a step's
// transaction (its context carries the workflow's lease, store.Fence)
// takes the writers' lock shared and then locks its workflow's lease row,
// which also checks the fence, in one statement sent with the first
// statement that needs an answer (runner.fence); a transaction without a
// lease (a person's action, a deploy, the leases themselves) takes the
// writers' lock exclusively, so it waits for the steps under way and
// they for it. Either way each writer sees what the previous writer of
// the same workflow committed (read committed: every statement after the
// lock reads a snapshot taken after it). Rows of no workflow are taken
// under a lock of their own (runner.LockShared). docs/design.md says why
// this is enough.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) (err error) {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	noSync := store.IsNoSync(ctx)
	err = s.onConn(ctx, "begin", true, func(r *runner) error {
		if f, ok := store.FenceOf(ctx); ok {
			r.scoped = true
			r.fence(f)
		} else if wfs, ok := store.WorkflowsOf(ctx); ok {
			r.scoped = true
			r.lockLeases(wfs)
		} else {
			// Keyed by the schema too: installations in two schemas of one
			// database do not wait for each other. Sent with the first
			// statement that needs an answer, after the BEGIN.
			r.Defer("take the writers' lock", `SELECT pg_advisory_xact_lock(?, hashtext(current_schema()))`, writerLock)
		}
		if noSync {
			// A write whose loss is harmless (store.NoSync): its COMMIT
			// does not wait for the WAL's flush. Sent with the first
			// statement, as the lock above.
			r.Defer("commit without waiting for the disk", `SET LOCAL synchronous_commit TO off`)
		}
		err := fn(sqldb.NewTx(r))
		if err == nil {
			err = r.commit()
		}
		if r.checkFailed != nil {
			// Whatever fn made of the failure it was answered (a read that
			// failed), the transaction was aborted by a check: the fence,
			// a conditional write.
			return r.checkFailed
		}
		return err
	})
	if err != nil {
		return err
	}
	if !noSync {
		s.commits.Add(1)
	}
	s.transactions.Add(1)
	_, step := store.FenceOf(ctx)
	s.announce(!step)
	return nil
}

// onConn runs fn in a transaction (begin is its BEGIN) on a connection of
// the pool, talked to through pgx itself (database/sql would send every
// statement, the BEGIN and the COMMIT alone: runner pipelines them). fn
// commits; a transaction fn did not commit is rolled back, and a
// connection whose state is not known is closed, not reused. A panic in
// fn closes the connection (PostgreSQL rolls its transaction back) and
// reaches the caller.
func (s *Store) onConn(ctx context.Context, begin string, write bool, fn func(*runner) error) error {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", begin, err)
	}
	defer c.Close()
	var ferr error
	rerr := c.Raw(func(dc any) error {
		r := &runner{ctx: ctx, conn: dc.(*stdlib.Conn).Conn(), begin: begin, write: write, trips: &s.trips}
		if ferr = fn(r); ferr != nil || !write {
			r.rollback()
		}
		if r.broken {
			return driver.ErrBadConn // database/sql closes the connection
		}
		return nil
	})
	if ferr != nil {
		return ferr
	}
	if rerr != nil && !errors.Is(rerr, driver.ErrBadConn) {
		return rerr
	}
	return nil
}

// fence takes the writers' lock shared and the workflow's lease row (FOR
// NO KEY UPDATE: the step's writes of this workflow are serialized on it)
// and checks that the lease is still the step's, in one statement
// (keep_fence, migration 013) that fails when it is not: it needs no
// answer, so it is held back like a write and goes in one pipeline with
// the transaction's first statement that needs one. A fenced step's
// transaction is aborted by PostgreSQL before anything after the check
// runs, its COMMIT included; the failure's SQLSTATE (fencedState) makes it
// store.ErrFenced. The row lock reads the lease's latest committed
// version, whatever the statement's snapshot.
func (r *runner) fence(f store.Fence) {
	r.Defer("check the lease", `SELECT keep_fence(?, ?, ?, ?)`, writerLock, f.Workflow, f.Node, f.Token)
}

// fencedState is the SQLSTATE keep_fence fails with.
const fencedState = "KEEPF"

// lockLeases takes the writers' lock shared and, in their order, a lock of
// each workflow's leases (store.ForWorkflows): lease transactions of one
// workflow are serialized on it, and a step's transaction, which only
// reads its lease row under a row lock, makes a lease write wait for its
// commit; nothing waits the other way, so no cycle forms.
func (r *runner) lockLeases(wfs []string) {
	sorted := slices.Clone(wfs)
	slices.Sort(sorted)
	r.Defer("take the leases' locks", `SELECT pg_advisory_xact_lock_shared(?, hashtext(current_schema())),
 (SELECT count(pg_advisory_xact_lock(hashtextextended(current_schema() || '/' || w, 0))) FROM (SELECT w FROM unnest(?::text[]) w ORDER BY w) s)`, writerLock, sorted)
}

// sharedLock is the advisory lock on the rows of no workflow.
const sharedLock = 0x6b6573

// LockShared takes the lock on the rows of no workflow, once per
// transaction: only a step's transaction needs it (the others hold the
// writers' lock exclusively). It is always the last lock a transaction
// takes, so it cannot close a cycle.
func (r *runner) LockShared() error {
	if !r.scoped || r.sharedHeld {
		return nil
	}
	r.Defer("take the lock of the shared rows", `SELECT pg_advisory_xact_lock(?, hashtext(current_schema()))`, sharedLock)
	r.sharedHeld = true
	return nil
}

// announce wakes the other nodes of this schema (NOTIFY) after a commit.
// The notice is sent outside the transaction, by one goroutine that
// coalesces commits made while it sends: a NOTIFY inside a transaction
// takes a database-wide lock held through the commit's WAL flush, which
// would serialize every writer again. wake says the commit may give
// another node's scheduler work: any but a step's (a fenced transaction:
// the node holding the workflow's lease steps on by itself; what another
// node could take — a released lease, a deploy, a person's decision, an
// event posted to its API — is not a step's commit). A notice of steps
// alone wakes the other nodes' pages, not their schedulers.
func (s *Store) announce(wake bool) {
	if s.channel == "" {
		return
	}
	if wake {
		s.wakeOthers.Store(true)
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// A notice's payload is the sending store's id and its kind.
const (
	noticeWake  = "w" // commits another node's scheduler may act on
	noticeSteps = "s" // steps' commits alone: the other nodes' pages
)

// announceEvery bounds how often the announcer sends.
const announceEvery = 5 * time.Millisecond

// askOthersEvery bounds how often the announcer asks whether another node
// listens. A node that starts listening is told of commits this long
// after at worst; until then its scheduler's own poll finds them.
const askOthersEvery = time.Second

func (s *Store) announcer() {
	defer close(s.announced)
	for {
		select {
		case <-s.stop:
			return
		case <-s.notify:
		}
		// A lone node sends no notice: nobody would hear it but itself,
		// and its commits wake it already. A failed notice is not
		// retried: the nodes find the work at their next poll.
		// Swapped after the signal: a commit that marks it later signals
		// again, and the next notice carries it.
		kind := noticeSteps
		if s.wakeOthers.Swap(false) {
			kind = noticeWake
		}
		if s.othersListen() {
			if _, err := s.db.Exec(`SELECT pg_notify($1, $2)`, s.channelName, s.self+":"+kind); err == nil {
				s.sent.Add(1)
			}
		} else {
			s.spared.Add(1)
		}
		// At most one notice per announceEvery: the commits made meanwhile
		// share the next.
		select {
		case <-s.stop:
			return
		case <-time.After(announceEvery):
		}
	}
}

// othersListen says whether a listener of this schema other than this
// store's own is connected, asked of pg_stat_activity at most once per
// askOthersEvery (application_name is shown to every role). When the
// question fails, the answer is yes: a notice too many costs a wake-up.
func (s *Store) othersListen() bool {
	if !s.othersAskedAt.IsZero() && time.Since(s.othersAskedAt) < askOthersEvery {
		return s.others
	}
	var n int
	err := s.db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE $1 AND application_name <> $2`,
		s.listenerApps, s.listenerApp).Scan(&n)
	s.others, s.othersAskedAt = err != nil || n > 0, time.Now()
	return s.others
}

// listenerApp names the listeners of schema (a LIKE pattern) and the
// listener of the store whose notices carry self: short enough that
// PostgreSQL shows it whole (63 bytes), whatever the schema's name. Two
// schemas whose hashes meet only cost each other notices.
func listenerApp(schema, self string) (pattern, name string) {
	h := fnv.New64a()
	h.Write([]byte(schema))
	prefix := fmt.Sprintf("keep listen %016x ", h.Sum64())
	return prefix + "%", prefix + self
}

// Notices counts what this store sent and heard.
type Notices struct {
	// Sent: notices sent to the other nodes; Spared: commits announced
	// to nobody, since no other node listened.
	Sent, Spared int64
	// Heard: notices this store's listener received, its own included,
	// each after its wake-up (if any) was made.
	Heard int64
}

// Notices reports the notices this store sent, spared and heard.
func (s *Store) Notices() Notices {
	return Notices{Sent: s.sent.Load(), Spared: s.spared.Load(), Heard: s.heard.Load()}
}

// View runs fn in a read-only snapshot of committed data. Its BEGIN goes
// with its first statement, and a View that reads nothing sends nothing.
// A View marked store.NoSnapshot sends neither BEGIN nor ROLLBACK: each
// of its statements reads what is committed when it runs.
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	begin := "begin isolation level repeatable read read only"
	if store.IsNoSnapshot(ctx) {
		begin = "" // each statement (or pipeline) its own implicit transaction
	}
	missed := false
	err := s.onConn(ctx, begin, false, func(r *runner) error {
		r.endAhead = begin != "" && store.IsReadsAhead(ctx)
		err := fn(sqldb.NewTx(r))
		missed = r.missed
		return err
	})
	if !missed {
		return err
	}
	// The function asked for a read it had not named, after the snapshot
	// had ended with the ones it had (store.ReadsAhead): it runs again, in
	// a transaction that ends when it is done.
	s.rereads.Add(1)
	return s.onConn(ctx, begin, false, func(r *runner) error {
		return fn(sqldb.NewTx(r))
	})
}

// Stats reports the commits made.
func (s *Store) Stats() store.Stats {
	return store.Stats{Commits: s.commits.Load(), Transactions: s.transactions.Load(), RoundTrips: s.trips.Load(), Rereads: s.rereads.Load()}
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
	close(s.stop)
	<-s.announced
	return s.db.Close()
}

// Listen calls changed whenever another node commits to this schema
// (LISTEN), until ctx ends, reconnecting after a lost connection: nodes
// wake each other at once instead of waiting for their next poll. This
// store's own commits are not told (they wake this process already).
func (s *Store) Listen(ctx context.Context, changed func()) {
	s.ListenByKind(ctx, changed, changed)
}

// ListenByKind is Listen that tells apart the commits of other nodes'
// steps alone (stepped: the workflow's lease holder steps on, so only
// pages need to know) from any other (changed: a scheduler may have work
// to take). A notice from a keep that does not say its kind is changed.
func (s *Store) ListenByKind(ctx context.Context, changed, stepped func()) {
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, changed, stepped)
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

// listenOnce listens on a connection of its own, not the pool's: its
// application_name is how the other nodes' announcers see it, and it is
// closed, never handed to other work, when listening ends.
func (s *Store) listenOnce(ctx context.Context, changed, stepped func()) error {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	cfg := s.cfg.Copy()
	cfg.RuntimeParams["application_name"] = s.listenerApp
	pc, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pc.Close(context.Background())
	if _, err := pc.Exec(ctx, `LISTEN `+s.channel); err != nil {
		return err
	}
	s.listenerPID.Store(pc.PgConn().PID())
	defer s.listenerPID.Store(0)
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		from, kind, _ := strings.Cut(n.Payload, ":")
		switch {
		case from == s.self:
		case kind == noticeSteps:
			stepped()
		default:
			changed()
		}
		s.heard.Add(1)
	}
}
