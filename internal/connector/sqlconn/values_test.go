package sqlconn_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/testdb"
)

// placeholders writes $1, $2… on PostgreSQL and ? elsewhere.
func placeholders(name string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "?"
		if name == "postgres" {
			out[i] = "$" + string(rune('1'+i))
		}
	}
	return out
}

func rowsOf(t *testing.T, r connector.Result) []map[string]any {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("%+v", r.Err)
	}
	var out []map[string]any
	switch v := r.Value.(type) {
	case []any:
		for _, x := range v {
			out = append(out, x.(map[string]any))
		}
	case map[string]any:
		rs, _ := v["rows"].([]any)
		for _, x := range rs {
			out = append(out, x.(map[string]any))
		}
	}
	// What a script sees went through JSON: NaN or an unexpected Go type fails here.
	if _, err := json.Marshal(r.Value); err != nil {
		t.Fatalf("the result is not JSON: %v", err)
	}
	return out
}

// Integers beyond 2^53 come back as strings, exact, with or without args;
// an argument JavaScript cannot hold exactly is refused, never wrapped; a
// string binds exactly.
func TestBigIntegersTravelExactly(t *testing.T) {
	onEachBackend(t, func(t *testing.T, name, u string, reg *connector.Registry) {
		ph := placeholders(name, 2)
		create := "CREATE TABLE big (id INT PRIMARY KEY, n BIGINT)"
		if name == "mariadb" { // keep refuses DDL in a MariaDB exec
			ddl(t, name, u, create)
		} else if r := call(t, reg, "exec", map[string]any{"db": "app", "sql": create}, "ddl"); r.Err != nil {
			t.Fatal(r.Err)
		}
		ins := "INSERT INTO big (id, n) VALUES (" + ph[0] + ", " + ph[1] + ")"
		for i, n := range []any{"9223372036854775807", "9007199254740993", 42, -7} {
			if r := call(t, reg, "exec", map[string]any{"db": "app", "sql": ins, "args": []any{i + 1, n}}, "ins-"+string(rune('a'+i))); r.Err != nil {
				t.Fatalf("insert %v: %+v", n, r.Err)
			}
		}
		want := []any{"9223372036854775807", "9007199254740993", int64(42), int64(-7)}
		for _, args := range [][]any{nil, {0}} {
			q := map[string]any{"db": "app", "sql": "SELECT n FROM big ORDER BY id"}
			if args != nil {
				q["sql"], q["args"] = "SELECT n FROM big WHERE id > "+ph[0]+" ORDER BY id", args
			}
			rows := rowsOf(t, call(t, reg, "query", q, ""))
			for i, w := range want {
				if rows[i]["n"] != w {
					t.Fatalf("args %v: row %d n = %#v, want %#v", args, i, rows[i]["n"], w)
				}
			}
		}
		r := call(t, reg, "exec", map[string]any{"db": "app", "sql": ins, "args": []any{9, 9223372036854775808.0}}, "ins-wrap")
		if r.Err == nil || r.Err.Class != kt.ClassLogic || !strings.Contains(r.Err.Message, "as a string") {
			t.Fatalf("2**63 as an argument: %+v", r.Err)
		}
		if rows := rowsOf(t, call(t, reg, "query", map[string]any{"db": "app", "sql": "SELECT COUNT(*) AS c FROM big"}, "")); rows[0]["c"] != int64(4) {
			t.Fatalf("rows after a refused argument: %v", rows)
		}
	})
}

