package sqlconn

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// What a script's statement may do is judged by the database, before it
// runs where that is possible: PostgreSQL parses and describes it (one
// statement, and for a query one that returns rows), MariaDB/MySQL prepares
// it server-side, SQLite compiles it under an authorizer (sqlitevet.go).
// A query then runs in a read-only transaction that is always rolled back;
// an exec runs in keep's transaction with its marker row, and keep checks
// before COMMIT that the statement neither ended that transaction nor
// touched the marker rows (docs/design.md, "sql.exec: one statement").

// refusal is a statement keep will not run: the script's to change.
type refusal struct{ msg string }

func (r refusal) Error() string { return r.msg }

// setupRefusal is a database keep will run no script statement on as it is
// declared (a role, an extension or an engine that reaches past the
// database; keep's own store): keep.toml's or the database's to change,
// not the script's, so the run waits for a person (ClassPermission) with
// the line that allows it, instead of a card that blames the script.
type setupRefusal struct{ msg string }

func (r setupRefusal) Error() string { return r.msg }

const (
	oneStatement    = "one statement at a time: the text holds more than one statement; call sql.exec (or sql.query) once per statement"
	noRows          = "sql.query runs a statement that returns rows (SELECT, WITH … SELECT, VALUES); this one returns none (COPY, SET, DO, DDL, transaction control and the like are refused); a write goes through sql.exec"
	txControl       = "transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, SET TRANSACTION) and session settings are keep's: each sql.exec runs in a transaction keep opens and commits with its record of the write; the statement was rolled back"
	notExplained    = "sql.query on MariaDB/MySQL runs a statement the server can EXPLAIN (SELECT, WITH … SELECT); this one it cannot (OPTIMIZE, ANALYZE, CHECK, REPAIR TABLE, SHOW and the like act on the server or are not a read keep can judge); a write goes through sql.exec"
	txCommits       = "the statement would commit keep's transaction before keep recorded the write (on MariaDB/MySQL DDL — CREATE, ALTER, DROP, TRUNCATE, RENAME — commits the transaction it runs in, and so does COMMIT inside BEGIN NOT ATOMIC … END): each sql.exec runs in a transaction keep opens and commits with its record of the write; run such a statement outside keep; the statement was rolled back"
	markersShadowed = "the statement made a temporary table named " + Table + ", which would stand in for keep's record of the writes it made exactly once; the statement was rolled back"
	markersTouch    = "the statement changed " + Table + ", keep's record of the writes it made exactly once (a script may not write it); the statement was rolled back"
)

// onePG words PostgreSQL's refusal of several statements in one Parse.
func onePG(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == "42601" && strings.Contains(pg.Message, "multiple commands") {
		return refusal{oneStatement}
	}
	return err
}

func (c *Conn) query(ctx context.Context, call connector.Call) connector.Result {
	a := call.Args
	d, kerr := c.open(str(a["db"]))
	if kerr != nil {
		return connector.Result{Err: kerr}
	}
	var out []any
	var err error
	switch d.driver {
	case "pgx":
		out, err = d.queryPG(ctx, str(a["sql"]), bind(a))
	case "mysql":
		out, err = d.queryMySQL(ctx, str(a["sql"]), bind(a))
	default:
		out, err = d.querySQLite(ctx, str(a["sql"]), bind(a))
	}
	if err != nil {
		var ke *kt.Error
		if errors.As(err, &ke) {
			return connector.Result{Err: ke}
		}
		return connector.Result{Err: classify("sql.query on "+d.name, err)}
	}
	return connector.Result{Value: out}
}

func readOnly(ctx context.Context, conn *sql.Conn, run func(*sql.Tx) ([]any, error)) ([]any, error) {
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() // a query never commits
	return run(tx)
}

