package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"

	"github.com/keep-run/keep/internal/store/sqldb"
)

// maxCachedStatements bounds a connection's statement cache. The store's SQL
// is a fixed set of texts (plus a few shapes per topic count), far below it;
// past it, statements are prepared and closed per use.
const maxCachedStatements = 256

// conn is one SQLite connection held for the store's lifetime, with its own
// cache of prepared statements. Parsing SQL was the largest single cost of a
// scheduler step (issue 6); a statement prepared once on the connection that
// runs it costs nothing to reuse. database/sql cannot do this inside a
// *sql.Tx (Tx.Stmt re-prepares a connection-bound statement every time), so
// transactions are plain BEGIN/COMMIT statements on the held connection.
//
// A conn is used by one goroutine at a time: the committer for the writer,
// the View that took it from the pool for a reader.
type conn struct {
	c     *sql.Conn
	stmts map[string]*sql.Stmt
	ran   *atomic.Int64 // the store's count of statements (Stats.Statements)
}

func newConn(ctx context.Context, db *sql.DB, ran *atomic.Int64) (*conn, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, stmts: map[string]*sql.Stmt{}, ran: ran}, nil
}

// stmt returns the cached statement for q, preparing it on first use; nil
// when the cache is full (the caller then runs q directly, and database/sql
// closes what it prepared when the rows are done).
func (c *conn) stmt(q string) (*sql.Stmt, error) {
	c.ran.Add(1)
	if st, ok := c.stmts[q]; ok {
		return st, nil
	}
	if len(c.stmts) >= maxCachedStatements {
		return nil, nil
	}
	st, err := c.c.PrepareContext(context.Background(), q)
	if err != nil {
		return nil, err
	}
	c.stmts[q] = st
	return st, nil
}

// Exec runs a statement that returns no rows.
func (c *conn) Exec(q string, args ...any) (sql.Result, error) {
	st, err := c.stmt(q)
	switch {
	case err != nil:
		return nil, err
	case st == nil:
		return c.c.ExecContext(context.Background(), q, args...)
	}
	return st.Exec(args...)
}

// Query runs a statement that returns rows.
func (c *conn) Query(q string, args ...any) (sqldb.Rows, error) {
	st, err := c.stmt(q)
	var rows *sql.Rows
	switch {
	case err != nil:
		return nil, err
	case st == nil:
		rows, err = c.c.QueryContext(context.Background(), q, args...)
	default:
		rows, err = st.Query(args...)
	}
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// row is the result of QueryRow: *sql.Row cannot be built outside
// database/sql, and an error from preparing must reach Scan.
type row struct {
	r   *sql.Row
	err error
}

func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return r.r.Scan(dest...)
}

// QueryRow runs a statement that returns at most one row.
func (c *conn) QueryRow(q string, args ...any) sqldb.Row {
	st, err := c.stmt(q)
	switch {
	case err != nil:
		return row{err: err}
	case st == nil:
		return row{r: c.c.QueryRowContext(context.Background(), q, args...)}
	}
	return row{r: st.QueryRow(args...)}
}

// exec runs a control statement (BEGIN, COMMIT, SAVEPOINT ...), prepared
// once like any other.
func (c *conn) exec(q string) error {
	if _, err := c.Exec(q); err != nil {
		return fmt.Errorf("%s: %w", q, err)
	}
	return nil
}

func (c *conn) close() {
	for _, st := range c.stmts {
		st.Close()
	}
	c.c.Close()
}
