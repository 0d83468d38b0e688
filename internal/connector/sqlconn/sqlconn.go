// Package sqlconn is the sql connector: query and exec on the PostgreSQL,
// MariaDB/MySQL and SQLite databases named in keep.toml
// ([connectors.sql.databases]). An exec is exactly once: the statement and
// a row in the database's own keep_mutations table (the idempotency key
// and the result) commit in one transaction, so a replay finds the row
// instead of executing again, and reconcile is a lookup.
package sqlconn

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	_ "modernc.org/sqlite"             // the "sqlite" driver

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/redact"
)

// MaxRows bounds what one query hands a script.
const MaxRows = 10000

// Table is the marker table keep creates in each database it writes to.
const Table = "keep_mutations"

type database struct {
	name, url, driver, dsn string
	path                   string // SQLite: the file
	once                   sync.Once
	db                     *sql.DB
	vet                    *vetter // SQLite: judges each statement before it runs
	err                    error
	mu                     sync.Mutex
	ready                  bool        // keep_mutations exists
	marker                 string      // keep_mutations as statements name it (PostgreSQL: schema-qualified)
	allow                  []string    // what keep.toml allows knowingly ([connectors.sql.allow] NAME)
	store                  *keepsStore // keep's own PostgreSQL store, nil otherwise
}

// Conn holds the declared databases and their connection pools.
type Conn struct {
	dbs map[string]*database
}

// Option sets up the connector beyond its databases.
type Option func(*options)

type options struct {
	allow    map[string][]string
	storeURL string
}

// Allow is [connectors.sql.allow]: per database, what keep cannot judge
// and a person allows knowingly ("superuser", an extension, an engine).
func Allow(allow map[string][]string) Option { return func(o *options) { o.allow = allow } }

// KeepsStore is keep's own PostgreSQL store's URL: a declared database
// that is the same server and database, whose role may use keep's
// schema, is refused at every call, as is any database of that server
// declared with keep's store's role (guard.go).
func KeepsStore(url string) Option { return func(o *options) { o.storeURL = url } }