func (d *database) queryPG(ctx context.Context, q string, args []any) ([]any, error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	defer conn.Raw(func(any) error { return driver.ErrBadConn }) // close the session: nothing it holds outlives the read
	// Ask the catalog what the session reaches (guard.go), then Parse and
	// Describe without running: one statement (the extended protocol
	// refuses more), and one that returns rows — COPY … TO PROGRAM, which
	// a read-only transaction allows, returns none.
	if err := conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		if err := d.guardPGAlone(ctx, pc); err != nil {
			return err
		}
		sd, err := pc.PgConn().Prepare(ctx, "", q, nil)
		if err != nil {
			return onePG(err)
		}
		if len(sd.Fields) == 0 {
			return refusal{noRows}
		}
		if err := pgArgs(pc.TypeMap(), sd, args); err != nil {
			return err
		}
		return judgeReadPG(ctx, pc, q, sd.ParamOIDs) // volatile.go
	}); err != nil {
		return nil, err
	}
	out, err := readOnly(ctx, conn, func(tx *sql.Tx) ([]any, error) {
		rows, err := tx.QueryContext(ctx, q, args...) // pgx's stdlib queries with the extended protocol
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		return scan(rows, d.driver)
	})
	return out, bounded(err, nil)
}

// columnsOf reads how many columns a prepared MySQL statement returns, as
// the server answered the prepare (go-sql-driver keeps it unexported).
func columnsOf(st driver.Stmt) (int, bool) {
	v := reflect.ValueOf(st)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return 0, false
	}
	f := v.Elem().FieldByName("columns")
	if !f.IsValid() || f.Kind() != reflect.Slice {
		return 0, false
	}
	return f.Len(), true
}

func (d *database) queryMySQL(ctx context.Context, q string, args []any) ([]any, error) {
	ctx, budget := withReadBudget(ctx)
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	defer conn.Raw(func(any) error { return driver.ErrBadConn }) // close the session: a GET_LOCK dies with it
	if err := d.guardMySQL(ctx, conn); err != nil {
		return nil, err
	}
	// A server-side prepare: one statement, and the columns it returns.
	// START TRANSACTION READ ONLY does not stop DDL (MariaDB commits the
	// transaction first) nor SELECT … INTO OUTFILE; both return no rows.
	// Nor does it stop OPTIMIZE, ANALYZE, CHECK or REPAIR TABLE, which
	// return rows: a read is a statement the server can EXPLAIN (SELECT,
	// WITH … SELECT; a write there fails in the read-only transaction) —
	// only prepared, never run, since EXPLAIN runs a derived table.
	if err := conn.Raw(func(dc any) error {
		st, err := dc.(driver.ConnPrepareContext).PrepareContext(ctx, q)
		if err != nil {
			return err
		}
		defer st.Close()
		n, ok := columnsOf(st)
		if !ok {
			return refusal{"keep cannot tell whether this statement returns rows (the MySQL driver changed), so sql.query refuses it"}
		}
		if n == 0 {
			return refusal{noRows}
		}
		ex, err := dc.(driver.ConnPrepareContext).PrepareContext(ctx, "EXPLAIN "+q)
		var my *mysql.MySQLError
		if errors.As(err, &my) && my.Number == 1064 {
			return refusal{notExplained}
		} else if err != nil {
			return err
		}
		return ex.Close()
	}); err != nil {
		return nil, err
	}
	out, err := readOnly(ctx, conn, func(tx *sql.Tx) ([]any, error) {
		st, err := tx.PrepareContext(ctx, q)
		if err != nil {
			return nil, err
		}
		defer st.Close()
		rows, err := st.QueryContext(ctx, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		return scan(rows, d.driver)
	})
	return out, bounded(err, budget)
}

// sqliteAttachedLimit is SQLITE_LIMIT_ATTACHED: 0 attached databases.
const sqliteAttachedLimit = 7

func (d *database) querySQLite(ctx context.Context, q string, args []any) ([]any, error) {
	if err := d.vet.vet(q, true); err != nil {
		return nil, sqliteVetErr(err)
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := sqlite.Limit(conn, sqliteAttachedLimit, 0); err != nil {
		return nil, err
	}
	was, err := sqlite.Limit(conn, sqliteLimitLength, MaxResultBytes)
	if err != nil {
		return nil, err
	}
	defer sqlite.Limit(conn, sqliteLimitLength, was)
	if _, err := conn.ExecContext(ctx, "PRAGMA query_only = 1"); err != nil {
		return nil, err
	}
	defer conn.ExecContext(context.Background(), "PRAGMA query_only = 0")
	out, err := readOnly(ctx, conn, func(tx *sql.Tx) ([]any, error) {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		return scan(rows, d.driver)
	})
	return out, bounded(err, nil)
}

// sqliteVetErr: the vetter's verdict is the script's to fix, unless the
// file was busy.
func sqliteVetErr(err error) error {
	if strings.Contains(err.Error(), "locked") || strings.Contains(err.Error(), "busy") {
		return err
	}
	return refusal{err.Error()}
}

// markSum is the count of keep's marker rows and a sum over their
// content, read in keep's transaction before and after the statement.
type markSum struct{ n, sum int64 }

// execTx is keep's transaction around one sql.exec, per database.
type execTx interface {
	// guard refuses a session that reaches beyond its database (guard.go).
	guard() error
	recorded(key string) (string, bool, error)
	// markers locks the marker rows against other writers of the database
	// (the first time) and sums them.
	markers() (markSum, error)
	// run runs the statement, and refuses it if it ended the transaction;
	// rows is what the statement returned (RETURNING), nil if no columns.
	run(q string, args []any) (n int64, rows []any, err error)
	record(key, result string) error
	commit() error
}

func (c *Conn) exec(ctx context.Context, call connector.Call) connector.Result {
	a := call.Args
	d, kerr := c.open(str(a["db"]))
	if kerr != nil {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: kerr}
	}
	what := "sql.exec on " + d.name
	ctx, budget := withReadBudget(ctx)
	failed := func(err error) connector.Result {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: classify(what, bounded(err, budget))}
	}
	if err := d.ensureTable(ctx); err != nil {
		return failed(err)
	}
	if d.driver == "sqlite" {
		if err := d.vet.vet(str(a["sql"]), false); err != nil {
			return failed(sqliteVetErr(err))
		}
	}
	var res connector.Result
	err := d.withExecTx(ctx, func(tx execTx) {
		if r, ok, err := tx.recorded(call.IdempotencyKey); err != nil {
			res = failed(err)
			return
		} else if ok {
			res = connector.Result{Outcome: connector.OutcomeApplied, Value: withFlag(r, "replayed")}
			return
		}
		n, rows, err := runGuarded(tx, str(a["sql"]), bind(a))
		if err != nil {
			res = failed(err)
			return
		}
		result := map[string]any{"rowsAffected": n}
		if rows != nil {
			result["rows"] = rows
		}
		out, err := json.Marshal(result)
		if err != nil {
			res = connector.Result{Outcome: connector.OutcomeFailed, Err: kt.Errorf(kt.ClassInternal, "%s: record the result: %v", what, err)}
			return
		}
		if err := tx.record(call.IdempotencyKey, string(out)); err != nil {
			res = failed(err)
			return
		}
		if err := tx.commit(); err != nil {
			res = commitFailed(what, d.driver, err)
			return
		}
		// What a replay returns: the recorded JSON, read back.
		var v map[string]any
		json.Unmarshal(out, &v)
		v["rowsAffected"] = n
		res = connector.Result{Outcome: connector.OutcomeApplied, Value: v}
	})
	if err != nil {
		return failed(err)
	}
	return res
}

