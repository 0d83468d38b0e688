// Package sqlite is the embedded default backend of keep's store: one SQLite
// file in WAL mode with synchronous=FULL, so that every committed
// transaction is on disk before Update returns.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqldb"
	"modernc.org/sqlite" // the pure-Go SQLite driver
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is the SQLite backend.
type Store struct {
	db  *sql.DB // the writer: one connection, held by the committer
	rdb *sql.DB // readers: WAL lets them read while the writer commits

	writer  *conn         // the writer connection (nil when read-only)
	seqFile *os.File      // the note of the last commit's number (see openSeq)
	quit    chan struct{} // closed by Close
	readers chan *conn    // idle reader connections
	all     []*conn       // every held connection, closed by Close

	// Group commit (committer.go).
	mu      sync.Mutex
	idle    *sync.Cond // signalled when a leader stops
	queue   []*request
	leading bool
	closed  bool
	// viewing: a short read holds the writer (vetoCommitsInViews).
	viewing atomic.Bool
	// notFull: the writer may still be at synchronous=NORMAL after a
	// group of store.NoSync writes. Only the leader touches it.
	notFull bool

	commits      atomic.Int64
	transactions atomic.Int64
	statements   atomic.Int64
	closeOnce    sync.Once
}

// readerConns is the number of connections that serve View: the engine's
// workers and the web page read concurrently while the committer writes.
const readerConns = 4

// Open opens (creating when missing) the database file at path and applies
// the embedded migrations.
func Open(path string) (*Store, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory %s: %w", dir, err)
	}
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return nil, fmt.Errorf("%w: %s (%v); keep records every step there — make it writable, or pass another --data", ErrReadOnly, dir, err)
	}
	// SQLite takes an empty file for a new database, and a new database
	// would let a re-deploy redo every write the lost ledger recorded.
	if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
		return nil, fmt.Errorf("%w: %s is empty (0 bytes), so the ledgers it held are gone; keep refuses to start over on it, since that would send writes again. Restore it from a backup, or remove it to start a new, empty data directory", ErrCorrupt, path)
	}
	dsn := "file:" + path + "?_pragma=auto_vacuum(INCREMENTAL)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(ON)&_pragma=temp_store(MEMORY)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// One connection: SQLite has one writer anyway, and a single connection
	// makes every transaction of this process strictly serial.
	db.SetMaxOpenConns(1)
	s := newStore(db)
	if err := s.migrate(); err != nil {
		db.Close()
		if err := store.MarkCorrupt(err); errors.Is(err, store.ErrCorrupt) {
			return nil, fmt.Errorf("%w: %s cannot be read (%v); keep refuses to run on it. Restore it from a backup", store.ErrCorrupt, path, err)
		}
		return nil, err
	}
	if err := private(path); err != nil {
		db.Close()
		return nil, err
	}
	w, err := newConn(context.Background(), db, &s.statements)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s.all = append(s.all, w)
	if err := s.vetoCommitsInViews(w); err != nil {
		s.closeConns()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	rdb, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		s.closeConns()
		return nil, fmt.Errorf("open %s for reading: %w", path, err)
	}
	s.rdb = rdb
	if err := s.openReaders(rdb, readerConns); err != nil {
		s.closeConns()
		return nil, fmt.Errorf("open %s for reading: %w", path, err)
	}
	s.writer = w
	if err := s.openSeq(path); err != nil {
		s.closeConns()
		return nil, err
	}
	return s, nil
}

// private makes the database's files readable by keep's user alone
// (0600): SQLite makes a new database with the process's default mode
// (0644), and its -wal and -shm take the database's.
func private(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			if err := os.Chmod(p, perm&0o700); err != nil {
				return fmt.Errorf("make %s private (chmod 600): %w", p, err)
			}
		}
	}
	return nil
}