// New returns the sql connector over the declared databases (NAME → URL).
func New(databases map[string]string, opts ...Option) (*connector.Connector, *Conn) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	var store *keepsStore
	if o.storeURL != "" {
		store = &keepsStore{url: o.storeURL}
	}
	c := &Conn{dbs: map[string]*database{}}
	for name, u := range databases {
		d := &database{name: name, url: u, allow: o.allow[name], store: store}
		d.driver, d.dsn, d.err = dsnOf(u)
		if d.driver == "sqlite" {
			pu, _ := url.Parse(u)
			d.path = pu.Path
		}
		c.dbs[name] = d
	}
	dbParam := connector.Param{Name: "db", Type: "string", Required: true, Doc: "a database named in keep.toml: `[connectors.sql.databases] NAME = \"postgres://…\"` (or `mysql://…`, `sqlite:///…`)"}
	sqlParam := connector.Param{Name: "sql", Type: "string", Required: true, Doc: "one statement, with placeholders `$1, $2…` (PostgreSQL) or `?` (MariaDB/MySQL, SQLite)"}
	argsParam := connector.Param{Name: "args", Type: "array", TS: "unknown[]", Doc: "the placeholders' values, bound by the driver (never spliced into the text): numbers, strings, booleans, null, bytes as `{ base64: \"…\" }`; an integer beyond 2^53 as a string"}
	return &connector.Connector{
		Name:    "sql",
		Doc:     "PostgreSQL, MariaDB/MySQL and SQLite databases declared in keep.toml. Credentials stay in keep.toml; scripts name a database, never a URL.",
		Sources: map[string][]string{"sql": {"row"}},
		Methods: map[string]*connector.Method{
			"query": {Name: "query", Kind: connector.KindRead, Validate: c.validate("sql.query"), Do: c.query, Doc: connector.MethodDoc{
				Summary:  "Runs a query and returns its rows.",
				Params:   []connector.Param{dbParam, sqlParam, argsParam},
				ResultTS: "Array<Record<string, any>>",
				Result:   fmt.Sprintf("an array of rows, each an object by column name, each value as it travels (see \"How values travel\" above: integers beyond 2^53 and NUMERIC as strings, bytes as `{ base64 }`, JSON parsed, times without a zone kept without one), at most %d rows and %d MiB", MaxRows, MaxResultBytes>>20),
				Errors: "a bad statement, more than one statement, or one that writes or returns no rows (`COPY`, `SET`, DDL…; on SQLite `ATTACH`, `PRAGMA`): logic, saying why — it runs in a read-only transaction, rolled back, on a session closed after it; " +
					"on PostgreSQL one that calls a function the catalog marks VOLATILE (`pg_advisory_lock`, `pg_terminate_backend`, `set_config`, `nextval`, `dblink`… — `random()`, `gen_random_uuid()` and the clock excepted), or that PostgreSQL cannot take as a read (`EXPLAIN`, `SHOW`, `CALL`), on MariaDB/MySQL one the server cannot EXPLAIN (`OPTIMIZE`/`ANALYZE`/`CHECK`/`REPAIR TABLE`, `SHOW`): logic; " +
					"a database whose session reaches beyond it (a role with superuser rights, an extension or storage engine keep does not know such as `dblink`, `postgres_fdw`, `FEDERATED`; keep's own store), unless `[connectors.sql.allow]` allows it knowingly: logic, naming the keep.toml line; " +
					"more rows or bytes than the bounds (checked before the bytes are in keep's memory), an argument beyond 2^53: logic; the login refused or a privilege missing: permission; the database unreachable, a lock wait timed out (`lock_timeout`, MariaDB's lock wait), a deadlock or serialization failure: transient.",
			}},
			"exec": {Name: "exec", Kind: connector.KindMutate, Identity: []string{"db", "sql"}, Validate: c.validate("sql.exec"), Do: c.exec,
				Reconcile: c.reconcile, ComparePayload: compareArgs, Target: func(a map[string]any) string { return "sql.exec on " + str(a["db"]) + ": " + crop(str(a["sql"]), 80) },
				Doc: connector.MethodDoc{
					Summary:  "Runs one statement exactly once. keep runs it in a transaction with an insert into the database's own `" + Table + "` table (created on first use: the write's idempotency key and its result); a second attempt of the same write finds that row and returns the recorded result without running the statement again.",
					Params:   []connector.Param{dbParam, sqlParam, argsParam, {Name: "subkey", Type: "string", Doc: "tells apart two runs of the same statement in one run"}},
					ResultTS: "{ rowsAffected: number; rows?: Array<Record<string, any>>; replayed?: boolean; reconciled?: boolean }",
					Result:   "`{ rowsAffected, rows }`: `rows` (as sql.query returns them) only when the statement returns rows (`INSERT … RETURNING id`), kept with the write's result; a write found already done returns the recorded result and adds `replayed: true` (on the second attempt) or `reconciled: true` (by reconcile)",
					Reconcile: "looks the key up in `" + Table + "`: there means committed (with the result it recorded), absent means the transaction never committed — certain, since the row commits with the statement. " +
						"On MariaDB/MySQL keep's transaction is an XA transaction, in which the server refuses what would commit it: a DDL statement (CREATE, ALTER, DROP, TRUNCATE…, which would commit by itself and escape the transaction) and a COMMIT inside `BEGIN NOT ATOMIC … END` are refused — run DDL outside keep.",
					Errors: "a bad statement or a constraint violation (also one a deferred constraint raises at COMMIT): logic (rolled back, nothing written); so is a database whose session reaches beyond it (as for sql.query, asked before the statement and again after it), more than one statement, transaction control (`BEGIN`, `COMMIT`, `ROLLBACK`, `SAVEPOINT`, `SET`), on MariaDB/MySQL DDL, a statement that changes `" + Table + "`, on SQLite `ATTACH`/`PRAGMA`, an argument beyond 2^53 and returned rows beyond the bounds; the login refused or a privilege missing: permission; the database unreachable before the statement, a lock wait timed out, a deadlock or serialization failure: transient; the connection lost during COMMIT (no answer): unknown, settled by reconcile.",
				}},
		},
	}, c
}