// runGuarded runs the statement q between two checks: of the session
// (guard) and of keep's markers. A statement that installed an extension,
// granted its role more, or touched the markers is refused, and the
// caller rolls it back.
func runGuarded(tx execTx, q string, args []any) (n int64, rows []any, err error) {
	if err := tx.guard(); err != nil {
		return 0, nil, err
	}
	before, err := tx.markers()
	if err != nil {
		return 0, nil, err
	}
	if n, rows, err = tx.run(q, args); err != nil {
		return 0, nil, err
	}
	// Asked again: a statement that installed an extension, or granted
	// its role more, is rolled back.
	if err := tx.guard(); err != nil {
		return 0, nil, err
	}
	after, err := tx.markers()
	if err != nil {
		return 0, nil, err
	}
	if after != before {
		return 0, nil, refusal{markersTouch}
	}
	return n, rows, nil
}

// commitFailed says what an error from COMMIT means. An error the database
// answered (a deferred constraint, a serialization failure; any error of
// SQLite, which runs in this process) is an answer: the transaction did
// not commit. Only a COMMIT whose answer never came may have committed;
// reconcile looks the key up.
func commitFailed(what, driver string, err error) connector.Result {
	var pg *pgconn.PgError
	var my *mysql.MySQLError
	if errors.As(err, &pg) || errors.As(err, &my) || driver == "sqlite" {
		e := classify(what, err)
		e.Message += "; the database refused the COMMIT, so nothing of the statement was written"
		return connector.Result{Outcome: connector.OutcomeFailed, Err: e}
	}
	return connector.Result{Outcome: connector.OutcomeUncertain, Err: kt.Errorf(kt.ClassIndeterminate, "%s: COMMIT got no answer (%v); the statement may have been committed", what, err)}
}