// openSeq reads the database's commit number and the note beside it. A
// database behind its note lost transactions that were committed (its
// -wal was deleted after a crash): the ledger would forget writes that
// happened and send them again, so keep refuses to run on it. The note is
// written after every commit without an fsync, so after a power cut it can
// only lag (never a false alarm).
func (s *Store) openSeq(path string) error {
	// The note first, the database second: a note is written only after its
	// commit is durable, so whatever the note says the database holds by the
	// time it is read — even while another process commits (read the other
	// way round, a commit in between made a false alarm).
	f, err := os.OpenFile(path+".seq", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	var noted int64
	fmt.Sscan(strings.TrimSpace(string(b[:n])), &noted)
	var seq int64
	if err := s.writer.QueryRow(`SELECT seq FROM commit_seq WHERE id = 1`).Scan(&seq); err != nil {
		f.Close()
		return fmt.Errorf("open %s: read the commit number: %w", path, err)
	}
	if seq < noted {
		f.Close()
		return fmt.Errorf("%w: %s holds %d commits, but %d were made (see %s.seq): the last ones are lost — was %s-wal deleted? The ledger would forget writes that happened and send them again, so keep refuses to run on it. Restore the data directory from a backup", store.ErrCorrupt, path, seq, noted, path, path)
	}
	s.seqFile = f
	return nil
}

// noteSeq records a commit's number beside the database (no fsync: see openSeq).
func (s *Store) noteSeq(seq int64) {
	if s.seqFile != nil {
		_, _ = s.seqFile.WriteAt([]byte(fmt.Sprintf("%-20d\n", seq)), 0)
	}
}

func newStore(db *sql.DB) *Store {
	s := &Store{db: db, quit: make(chan struct{})}
	s.idle = sync.NewCond(&s.mu)
	return s
}

func (s *Store) openReaders(db *sql.DB, n int) error {
	db.SetMaxOpenConns(n)
	s.readers = make(chan *conn, n)
	for i := 0; i < n; i++ {
		c, err := newConn(context.Background(), db, &s.statements)
		if err != nil {
			return err
		}
		s.all = append(s.all, c)
		s.readers <- c
	}
	return nil
}

func (s *Store) closeConns() {
	for _, c := range s.all {
		c.close()
	}
	if s.rdb != nil {
		s.rdb.Close()
	}
	s.db.Close()
}

func (s *Store) migrate() error {
	if _, err := s.db.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	entries, err := migrations.ReadDir("migrations")
	if err != nil {
		return err
	}
	names := make([]string, 0, len(entries))
	known := map[string]bool{}
	for _, e := range entries {
		names = append(names, e.Name())
		known[e.Name()] = true
	}
	sort.Strings(names)
	if err := refuseNewer(s.db, known); err != nil {
		return err
	}
	for _, name := range names {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM schema_migrations WHERE name=?`, name).Scan(&n); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if n > 0 {
			continue
		}
		body, _ := migrations.ReadFile("migrations/" + name)
		tx, err := s.db.Begin()
		if err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		if _, err := tx.Exec(string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		if err := sqldb.AfterMigration(name, sqldb.SQLTx(tx)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		if _, err := tx.Exec(`INSERT INTO schema_migrations(name, applied_at) VALUES(?, ?)`, name, time.Now().UnixMilli()); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate %s: %w", name, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrate %s: %w", name, err)
		}
	}
	return nil
}

// refuseNewer refuses a database that has a migration this keep does not
// know: a newer keep wrote it, and this one would misread it.
func refuseNewer(db *sql.DB, known map[string]bool) error {
	rows, err := db.Query(`SELECT name FROM schema_migrations`)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return err
		}
		if !known[name] {
			return fmt.Errorf("the database's schema has migration %s, which this keep does not know: it was written by a newer keep; run that one (or newer)", name)
		}
	}
	return rows.Err()
}

// ErrReadOnly means the data directory cannot be written.
var ErrReadOnly = errors.New("the data directory is read-only")

// ErrCorrupt says the database file cannot be the ledger keep wrote.
var ErrCorrupt = store.ErrCorrupt

// OpenReadOnly opens an existing database for reading only, for a data
// directory keep cannot write (a read-only mount): reads work, every write fails.
func OpenReadOnly(path string) (*Store, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&immutable=1")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := newStore(db)
	if err := s.openReaders(db, 1); err != nil {
		s.closeConns()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return s, nil
}

// Update runs fn in a write transaction that is durable (fsync) before
// Update returns; fn may share its commit with other callers' (see
// committer.go), never its rollback.
func (s *Store) Update(ctx context.Context, fn func(store.Tx) error) error {
	return store.MarkCorrupt(s.submit(ctx, store.Fenced(ctx, fn)))
}

// View runs fn in a read transaction on a reader connection; it sees only
// committed (durable) data.
func (s *Store) View(ctx context.Context, fn func(store.Tx) error) (err error) {
	defer func() { err = store.MarkCorrupt(err) }()
	if store.IsShortRead(ctx) && s.takeIdleWriter() {
		defer s.giveWriterBack()
		return s.readOnWriter(fn)
	}
	var c *conn
	select {
	case c = <-s.readers:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.quit:
		return ErrClosed
	}
	defer func() { s.readers <- c }()
	return read(c, fn)
}

// read runs fn in a read transaction on c.
func read(c *conn, fn func(store.Tx) error) (err error) {
	if err := c.exec("BEGIN"); err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer func() {
		if rerr := c.exec("ROLLBACK"); rerr != nil && err == nil {
			err = fmt.Errorf("end read: %w", rerr)
		}
	}()
	return fn(sqldb.NewTx(c))
}

// takeIdleWriter lends the writer's connection to a short read when no
// group commit is under way or waiting: the read holds it as a leader
// would, so an Update that comes meanwhile queues, and giveWriterBack
// commits what queued. A reader connection would start that read with an
// empty cache (SQLite drops a connection's pages when another one
// committed) and read its pages again from the WAL, one system call each:
// on a chain of runs, where every step's plan follows a commit, that was
// the plan's largest cost.
func (s *Store) takeIdleWriter() bool {
	if s.writer == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leading || s.closed || len(s.queue) > 0 {
		return false
	}
	s.leading = true
	return true
}

// readOnWriter runs a short read on the writer's connection as a reader
// connection would: a View writes nothing, and a write through its Tx is
// refused. A reader connection refuses writes by query_only, set once when
// it opens. The writer cannot toggle it: query_only is one of SQLite's flag
// pragmas, and setting any of them expires every statement the connection
// has prepared, so each commit after a short read parsed all its statements
// again (a fifth of keep's process on a chain of runs, performance.md).
// So the read is judged by what it did (viewOnWriter.refuseChanges), its
// writes are undone by the rollback, and no commit can happen while it
// holds the writer (vetoCommitsInViews): a write that ended the read's
// transaction early, and every write after it, is rolled back too.
func (s *Store) readOnWriter(fn func(store.Tx) error) (err error) {
	if err := s.writer.exec("BEGIN"); err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	s.viewing.Store(true)
	v := &viewOnWriter{c: s.writer}
	defer func() {
		if cerr := v.end(); err == nil {
			err = cerr
		}
		// The rollback needs every statement of the read closed (end);
		// it fails on a transaction the View ended early.
		if rerr := s.writer.exec("ROLLBACK"); rerr != nil && err == nil {
			err = fmt.Errorf("end read: %w", rerr)
		}
		s.viewing.Store(false)
	}()
	if v.before, err = v.state(); err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	return fn(sqldb.NewTx(v))
}

// vetoCommitsInViews makes SQLite roll back, instead of commit, any commit
// on the writer while a short read holds it: its own ROLLBACK is the only
// way a View's transaction may end, and a statement that ended it early
// (a COMMIT in hand-written SQL, a conflict resolved by ROLLBACK) would
// otherwise let every later write autocommit, durably (found by an attack).
func (s *Store) vetoCommitsInViews(w *conn) error {
	return w.c.Raw(func(dc any) error {
		h, ok := dc.(sqlite.HookRegisterer)
		if !ok {
			return fmt.Errorf("the SQLite driver's connection (%T) takes no commit hook", dc)
		}
		h.RegisterCommitHook(func() int32 {
			if s.viewing.Load() {
				return 1 // a non-zero answer turns the commit into a rollback
			}
			return 0
		})
		return nil
	})
}

// errWriteInView is a write attempted through the Tx of a View.
var errWriteInView = errors.New("a write inside a read-only transaction (View) was refused and rolled back: make it in an Update")

// viewOnWriter is the writer's connection lent to a short read: the
// statements run as they would on a reader, and a change to any row, to
// the schema or to query_only fails the read (readOnWriter).
type viewOnWriter struct {
	c      *conn
	before viewState
	// rows are the answers handed out: a statement not read to its end is
	// still under way, and SQLite counts its changes only once it ends
	// (and keeps the writer from committing until then), so every one is
	// closed before the read is judged.
	rows []sqldb.Rows
}

// viewState is what a read must leave as it found it.
type viewState struct {
	changes, schema, queryOnly int64
}

func (v *viewOnWriter) state() (st viewState, err error) {
	err = v.c.QueryRow(`SELECT total_changes(), (SELECT schema_version FROM pragma_schema_version()), (SELECT query_only FROM pragma_query_only())`).
		Scan(&st.changes, &st.schema, &st.queryOnly)
	return st, err
}

// refuseChanges fails the read if a statement in it changed a row, the
// schema or the connection's query_only.
func (v *viewOnWriter) refuseChanges() error {
	st, err := v.state()
	switch {
	case err != nil:
		return fmt.Errorf("end read: %w", err)
	case st.queryOnly != v.before.queryOnly:
		if v.c.exec("PRAGMA query_only=0") != nil {
			return fmt.Errorf("%w (it set query_only, which could not be set back)", errWriteInView)
		}
		return errWriteInView
	case st != v.before:
		return errWriteInView
	}
	return nil
}

// end closes what the read left open and judges it.
func (v *viewOnWriter) end() error {
	var closeErr error
	for _, r := range v.rows {
		if err := r.Close(); err != nil && closeErr == nil {
			closeErr = err
		}
	}
	v.rows = nil
	err := v.refuseChanges()
	if err == nil && closeErr != nil {
		err = fmt.Errorf("end read: %w", closeErr)
	}
	return err
}

func (v *viewOnWriter) Exec(q string, args ...any) (sql.Result, error) {
	r, err := v.c.Exec(q, args...)
	if err != nil {
		return nil, err
	}
	if err := v.refuseChanges(); err != nil {
		return nil, err
	}
	return r, nil
}

func (v *viewOnWriter) Query(q string, args ...any) (sqldb.Rows, error) {
	rows, err := v.c.Query(q, args...)
	if err != nil {
		return nil, err
	}
	v.rows = append(v.rows, rows)
	return rows, nil
}

// QueryRow runs through Query, so that an answer never scanned is closed
// with the others.
func (v *viewOnWriter) QueryRow(q string, args ...any) sqldb.Row {
	rows, err := v.Query(q, args...)
	return firstRow{rows: rows, err: err}
}

// firstRow is QueryRow's answer made of Rows, as *sql.Row is.
type firstRow struct {
	rows sqldb.Rows
	err  error
}

func (r firstRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	return r.rows.Close()
}

// giveWriterBack ends a short read's hold of the writer. The commits that
// queued meanwhile are led by the first of their own callers (handLead),
// not on the read's goroutine: the read's caller gets its View back at
// once and never runs another caller's Update function.
func (s *Store) giveWriterBack() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		s.handLead(s.queue[0])
		return
	}
	s.leading = false
	s.idle.Broadcast()
}

// Stats reports the number of durable commits (fsyncs) and of transactions
// they carried; with group commit, one commit carries several.
func (s *Store) Stats() store.Stats {
	return store.Stats{Commits: s.commits.Load(), Transactions: s.transactions.Load(), Statements: s.statements.Load()}
}

// Close waits for the group commit under way, refuses new transactions and
// closes the database.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		for s.leading {
			s.idle.Wait()
		}
		for _, r := range s.queue {
			r.done <- result{err: ErrClosed}
		}
		s.queue = nil
		s.mu.Unlock()
		close(s.quit)
		// Wait for Views in progress to hand their connections back.
		for i := 0; i < cap(s.readers); i++ {
			<-s.readers
		}
		s.closeConns()
		if s.seqFile != nil {
			s.seqFile.Close()
		}
	})
	return nil
}

// IntegrityCheck runs PRAGMA integrity_check and returns its first line.
func (s *Store) IntegrityCheck() (string, error) {
	var r string
	err := s.View(context.Background(), func(t store.Tx) error {
		return t.(*sqldb.Tx).Runner().QueryRow(`PRAGMA integrity_check`).Scan(&r)
	})
	return r, err
}