// Close closes the connection pools.
func (c *Conn) Close() {
	for _, d := range c.dbs {
		if d.db != nil {
			d.db.Close()
		}
		if d.vet != nil {
			d.vet.close()
		}
	}
}

func dsnOf(raw string) (driver, dsn string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", err
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		return "pgx", raw, nil
	case "sqlite":
		return "sqlite", u.Path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)", nil
	case "mysql":
		cfg := mysql.NewConfig()
		cfg.Net, cfg.Addr, cfg.DBName = boundedNet, u.Host, strings.TrimPrefix(u.Path, "/")
		if u.Port() == "" {
			cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
		}
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		cfg.ParseTime = true
		// DATETIME and TIMESTAMP come back as the wall clock they show in
		// UTC, without a zone, in the form MariaDB takes back (values.go).
		cfg.Params = map[string]string{"time_zone": "'+00:00'"}
		for k, vs := range u.Query() {
			// The parameters go to the driver, which reads its own options
			// among them: allowAllFiles would let the server ask keep's
			// process for any file it can read (LOAD DATA LOCAL INFILE,
			// which MariaDB prepares), keep's secret.key among them.
			if strings.EqualFold(k, "allowAllFiles") {
				return "", "", fmt.Errorf("%s lets the server read any file keep can (LOAD DATA LOCAL INFILE), keep's own secret.key, api.secret and store among them: keep sends the server no local file; remove it", k)
			}
			cfg.Params[k] = vs[0]
		}
		return "mysql", cfg.FormatDSN(), nil
	}
	return "", "", fmt.Errorf("unknown database URL scheme %q", u.Scheme)
}

func (c *Conn) open(name string) (*database, *kt.Error) {
	d, ok := c.dbs[name]
	if !ok {
		var known []string
		for n := range c.dbs {
			known = append(known, n)
		}
		sort.Strings(known)
		return nil, kt.Errorf(kt.ClassLogic, "there is no database %q in keep.toml [connectors.sql.databases] (known: %s)", name, strings.Join(known, ", "))
	}
	d.once.Do(func() {
		if d.err != nil {
			return
		}
		d.db, d.err = openDB(d.driver, d.dsn)
		if d.err == nil && d.driver == "sqlite" {
			d.db.SetMaxOpenConns(1)
			d.vet, d.err = openVetter(d.path)
		}
	})
	if d.err != nil {
		return nil, kt.Errorf(kt.ClassLogic, "database %s (%s): %v", name, redact.URL(d.url), d.err)
	}
	return d, nil
}

func str(v any) string { s, _ := v.(string); return s }