// withExecTx runs f in keep's transaction on a connection of its own.
// PostgreSQL's and MariaDB's connection is closed afterwards, so nothing a
// statement left in the session (a temporary table, a setting) outlives
// the call.
func (d *database) withExecTx(ctx context.Context, f func(execTx)) error {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	switch d.driver {
	case "pgx":
		var begun error
		conn.Raw(func(dc any) error {
			pc := dc.(*stdlib.Conn).Conn()
			tx, err := pc.Begin(ctx)
			if err != nil {
				begun = err
				return driver.ErrBadConn
			}
			defer tx.Rollback(context.Background())
			// keep's own queries run with PostgreSQL's functions and
			// operators only (keepsPath); the script's statement with the
			// session's search path, read here.
			var path string
			if err := tx.QueryRow(ctx, `SELECT pg_catalog.current_setting('search_path')`).Scan(&path); err != nil {
				begun = err
				return driver.ErrBadConn
			}
			if _, err := tx.Exec(ctx, keepsPath); err != nil {
				begun = err
				return driver.ErrBadConn
			}
			if _, err := tx.Exec(ctx, "LOCK TABLE "+d.marker+" IN SHARE ROW EXCLUSIVE MODE"); err != nil {
				begun = err
				return driver.ErrBadConn
			}
			f(&pgTx{ctx: ctx, d: d, pc: pc, tx: tx, path: path})
			return driver.ErrBadConn // close the session
		})
		return begun
	case "mysql":
		// An XA transaction, in which the server refuses whatever would
		// commit it (XAER_RMFAIL): DDL commits the transaction it runs in
		// and is not rolled back (TRUNCATE of keep's markers), and a
		// compound statement (BEGIN NOT ATOMIC …, which MariaDB prepares)
		// may COMMIT — both before keep's check after the statement, which
		// could only "roll back" what was already committed (issue 38,
		// attack). Closing the session rolls back an XA transaction that
		// is still active.
		defer conn.Raw(func(any) error { return driver.ErrBadConn }) // close the session
		var b [12]byte
		rand.Read(b[:])
		xid := "'keep-" + hex.EncodeToString(b[:]) + "'"
		if _, err := conn.ExecContext(ctx, "XA START "+xid); err != nil {
			return err
		}
		f(&myTx{sqlTx{ctx: ctx, d: d, tx: conn, commitTx: func() error {
			if _, err := conn.ExecContext(ctx, "XA END "+xid); err != nil {
				return err
			}
			_, err := conn.ExecContext(ctx, "XA COMMIT "+xid+" ONE PHASE")
			return err
		}}})
		return nil
	}
	if _, err := sqlite.Limit(conn, sqliteAttachedLimit, 0); err != nil {
		return err
	}
	// SQLite runs in keep's process: no value an exec makes or reads is
	// larger than what a call may move (randomblob of 250 MB was keep's).
	was, err := sqlite.Limit(conn, sqliteLimitLength, kt.MaxHostCallBytes)
	if err != nil {
		return err
	}
	defer sqlite.Limit(conn, sqliteLimitLength, was)
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	f(&sqlTx{ctx: ctx, d: d, tx: tx, commitTx: tx.Commit})
	return nil
}

type pgTx struct {
	ctx  context.Context
	d    *database
	pc   *pgx.Conn
	tx   pgx.Tx
	path string // the session's search_path, for the script's statement
}

// keepsPath is the search path of keep's own queries in an exec: a
// statement's set_config('search_path', …) (or ALTER ROLE … SET) put the
// role's own count, hashtext or = before PostgreSQL's, and keep's check
// of its record would have read what the role's functions said (issue
// 38, attack). Its record is named with its schema, never by the path.
const keepsPath = `SET LOCAL search_path TO pg_catalog, pg_temp`

