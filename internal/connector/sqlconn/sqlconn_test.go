package sqlconn_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/sqlconn"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/testdb"
)

// backends are the real databases the connector is tried against.
func backends(t *testing.T) map[string]string {
	return map[string]string{
		"postgres": pgtest.FreshSchema(t),
		"mariadb":  testdb.FreshMariaDB(t),
		"sqlite":   "sqlite://" + filepath.Join(t.TempDir(), "app.db"),
	}
}

func call(t *testing.T, reg *connector.Registry, method string, args map[string]any, key string) connector.Result {
	t.Helper()
	m, err := reg.Method("sql", method)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(args)
	args, _ = connector.DecodeArgs(b)
	if err := m.Validate(args); err != nil {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: kt.Errorf(kt.ClassLogic, "%v", err)}
	}
	return m.Do(context.Background(), connector.Call{Args: args, IdempotencyKey: key})
}

func TestExecIsExactlyOnceOnEveryDatabase(t *testing.T) {
	for name, url := range backends(t) {
		t.Run(name, func(t *testing.T) {
			c, pools := newConn(map[string]string{"app": url})
			defer pools.Close()
			reg := connector.NewRegistry(c)
			ph := func(n string) string {
				if name == "postgres" {
					return "$" + n
				}
				return "?"
			}
			const create = "CREATE TABLE orders (id INT PRIMARY KEY, state VARCHAR(20))"
			if name == "mariadb" { // keep refuses DDL in a MariaDB exec
				ddl(t, name, url, create)
			} else if r := call(t, reg, "exec", map[string]any{"db": "app", "sql": create}, "k-ddl"); r.Err != nil {
				t.Fatal(r.Err)
			}
			ins := map[string]any{"db": "app", "sql": "INSERT INTO orders (id, state) VALUES (" + ph("1") + ", " + ph("2") + ")", "args": []any{1, "new"}}
			r := call(t, reg, "exec", ins, "k1")
			if r.Outcome != connector.OutcomeApplied || r.Value.(map[string]any)["rowsAffected"] != int64(1) {
				t.Fatalf("insert: %+v %v", r.Err, r.Value)
			}
			// A second attempt of the same write: the row in keep_mutations answers; no second insert.
			r = call(t, reg, "exec", ins, "k1")
			if r.Outcome != connector.OutcomeApplied || r.Value.(map[string]any)["replayed"] != true {
				t.Fatalf("replay: %+v %v", r.Err, r.Value)
			}
			m, _ := reg.Method("sql", "exec")
			st, v, err := m.Reconcile(context.Background(), connector.Call{Args: ins, IdempotencyKey: "k1"})
			if err != nil || st != connector.ReconcileApplied || v.(map[string]any)["reconciled"] != true {
				t.Fatalf("reconcile of a committed write: %s %v %v", st, v, err)
			}
			if st, _, _ := m.Reconcile(context.Background(), connector.Call{Args: ins, IdempotencyKey: "never"}); st != connector.ReconcileFailed {
				t.Fatalf("reconcile of a write never made: %s", st)
			}
			// A constraint violation: logic, rolled back, no marker row.
			dup := map[string]any{"db": "app", "sql": ins["sql"], "args": []any{1, "again"}}
			r = call(t, reg, "exec", dup, "k2")
			if r.Outcome != connector.OutcomeFailed || r.Err.Class != kt.ClassLogic {
				t.Fatalf("duplicate key: %v %+v", r.Outcome, r.Err)
			}
			if st, _, _ := m.Reconcile(context.Background(), connector.Call{Args: dup, IdempotencyKey: "k2"}); st != connector.ReconcileFailed {
				t.Fatalf("a rolled-back write reconciled as %s", st)
			}
			q := call(t, reg, "query", map[string]any{"db": "app", "sql": "SELECT id, state FROM orders WHERE id = " + ph("1"), "args": []any{1}}, "")
			b, _ := json.Marshal(q.Value)
			if q.Err != nil || string(b) != `[{"id":1,"state":"new"}]` {
				t.Fatalf("query: %v %s", q.Err, b)
			}
			if r := call(t, reg, "query", map[string]any{"db": "app", "sql": "SELEC nonsense"}, ""); r.Err == nil || r.Err.Class != kt.ClassLogic {
				t.Fatalf("a bad statement: %+v", r.Err)
			}
			if r := call(t, reg, "query", map[string]any{"db": "nope", "sql": "SELECT 1"}, ""); r.Err == nil || !strings.Contains(r.Err.Message, `no database "nope"`) || !strings.Contains(r.Err.Message, "app") {
				t.Fatalf("an unknown database: %+v", r.Err)
			}
			db, _ := sql.Open(driverOf(name), dsn(t, name, url))
			defer db.Close()
			var n int
			db.QueryRow("SELECT COUNT(*) FROM orders").Scan(&n)
			var marks int
			db.QueryRow("SELECT COUNT(*) FROM keep_mutations").Scan(&marks)
			want := 2 // the table and the insert
			if name == "mariadb" {
				want = 1 // the table was made directly
			}
			if n != 1 || marks != want {
				t.Fatalf("%d orders and %d marker rows; want 1 and %d", n, marks, want)
			}
		})
	}
}