func crop(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func (c *Conn) validate(method string) func(map[string]any) error {
	return func(a map[string]any) error {
		if str(a["db"]) == "" {
			return fmt.Errorf("%s needs db: the name of a database in keep.toml [connectors.sql.databases]", method)
		}
		if strings.TrimSpace(str(a["sql"])) == "" {
			return fmt.Errorf("%s needs sql: one statement, like \"UPDATE orders SET state = $1 WHERE id = $2\"", method)
		}
		if v, ok := a["args"]; ok && v != nil {
			args, isArr := v.([]any)
			if !isArr {
				return fmt.Errorf("%s: args must be an array of the placeholders' values", method)
			}
			for i, x := range args {
				if err := checkArg(method, i, x); err != nil {
					return err
				}
			}
		}
		if _, ok := c.dbs[str(a["db"])]; !ok {
			_, err := c.open(str(a["db"]))
			return errors.New(err.Message)
		}
		return nil
	}
}

// classify says what a database error means: unreachable is transient;
// an answer from the database about the statement is the script's.
func classify(what string, err error) *kt.Error {
	var pg *pgconn.PgError
	var my *mysql.MySQLError
	var no refusal
	var setup setupRefusal
	switch {
	case errors.As(err, &no):
		return kt.Errorf(kt.ClassLogic, "%s: %s", what, no.msg)
	case errors.As(err, &setup):
		return kt.Errorf(kt.ClassPermission, "%s: %s", what, setup.msg)
	case errors.As(err, &pg):
		class := kt.ClassLogic
		switch {
		case strings.HasPrefix(pg.Code, "08") || strings.HasPrefix(pg.Code, "53") || strings.HasPrefix(pg.Code, "57") || pg.Code == "40001" || pg.Code == "40P01" || pg.Code == "55P03":
			class = kt.ClassTransient // connection, resources, shutdown, serialization, deadlock, lock not granted in time
		case strings.HasPrefix(pg.Code, "28") || pg.Code == "42501":
			class = kt.ClassPermission // the login refused, a privilege missing: the database's owner grants it
		}
		return kt.Errorf(class, "%s: %s (SQLSTATE %s)", what, pg.Message, pg.Code)
	case errors.As(err, &my):
		class := kt.ClassLogic
		switch my.Number {
		case 1205, 1213, 1040, 1053: // lock wait timeout, deadlock, too many connections, shutdown
			class = kt.ClassTransient
		case 1044, 1045, 1142, 1143, 1227, 1698: // access denied: the login, the database, a table, a column, a privilege
			class = kt.ClassPermission
		}
		hint := ""
		switch {
		case my.Number == 1064:
			hint = "; note that keep runs one statement at a time"
		case strings.HasPrefix(string(my.SQLState[:]), "22"):
			class = kt.ClassLogic // a data exception (SQLSTATE class 22): a value the column cannot hold, which no retry changes
			hint = "; check the statement's args"
		}
		return kt.Errorf(class, "%s: %s (error %d)%s", what, my.Message, my.Number, hint)
	case isNet(err):
		return kt.Errorf(kt.ClassTransient, "%s: the database is unreachable: %v", what, err)
	}
	if strings.Contains(err.Error(), "SQL logic error") || strings.Contains(err.Error(), "constraint failed") || strings.Contains(err.Error(), "no such") {
		return kt.Errorf(kt.ClassLogic, "%s: %v", what, err) // SQLite
	}
	return kt.Errorf(kt.ClassTransient, "%s: %v", what, err)
}

func isNet(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sql.ErrConnDone) ||
		strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "bad connection") || strings.Contains(err.Error(), "invalid connection")
}

func withFlag(res, flag string) map[string]any {
	out := map[string]any{}
	json.Unmarshal([]byte(res), &out)
	out[flag] = true
	return out
}

func (c *Conn) reconcile(ctx context.Context, call connector.Call) (connector.ReconcileStatus, any, error) {
	d, kerr := c.open(str(call.Args["db"]))
	if kerr != nil {
		return connector.ReconcileRetry, nil, kerr
	}
	if err := d.ensureTable(ctx); err != nil {
		return connector.ReconcileRetry, nil, err
	}
	res, ok, err := d.recorded(ctx, d.db, call.IdempotencyKey)
	switch {
	case err != nil:
		return connector.ReconcileRetry, nil, classify("sql.exec's reconcile on "+d.name, err)
	case ok:
		return connector.ReconcileApplied, withFlag(res, "reconciled"), nil
	}
	return connector.ReconcileFailed, nil, nil
}

func compareArgs(old, new map[string]any) connector.Comparison {
	a, _ := json.Marshal(old["args"])
	b, _ := json.Marshal(new["args"])
	if string(a) == string(b) {
		return connector.Equivalent
	}
	return connector.Significant
}