// pgRecordArmedQ says what the application's role has made of keep's
// record, beyond its rows: a trigger (fired by keep's own insert of its
// record: one that deleted the other markers was committed with it), a
// rule, or row security (which hides rows from keep's check).
const pgRecordArmedQ = `SELECT ARRAY(SELECT 'the trigger ' || tgname FROM pg_catalog.pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal
  UNION ALL SELECT 'the rule ' || rulename FROM pg_catalog.pg_rewrite WHERE ev_class = $1::regclass
  UNION ALL SELECT 'the row security policy ' || polname FROM pg_catalog.pg_policy WHERE polrelid = $1::regclass
  UNION ALL SELECT 'row security' FROM pg_catalog.pg_class WHERE oid = $1::regclass AND (relrowsecurity OR relforcerowsecurity))`

func (t *pgTx) guard() error {
	if err := t.d.guardPG(t.ctx, t.tx); err != nil {
		return err
	}
	var armed []string
	if err := t.tx.QueryRow(t.ctx, pgRecordArmedQ, t.d.marker).Scan(&armed); err != nil {
		return err
	}
	if len(armed) > 0 {
		return refusal{fmt.Sprintf("%s, keep's record of the writes it made exactly once, has %s, which acts on keep's own writes to it; a script may not make them (drop them, as the database's owner); nothing was written",
			t.d.marker, strings.Join(armed, ", "))}
	}
	return nil
}

func (t *pgTx) recorded(key string) (string, bool, error) {
	var res string
	err := t.tx.QueryRow(t.ctx, `SELECT result FROM `+t.d.marker+` WHERE idempotency_key = $1`, key).Scan(&res)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	return res, err == nil, err
}

func (t *pgTx) markers() (markSum, error) {
	var m markSum
	err := t.tx.QueryRow(t.ctx, `SELECT count(*), coalesce(sum(hashtext(idempotency_key || result)), 0)::bigint FROM `+t.d.marker).Scan(&m.n, &m.sum)
	return m, err
}

// pgTxControl are the command tags of statements that end, split or
// reconfigure keep's transaction or the session.
var pgTxControl = map[string]bool{"BEGIN": true, "START TRANSACTION": true, "COMMIT": true, "ROLLBACK": true, "SAVEPOINT": true, "RELEASE": true,
	"PREPARE TRANSACTION": true, "COMMIT PREPARED": true, "ROLLBACK PREPARED": true, "SET": true, "RESET": true, "DISCARD ALL": true, "DISCARD": true}

func (t *pgTx) run(q string, args []any) (int64, []any, error) {
	if _, err := t.tx.Exec(t.ctx, `SELECT pg_catalog.set_config('search_path', $1, true)`, t.path); err != nil {
		return 0, nil, err
	}
	n, out, err := t.statement(q, args)
	if err != nil {
		return 0, nil, err
	}
	if _, err := t.tx.Exec(t.ctx, keepsPath); err != nil {
		return 0, nil, err
	}
	return n, out, nil
}

func (t *pgTx) statement(q string, args []any) (int64, []any, error) {
	// The extended protocol, even without args: Parse takes one statement.
	rows, err := t.tx.Query(t.ctx, q, append([]any{pgx.QueryExecModeDescribeExec}, args...)...)
	if err != nil {
		return 0, nil, t.why(q, args, onePG(err))
	}
	var out []any
	if len(rows.FieldDescriptions()) > 0 {
		out, err = scanPG(rows, t.pc.TypeMap())
	}
	for rows.Next() { // what scanPG left when it refused the result
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return 0, nil, onePG(err)
	}
	tag := rows.CommandTag()
	if t.pc.PgConn().TxStatus() != 'T' || pgTxControl[tag.String()] {
		return 0, nil, refusal{txControl + " (the statement was " + tag.String() + ")"}
	}
	return tag.RowsAffected(), out, nil
}

// why finds the argument pgx could not encode when a statement failed
// before PostgreSQL answered (pgx encodes arguments in this process, into
// the types the server described, and its errors carry no type): the
// statement is described again and each argument encoded alone, as pgx
// does. Any other failure is err itself.
func (t *pgTx) why(q string, args []any, err error) error {
	var pg *pgconn.PgError
	if len(args) == 0 || errors.As(err, &pg) || isNet(err) || t.ctx.Err() != nil {
		return err
	}
	sd, derr := t.pc.PgConn().Prepare(t.ctx, "", q, nil)
	if derr != nil {
		return err
	}
	if aerr := pgArgs(t.pc.TypeMap(), sd, args); aerr != nil {
		return aerr
	}
	return err
}