func TestAnUnreachableDatabaseIsTransient(t *testing.T) {
	c, pools := newConn(map[string]string{"gone": "postgres://127.0.0.1:1/x?connect_timeout=2", "gone2": "mysql://root@127.0.0.1:1/x"})
	defer pools.Close()
	reg := connector.NewRegistry(c)
	for _, db := range []string{"gone", "gone2"} {
		r := call(t, reg, "exec", map[string]any{"db": db, "sql": "UPDATE x SET y = 1"}, "k")
		if r.Outcome != connector.OutcomeFailed || r.Err.Class != kt.ClassTransient {
			t.Fatalf("%s: %v %+v", db, r.Outcome, r.Err)
		}
	}
}

// newConn is the connector over dbs, whose test roles (root on the
// machine's PostgreSQL and MariaDB) are allowed their superuser rights:
// the tests of what a role without them meets are in reach_test.go.
func newConn(dbs map[string]string) (*connector.Connector, *sqlconn.Conn) {
	allow := map[string][]string{}
	for n := range dbs {
		allow[n] = []string{sqlconn.AllowSuperuser}
	}
	return sqlconn.New(dbs, sqlconn.Allow(allow))
}

// An argument PostgreSQL's parameter type cannot hold is refused by pgx in
// keep's process, before anything is sent: a logic error naming the
// argument, in a query and in an exec (issue 40 #8). It was transient.
func TestAnArgumentThatCannotBeEncodedIsALogicErrorNamingIt(t *testing.T) {
	c, pools := newConn(map[string]string{"app": pgtest.FreshSchema(t)})
	defer pools.Close()
	reg := connector.NewRegistry(c)
	if r := call(t, reg, "exec", map[string]any{"db": "app", "sql": "CREATE TABLE nums (id INT PRIMARY KEY, n INT)"}, "k-ddl"); r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, tc := range []struct{ method, sql string }{
		{"query", "SELECT n FROM nums WHERE id = $1 AND n = $2"},
		{"exec", "INSERT INTO nums (id, n) VALUES ($1, $2)"},
	} {
		r := call(t, reg, tc.method, map[string]any{"db": "app", "sql": tc.sql, "args": []any{1, 2147483653}}, "k-"+tc.method)
		if r.Err == nil || r.Err.Class != kt.ClassLogic || !strings.Contains(r.Err.Message, "args[1] (2147483653)") || !strings.Contains(r.Err.Message, "$2, a PostgreSQL int4") {
			t.Fatalf("%s with 2^31+5 for an int: %+v", tc.method, r.Err)
		}
	}
	// The same statement with arguments that fit runs.
	if r := call(t, reg, "exec", map[string]any{"db": "app", "sql": "INSERT INTO nums (id, n) VALUES ($1, $2)", "args": []any{1, 5}}, "k-ok"); r.Err != nil {
		t.Fatal(r.Err)
	}
}