// MariaDB's unsigned bigint: a string beyond 2^53 whether or not the query had args.
func TestMariaDBUnsignedBigint(t *testing.T) {
	u := testdb.FreshMariaDB(t)
	c, pools := newConn(map[string]string{"app": u})
	defer pools.Close()
	reg := connector.NewRegistry(c)
	ddl(t, "mariadb", u, "CREATE TABLE u (id INT PRIMARY KEY, n BIGINT UNSIGNED)")
	for i, s := range []string{"INSERT INTO u VALUES (1, 18446744073709551615), (2, 5)"} {
		if r := call(t, reg, "exec", map[string]any{"db": "app", "sql": s}, "s"+string(rune('a'+i))); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	for _, q := range []map[string]any{{"db": "app", "sql": "SELECT n FROM u ORDER BY id"}, {"db": "app", "sql": "SELECT n FROM u WHERE id > ? ORDER BY id", "args": []any{0}}} {
		rows := rowsOf(t, call(t, reg, "query", q, ""))
		if rows[0]["n"] != "18446744073709551615" || rows[1]["n"] != int64(5) {
			t.Fatalf("%v: %#v", q, rows)
		}
	}
}

// exec returns the rows a statement returns, and a replay returns them too.
func TestExecReturnsTheStatementsRows(t *testing.T) {
	onEachBackend(t, func(t *testing.T, name, u string, reg *connector.Registry) {
		ph := placeholders(name, 2)
		ins := map[string]any{"db": "app", "sql": "INSERT INTO orders (id, state) VALUES (" + ph[0] + ", " + ph[1] + ") RETURNING id, state", "args": []any{7, "paid"}}
		for _, flag := range []string{"", "replayed"} {
			r := call(t, reg, "exec", ins, "k-ret")
			v, _ := r.Value.(map[string]any)
			rows := rowsOf(t, r)
			if v["rowsAffected"] != int64(1) && v["rowsAffected"] != float64(1) || len(rows) != 1 || rows[0]["id"] != int64(7) && rows[0]["id"] != float64(7) || rows[0]["state"] != "paid" {
				t.Fatalf("%s: %#v", flag, r.Value)
			}
			if flag != "" && v[flag] != true {
				t.Fatalf("not %s: %v", flag, v)
			}
		}
		if o, marks := state(t, name, u); o != "new paid" || marks != 3 {
			t.Fatalf("orders %q, %d marks", o, marks)
		}
		// A statement that returns no rows has no rows property.
		r := call(t, reg, "exec", map[string]any{"db": "app", "sql": "UPDATE orders SET state = 'done'"}, "k-upd")
		if v := r.Value.(map[string]any); v["rowsAffected"] != int64(2) || v["rows"] != nil {
			t.Fatalf("update: %#v %+v", r.Value, r.Err)
		}
	})
}

// An error answer to COMMIT (a deferred constraint) is an answer: not written.
func TestAnErrorAnswerToCommitIsAnAnswer(t *testing.T) {
	u := pgtest.FreshSchema(t)
	c, pools := newConn(map[string]string{"app": u})
	defer pools.Close()
	reg := connector.NewRegistry(c)
	for i, s := range []string{"CREATE TABLE parent (id INT PRIMARY KEY)",
		"CREATE TABLE child (id INT PRIMARY KEY, parent INT REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"} {
		if r := call(t, reg, "exec", map[string]any{"db": "app", "sql": s}, "s"+string(rune('a'+i))); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	ins := map[string]any{"db": "app", "sql": "INSERT INTO child VALUES (1, 99)"}
	r := call(t, reg, "exec", ins, "k-fk")
	if r.Outcome != connector.OutcomeFailed || r.Err.Class != kt.ClassLogic || !strings.Contains(r.Err.Message, "23503") || strings.Contains(r.Err.Message, "may have") {
		t.Fatalf("a deferred foreign key refused at COMMIT: %v %+v", r.Outcome, r.Err)
	}
	m, _ := reg.Method("sql", "exec")
	if st, _, err := m.Reconcile(context.Background(), connector.Call{Args: ins, IdempotencyKey: "k-fk"}); st != connector.ReconcileFailed {
		t.Fatalf("reconcile: %s %v", st, err)
	}
}

// Types travel as docs/scripts.md says, and what a query returns can be written back.
func TestPostgresValuesTravelAsTheyAre(t *testing.T) {
	u := pgtest.FreshSchema(t)
	c, pools := newConn(map[string]string{"app": u})
	defer pools.Close()
	reg := connector.NewRegistry(c)
	ddl := "CREATE TABLE v (id INT PRIMARY KEY, ts TIMESTAMP, tz TIMESTAMPTZ, d DATE, j JSON, jb JSONB, b BYTEA, f FLOAT8, num NUMERIC)"
	if r := call(t, reg, "exec", map[string]any{"db": "app", "sql": ddl}, "ddl"); r.Err != nil {
		t.Fatal(r.Err)
	}
	ins := `INSERT INTO v VALUES (1, '2024-03-01 10:30:00.5', '2024-03-01 10:30:00+02', '2024-03-01', '{"a": [1, "x"]}', '{"b": true}', '\x0080ff41', 'NaN', 12345678901234567890.5)`
	if r := call(t, reg, "exec", map[string]any{"db": "app", "sql": ins}, "ins"); r.Err != nil {
		t.Fatal(r.Err)
	}
	rows := rowsOf(t, call(t, reg, "query", map[string]any{"db": "app", "sql": "SELECT ts, tz, d, j, jb, b, f, num FROM v"}, ""))
	got, _ := json.Marshal(rows[0])
	want := `{"b":{"base64":"AID/QQ=="},"d":"2024-03-01","f":"NaN","j":{"a":[1,"x"]},"jb":{"b":true},"num":"12345678901234567890.5","ts":"2024-03-01T10:30:00.5","tz":"2024-03-01T08:30:00Z"}`
	if string(got) != want {
		t.Fatalf("a row came back as\n%s\nwant\n%s", got, want)
	}
	// Written back as read: the same values.
	back := map[string]any{"db": "app", "sql": "INSERT INTO v (id, ts, tz, d, b, f, num) VALUES (2, $1, $2, $3, $4, $5, $6)", "args": []any{rows[0]["ts"], rows[0]["tz"], rows[0]["d"], rows[0]["b"], rows[0]["f"], rows[0]["num"]}}
	if r := call(t, reg, "exec", back, "back"); r.Err != nil {
		t.Fatalf("writing back what was read: %+v", r.Err)
	}
	again := rowsOf(t, call(t, reg, "query", map[string]any{"db": "app", "sql": "SELECT ts, tz, d, b, f, num FROM v WHERE id = 2"}, ""))
	for _, k := range []string{"ts", "tz", "d", "b", "f", "num"} {
		a, _ := json.Marshal(again[0][k])
		b, _ := json.Marshal(rows[0][k])
		if string(a) != string(b) {
			t.Fatalf("%s written back as %s, read %s", k, a, b)
		}
	}
}

func TestMariaDBValuesTravelAsTheyAre(t *testing.T) {
	u := testdb.FreshMariaDB(t)
	c, pools := newConn(map[string]string{"app": u})
	defer pools.Close()
	reg := connector.NewRegistry(c)
	ddl(t, "mariadb", u, "CREATE TABLE v (id INT PRIMARY KEY, dt DATETIME(6), d DATE, b VARBINARY(16), t TEXT, num DECIMAL(30,1))")
	ins := "INSERT INTO v VALUES (1, '2024-03-01 10:30:00.5', '2024-03-01', X'0080ff41', 'héllo', 12345678901234567890.5)"
	if r := call(t, reg, "exec", map[string]any{"db": "app", "sql": ins}, "ins"); r.Err != nil {
		t.Fatal(r.Err)
	}
	for _, q := range []map[string]any{{"db": "app", "sql": "SELECT dt, d, b, t, num FROM v"}, {"db": "app", "sql": "SELECT dt, d, b, t, num FROM v WHERE id = ?", "args": []any{1}}} {
		rows := rowsOf(t, call(t, reg, "query", q, ""))
		got, _ := json.Marshal(rows[0])
		want := `{"b":{"base64":"AID/QQ=="},"d":"2024-03-01","dt":"2024-03-01T10:30:00.5","num":"12345678901234567890.5","t":"héllo"}`
		if string(got) != want {
			t.Fatalf("%v came back as\n%s\nwant\n%s", q["args"], got, want)
		}
		back := map[string]any{"db": "app", "sql": "INSERT INTO v (id, dt, d, b) VALUES (2, ?, ?, ?)", "args": []any{rows[0]["dt"], rows[0]["d"], rows[0]["b"]}}
		if r := call(t, reg, "exec", back, "back"); r.Err != nil {
			t.Fatalf("writing back what was read: %+v", r.Err)
		}
		again := rowsOf(t, call(t, reg, "query", map[string]any{"db": "app", "sql": "SELECT dt, d, b FROM v WHERE id = 2"}, ""))
		for _, k := range []string{"dt", "d", "b"} {
			a, _ := json.Marshal(again[0][k])
			b, _ := json.Marshal(rows[0][k])
			if string(a) != string(b) {
				t.Fatalf("%s written back as %s, read %s", k, a, b)
			}
		}
	}
}

// Limits and refusals are not retried as transient; a login failure is a person's.
func TestLimitsAndLoginsAreClassified(t *testing.T) {
	onEachBackend(t, func(t *testing.T, name, u string, reg *connector.Registry) {
		big := map[string]string{
			"postgres": "SELECT g FROM generate_series(1, 10001) AS g",
			"mariadb":  "SELECT seq AS g FROM seq_1_to_10001",
			"sqlite":   "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < 10001) SELECT g FROM s",
		}[name]
		if r := call(t, reg, "query", map[string]any{"db": "app", "sql": big}, ""); r.Err == nil || r.Err.Class != kt.ClassLogic || !strings.Contains(r.Err.Message, "LIMIT") {
			t.Fatalf("10001 rows: %+v", r.Err)
		}
		wide := map[string]string{
			"postgres": "SELECT repeat('x', 1048576) AS s FROM generate_series(1, 40)",
			"mariadb":  "SELECT REPEAT('x', 1048576) AS s FROM seq_1_to_40",
			"sqlite":   "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < 40) SELECT printf('%.*c', 1048576, 'x') AS s FROM s",
		}[name]
		if r := call(t, reg, "query", map[string]any{"db": "app", "sql": wide}, ""); r.Err == nil || r.Err.Class != kt.ClassLogic || !strings.Contains(r.Err.Message, "MiB") {
			t.Fatalf("a 40 MiB result: %+v", r.Err)
		}
	})
	for name, bad := range map[string]string{
		"postgres": strings.Replace(pgtest.URL(), "postgres://", "postgres://no_such_role_keep@", 1),
		"mariadb":  strings.Replace(testdb.MariaDBURL(), "mysql://root@", "mysql://root:"+url.QueryEscape("wrong-password")+"@", 1),
	} {
		c, pools := newConn(map[string]string{"app": bad})
		reg := connector.NewRegistry(c)
		r := call(t, reg, "query", map[string]any{"db": "app", "sql": "SELECT 1 AS one"}, "")
		pools.Close()
		if r.Err == nil || r.Err.Class != kt.ClassPermission {
			t.Fatalf("%s: a refused login: %+v", name, r.Err)
		}
	}
}

// PostgreSQL's lock_timeout is the same condition as MariaDB's lock wait timeout: transient.
func TestPostgresLockTimeoutIsTransient(t *testing.T) {
	u := pgtest.FreshSchema(t)
	c, pools := newConn(map[string]string{"app": u + "&options=" + "-c%20lock_timeout%3D50"})
	defer pools.Close()
	reg := connector.NewRegistry(c)
	setUp(t, reg, "postgres", u)
	holder := dbOf(t, "postgres", u)
	tx, err := holder.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	r := call(t, reg, "exec", map[string]any{"db": "app", "sql": "UPDATE orders SET state = 'x'"}, "k-lock")
	if r.Err == nil || r.Err.Class != kt.ClassTransient || !strings.Contains(r.Err.Message, "55P03") {
		t.Fatalf("a lock not granted in lock_timeout: %+v", r.Err)
	}
}