// pgArgs encodes each argument alone into the parameter type PostgreSQL
// described for it, as pgx does before it sends a statement, and names
// the first one that cannot be (an integer beyond int4, a string that is
// no uuid …): a logic error, which no retry changes.
func pgArgs(m *pgtype.Map, sd *pgconn.StatementDescription, args []any) error {
	if len(sd.ParamOIDs) != len(args) {
		return nil // pgx says so itself, and PostgreSQL too
	}
	for i, oid := range sd.ParamOIDs {
		var b pgx.ExtendedQueryBuilder
		err := b.Build(m, &pgconn.StatementDescription{ParamOIDs: []uint32{oid}}, []any{args[i]})
		if err == nil {
			continue
		}
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // pgx's "failed to encode args[0]" counts this one argument
		}
		typ := fmt.Sprintf("OID %d", oid)
		if t, ok := m.TypeForOID(oid); ok {
			typ = t.Name
		}
		return refusal{fmt.Sprintf("args[%d] (%s) cannot be sent as the statement's $%d, a PostgreSQL %s: %s; pass a value of that type (or change the column's type)", i, crop(fmt.Sprint(args[i]), 60), i+1, typ, crop(err.Error(), 300))}
	}
	return nil
}

func (t *pgTx) record(key, result string) error {
	_, err := t.tx.Exec(t.ctx, `INSERT INTO `+t.d.marker+` (idempotency_key, result, applied_at) VALUES ($1, $2, $3)`, key, result, time.Now().UnixMilli())
	return err
}

func (t *pgTx) commit() error { return t.tx.Commit(t.ctx) }

// sqlTx is keep's transaction through database/sql (SQLite, and the base
// of MariaDB/MySQL's).
type sqlTx struct {
	ctx context.Context
	d   *database
	tx  sqlOn
	// commitTx commits keep's transaction.
	commitTx func() error
}

// sqlOn is what sqlTx runs statements on: a transaction (SQLite), or the
// connection of an XA transaction (MariaDB/MySQL).
type sqlOn interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

func (t *sqlTx) guard() error { return nil } // SQLite: the vetter refuses ATTACH

func (t *sqlTx) recorded(key string) (string, bool, error) { return t.d.recorded(t.ctx, t.tx, key) }

func (t *sqlTx) markers() (markSum, error) {
	// SQLite: the vetter refused any statement that names keep_mutations;
	// the count is a second look.
	var m markSum
	err := t.tx.QueryRowContext(t.ctx, `SELECT count(*), coalesce(sum(length(idempotency_key) + length(result)), 0) FROM `+t.d.marker).Scan(&m.n, &m.sum)
	return m, err
}

func (t *sqlTx) run(q string, args []any) (int64, []any, error) {
	rows, err := t.tx.QueryContext(t.ctx, q, args...)
	if err != nil {
		return 0, nil, err
	}
	return t.rowsOf(rows, `SELECT changes()`)
}

// rowsOf reads what a statement returned: its rows (and as many rows
// affected), or when it returned no columns the count countQ reads.
func (t *sqlTx) rowsOf(rows *sql.Rows, countQ string) (int64, []any, error) {
	cols, err := rows.Columns()
	var out []any
	if err == nil && len(cols) > 0 {
		out, err = scan(rows, t.d.driver)
	}
	rows.Close()
	if err != nil {
		return 0, nil, err
	}
	if out != nil {
		return int64(len(out)), out, nil
	}
	var n int64
	err = t.tx.QueryRowContext(t.ctx, countQ).Scan(&n)
	return n, nil, err
}

func (t *sqlTx) record(key, result string) error {
	_, err := t.tx.ExecContext(t.ctx, `INSERT INTO `+t.d.marker+` (idempotency_key, result, applied_at) VALUES (?, ?, ?)`, key, result, time.Now().UnixMilli())
	return err
}

func (t *sqlTx) commit() error { return t.commitTx() }

type myTx struct{ sqlTx }

func (t *myTx) guard() error { return t.d.guardMySQL(t.ctx, t.tx) }

