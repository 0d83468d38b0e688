package sqlconn_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/sqlconn"
	kt "github.com/keep-run/keep/internal/keeptype"
)

func dbOf(t *testing.T, name, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driverOf(name), dsn(t, name, url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// state reads what a person would look at in the target database: the
// orders and keep's marker rows.
func state(t *testing.T, name, url string) (orders string, marks int) {
	t.Helper()
	db := dbOf(t, name, url)
	rows, err := db.Query("SELECT id, state FROM orders ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int
		var st string
		rows.Scan(&id, &st)
		orders += st + " "
	}
	rows.Close()
	if err := db.QueryRow("SELECT COUNT(*) FROM keep_mutations").Scan(&marks); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(orders), marks
}

// setUp makes orders with one row through sql.exec: two marker rows.
func setUp(t *testing.T, reg *connector.Registry, name, url string) {
	t.Helper()
	setup := []string{"CREATE TABLE orders (id INT PRIMARY KEY, state VARCHAR(20))", "INSERT INTO orders (id, state) VALUES (1, 'new')"}
	if name == "mariadb" {
		// keep refuses DDL in a MariaDB exec (it would commit keep's
		// transaction): the table is made directly, and two writes leave
		// two markers as elsewhere.
		ddl(t, name, url, setup[0])
		setup[0] = "UPDATE orders SET state = 'new' WHERE id = 1"
	}
	for i, s := range setup {
		if r := call(t, reg, "exec", map[string]any{"db": "app", "sql": s}, "setup-"+string(rune('a'+i))); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

// ddl runs a statement directly on the database, as its owner's
// migrations do (keep refuses DDL in a MariaDB sql.exec).
func ddl(t *testing.T, name, url, stmt string) {
	t.Helper()
	if _, err := dbOf(t, name, url).Exec(stmt); err != nil {
		t.Fatal(err)
	}
}

// onEachBackend runs f on every real database, each set up with orders.
func onEachBackend(t *testing.T, f func(t *testing.T, name, url string, reg *connector.Registry)) {
	for name, url := range backends(t) {
		t.Run(name, func(t *testing.T) {
			c, pools := newConn(map[string]string{"app": url})
			defer pools.Close()
			reg := connector.NewRegistry(c)
			setUp(t, reg, name, url)
			f(t, name, url, reg)
		})
	}
}

func TestAQueryNeverWrites(t *testing.T) {
	onEachBackend(t, func(t *testing.T, name, url string, reg *connector.Registry) {
		proof := filepath.Join(t.TempDir(), "copied")
		keepDB := filepath.Join(t.TempDir(), "keep.db")
		os.WriteFile(keepDB, nil, 0o600)
		attacks := []string{
			"DELETE FROM orders RETURNING id",
			"SELECT 1; UPDATE orders SET state = 'paid'",
			"SELECT 1; DELETE FROM orders",
		}
		switch name {
		case "postgres":
			attacks = append(attacks,
				"UPDATE orders SET state = 'paid' RETURNING id",
				"WITH d AS (UPDATE orders SET state = 'paid' RETURNING id) SELECT * FROM d",
				"COPY (SELECT 1) TO PROGRAM 'touch "+proof+"'",
				"SET TRANSACTION READ WRITE",
				"CREATE TABLE pwned (a INT)")
		case "mariadb":
			attacks = append(attacks,
				"CREATE TABLE pwned (a INT)", // MariaDB commits a read-only transaction before DDL
				"SELECT 1 INTO OUTFILE '"+proof+"'",
				"COMMIT")
		case "sqlite":
			attacks = append(attacks,
				"UPDATE orders SET state = 'paid' RETURNING id",
				"ATTACH '"+keepDB+"' AS k",
				"SELECT 1; ATTACH '"+keepDB+"' AS k",
				"PRAGMA query_only = 0",
				"CREATE TABLE pwned (a INT)")
		}
		for _, q := range attacks {
			r := call(t, reg, "query", map[string]any{"db": "app", "sql": q}, "")
			if r.Err == nil || r.Err.Class != kt.ClassLogic {
				t.Errorf("sql.query %q was not refused: %v %+v", q, r.Value, r.Err)
				continue
			}
			t.Logf("%s: %s", q, r.Err.Message)
		}
		if orders, marks := state(t, name, url); orders != "new" || marks != 2 {
			t.Fatalf("after the queries: orders %q and %d marker rows; want \"new\" and 2", orders, marks)
		}
		if _, err := os.Stat(proof); err == nil {
			t.Fatalf("a query wrote %s", proof)
		}
		q := call(t, reg, "query", map[string]any{"db": "app", "sql": "SELECT state FROM orders -- one statement; a comment after it is fine"}, "")
		if q.Err != nil || len(q.Value.([]any)) != 1 {
			t.Fatalf("a plain query: %v %+v", q.Value, q.Err)
		}
		for _, msg := range []string{"one statement"} {
			r := call(t, reg, "query", map[string]any{"db": "app", "sql": "SELECT 1; SELECT 2"}, "")
			if r.Err == nil || !strings.Contains(r.Err.Message, msg) && name != "mariadb" {
				t.Fatalf("two statements: %+v; want a message saying %q", r.Err, msg)
			}
		}
	})
}

func TestAnExecIsOneStatementAndLeavesKeepsMarkers(t *testing.T) {
	onEachBackend(t, func(t *testing.T, name, url string, reg *connector.Registry) {
		attacks := []string{
			"INSERT INTO orders (id, state) VALUES (2, 'x'); COMMIT; INSERT INTO orders (id, state) VALUES (3, 'y'); DELETE FROM keep_mutations",
			"COMMIT",
			"ROLLBACK",
			"BEGIN",
			"SAVEPOINT a",
			"DELETE FROM keep_mutations",
			"UPDATE keep_mutations SET result = '{}'",
			"INSERT INTO keep_mutations (idempotency_key, result, applied_at) VALUES ('forged', '{}', 0)",
		}
		switch name {
		case "postgres":
			attacks = append(attacks, "TRUNCATE keep_mutations", "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "PREPARE TRANSACTION 'x'",
				"WITH d AS (DELETE FROM keep_mutations RETURNING 1) UPDATE orders SET state = 'paid'")
		case "mariadb":
			attacks = append(attacks, "SET autocommit = 1", "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
				// DDL and a compound statement's COMMIT would commit keep's transaction (issue 38, attack)
				"TRUNCATE TABLE keep_mutations", "BEGIN NOT ATOMIC DELETE FROM keep_mutations; COMMIT; END", "CREATE TABLE made (a INT)",
				// a temporary copy standing in for the markers while the real ones are deleted
				"BEGIN NOT ATOMIC CREATE TEMPORARY TABLE t0 AS SELECT * FROM keep_mutations; DELETE FROM keep_mutations; CREATE TEMPORARY TABLE keep_mutations AS SELECT * FROM t0; END")
		case "sqlite":
			attacks = append(attacks, "ATTACH 'other.db' AS o", "PRAGMA journal_mode = OFF", "DROP TABLE keep_mutations",
				"CREATE TEMP TABLE keep_mutations (idempotency_key TEXT, result TEXT, applied_at INT)",
				"INSERT INTO orders (id, state) VALUES (5, 'x')") // fires the trigger below
		}
		if name == "sqlite" {
			// A trigger made by one exec that wipes the markers when a
			// later exec inserts: the vetter compiles that insert with
			// the trigger (its view of the schema is fresh).
			if r := call(t, reg, "exec", map[string]any{"db": "app", "sql": "CREATE TRIGGER wipe AFTER INSERT ON orders BEGIN DELETE FROM keep_mutations; END"}, "k-trigger"); r.Err == nil {
				t.Log("CREATE TRIGGER was allowed")
				if _, marks := state(t, name, url); marks != 3 {
					t.Fatalf("%d marker rows after the trigger", marks)
				}
				if _, err := dbOf(t, name, url).Exec("DELETE FROM keep_mutations WHERE idempotency_key = 'k-trigger'"); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i, q := range attacks {
			r := call(t, reg, "exec", map[string]any{"db": "app", "sql": q}, "attack-"+string(rune('a'+i)))
			if r.Outcome != connector.OutcomeFailed || r.Err == nil || r.Err.Class != kt.ClassLogic {
				t.Errorf("sql.exec %q was not refused: %v %v %+v", q, r.Outcome, r.Value, r.Err)
				continue
			}
			t.Logf("%s: %s", q, r.Err.Message)
			if orders, marks := state(t, name, url); orders != "new" || marks != 2 {
				t.Fatalf("after sql.exec %q: orders %q and %d marker rows; want \"new\" and 2", q, orders, marks)
			}
		}
		// Nothing an exec leaves in its session outlives the call: the
		// connection is closed (SQLite's temporary tables named like
		// keep's are refused above; others are harmless there).
		if name != "sqlite" {
			if r := call(t, reg, "exec", map[string]any{"db": "app", "sql": "CREATE TEMPORARY TABLE leftover (a INT)"}, "k-temp"); r.Err != nil {
				t.Fatal(r.Err)
			}
			if r := call(t, reg, "query", map[string]any{"db": "app", "sql": "SELECT a FROM leftover"}, ""); r.Err == nil {
				t.Fatal("a temporary table of an exec outlived its call")
			}
		}
		// An ordinary write still goes through, once.
		r := call(t, reg, "exec", map[string]any{"db": "app", "sql": "UPDATE orders SET state = 'paid' WHERE id = 1"}, "k-pay")
		if r.Err != nil || r.Value.(map[string]any)["rowsAffected"] != int64(1) {
			t.Fatalf("an ordinary update: %v %+v", r.Value, r.Err)
		}
		want := 3
		if name != "sqlite" {
			want = 4 // and the temporary table's
		}
		if orders, marks := state(t, name, url); orders != "paid" || marks != want {
			t.Fatalf("after the update: orders %q and %d marker rows; want \"paid\" and %d", orders, marks, want)
		}
	})
}

func TestKeepsOwnPostgresStoreIsRefused(t *testing.T) {
	store := "postgres://keep:s3cret@localhost:5432/test?search_path=keep"
	err := sqlconn.RefuseKeepsStore(map[string]string{"app": "postgres://keep:s3cret@127.0.0.1:5432/test?search_path=keep&sslmode=disable"}, "", store)
	if err == nil || !strings.Contains(err.Error(), "[connectors.sql.databases] app") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("keep's own schema as a target: %v", err)
	}
	if err := sqlconn.RefuseKeepsStore(map[string]string{"app": "postgres://keep@127.0.0.1:5432/test?search_path=shop"}, "", store); err != nil {
		t.Fatalf("another schema: %v", err)
	}
}