func (t *myTx) markers() (markSum, error) {
	// FOR UPDATE locks every marker row and the gaps: another sql.exec on
	// this database waits for this one's COMMIT.
	var m markSum
	err := t.tx.QueryRowContext(t.ctx, `SELECT COUNT(*), CAST(COALESCE(SUM(CRC32(CONCAT(idempotency_key, result))), 0) AS SIGNED) FROM `+t.d.marker+` FOR UPDATE`).Scan(&m.n, &m.sum)
	return m, err
}

// myTxControl are the session counters of statements that end, split or
// reconfigure a transaction or the session: MariaDB prepares COMMIT,
// ROLLBACK, BEGIN, SAVEPOINT and SET, and counts each it runs.
const myTxControl = `SHOW SESSION STATUS WHERE Variable_name IN ('Com_begin', 'Com_commit', 'Com_rollback', 'Com_savepoint', 'Com_rollback_to_savepoint',
 'Com_release_savepoint', 'Com_set_option', 'Com_xa_start', 'Com_xa_end', 'Com_xa_prepare', 'Com_xa_commit', 'Com_xa_rollback', 'Com_lock_tables', 'Com_unlock_tables')`

func (t *myTx) controls() (int64, error) {
	rows, err := t.tx.QueryContext(t.ctx, myTxControl)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var total int64
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return 0, err
		}
		total += n
	}
	return total, rows.Err()
}

func (t *myTx) run(q string, args []any) (int64, []any, error) {
	before, err := t.controls()
	if err != nil {
		return 0, nil, err
	}
	st, err := t.tx.PrepareContext(t.ctx, q) // server-side: one statement
	if err != nil {
		return 0, nil, err
	}
	defer st.Close()
	rows, err := st.QueryContext(t.ctx, args...)
	var my *mysql.MySQLError
	if errors.As(err, &my) && my.Number == 1399 { // XAER_RMFAIL: it would commit keep's transaction
		return 0, nil, refusal{txCommits}
	}
	if err != nil {
		return 0, nil, err
	}
	// ROW_COUNT() right after the statement: what it changed (an INSERT …
	// RETURNING counts its rows instead).
	n, out, err := t.rowsOf(rows, `SELECT ROW_COUNT()`)
	if err != nil {
		return 0, nil, err
	}
	after, err := t.controls()
	if err != nil {
		return 0, nil, err
	}
	if after != before {
		return 0, nil, refusal{txControl}
	}
	// A temporary table named like keep's record hides it from this
	// session, qualified name or not: a compound statement that copied
	// the markers into one and deleted the real ones passed keep's check
	// (it read the copy) and keep's own record went into the copy (issue
	// 38, attack). DROP TEMPORARY TABLE never touches the real table.
	_, err = t.tx.ExecContext(t.ctx, "DROP TEMPORARY TABLE "+t.d.marker)
	switch {
	case err == nil:
		return 0, nil, refusal{markersShadowed}
	case !errors.As(err, &my) || my.Number != 1051: // 1051: no such temporary table
		return 0, nil, err
	}
	return n, out, nil
}

func (d *database) ensureTable(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ready {
		return nil
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// keep makes nothing in a database it would refuse (keep's own store
	// under another URL, one with dblink): asked first, on this session.
	switch d.driver {
	case "pgx":
		err = conn.Raw(func(dc any) error { return d.guardPGAlone(ctx, dc.(*stdlib.Conn).Conn()) })
	case "mysql":
		err = d.guardMySQL(ctx, conn)
	}
	if err != nil {
		return err
	}
	marker := Table
	if d.driver == "pgx" {
		// Named with its schema, so a temporary table of the same name
		// (pg_temp comes first in the search path) cannot stand in for it.
		var schema sql.NullString
		if err := conn.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			return err
		}
		if !schema.Valid {
			return fmt.Errorf("the database's search_path names no schema that exists")
		}
		marker = pgx.Identifier{schema.String, Table}.Sanitize()
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+marker+` (idempotency_key VARCHAR(255) PRIMARY KEY, result TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		return err
	}
	d.marker, d.ready = marker, true
	return nil
}

func (d *database) recorded(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, key string) (string, bool, error) {
	ph := "?"
	if d.driver == "pgx" {
		ph = "$1"
	}
	var res string
	err := q.QueryRowContext(ctx, `SELECT result FROM `+d.marker+` WHERE idempotency_key = `+ph, key).Scan(&res)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return res, err == nil, err
}
