package sqlconn_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	_ "github.com/keep-run/keep/internal/connector/builtin" // registers [connectors.sql]
	"github.com/keep-run/keep/internal/connector/sqlconn"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testdb"
)

// freshPGDatabase makes a database of the test's own on the machine's
// PostgreSQL (and a role without superuser rights that owns it), dropped
// when the test ends. It returns the database's URL as the machine's root
// role and as the test's role.
func freshPGDatabase(t *testing.T) (asRoot, asRole, name string) {
	t.Helper()
	pgtest.FreshSchema(t) // skips the test where there is no PostgreSQL
	admin, err := sql.Open("pgx", pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	var b [5]byte
	rand.Read(b[:])
	name = "keep_attack_" + hex.EncodeToString(b[:])
	for _, s := range []string{"CREATE ROLE " + name + " LOGIN", "CREATE DATABASE " + name + " OWNER " + name} {
		if _, err := admin.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		admin.Exec("DROP DATABASE " + name + " WITH (FORCE)")
		admin.Exec("DROP ROLE " + name)
		admin.Close()
	})
	u, _ := url.Parse(pgtest.URL())
	u.Path = "/" + name
	asRoot = u.String()
	u.User = url.User(name)
	return asRoot, u.String(), name
}

func exec1(t *testing.T, dsnURL, stmt string) {
	t.Helper()
	db, err := sql.Open("pgx", dsnURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

func refusedSaying(t *testing.T, r connector.Result, what string, says ...string) {
	t.Helper()
	// A statement's refusal is the script's (logic); a database declared
	// as keep will not use it is keep.toml's (permission: the run waits).
	if r.Err == nil || (r.Err.Class != kt.ClassLogic && r.Err.Class != kt.ClassPermission) {
		t.Fatalf("%s was not refused: %v %+v", what, r.Value, r.Err)
	}
	for _, s := range says {
		if !strings.Contains(r.Err.Message, s) {
			t.Fatalf("%s: the refusal does not say %q: %s", what, s, r.Err.Message)
		}
	}
}

// A statement on a database with dblink or postgres_fdw reaches other
// databases, keep's store among them (issue 38 #3): a read through dblink
// read keep's grants, a dblink_exec wrote them. keep refuses every
// statement there, in query and in exec, naming the extension and the
// keep.toml line that allows it knowingly; a role with superuser rights
// is refused the same way.
func TestAConnectionElsewhereIsRefused(t *testing.T) {
	asRoot, asRole, name := freshPGDatabase(t)
	exec1(t, asRoot, "CREATE EXTENSION dblink")
	exec1(t, asRoot, "CREATE EXTENSION postgres_fdw")
	// What the dblink_exec below would write: a table in the test's own
	// schema of another database (keep's store's stand-in).
	other := pgtest.FreshSchema(t)
	ou, _ := url.Parse(other)
	schema := ou.Query().Get("search_path")
	exec1(t, other, "CREATE TABLE grants (item TEXT)")
	remote := fmt.Sprintf("host=127.0.0.1 port=5432 dbname=%s user=root", strings.TrimPrefix(ou.Path, "/"))
	read := fmt.Sprintf("SELECT * FROM dblink('%s', 'SELECT count(*) FROM %s.grants') AS t(n bigint)", remote, schema)
	write := fmt.Sprintf("SELECT dblink_exec('%s', 'INSERT INTO %s.grants VALUES (''*'')')", remote, schema)
	written := func() int {
		var n int
		if err := dbOf(t, "postgres", other).QueryRow("SELECT count(*) FROM grants").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// root, superuser allowed knowingly: the extensions are still refused.
	c, pools := sqlconn.New(map[string]string{"shop": asRoot}, sqlconn.Allow(map[string][]string{"shop": {"superuser"}}))
	defer pools.Close()
	reg := connector.NewRegistry(c)
	refusedSaying(t, call(t, reg, "query", map[string]any{"db": "shop", "sql": read}, ""), "a read through dblink",
		"dblink, postgres_fdw", `[connectors.sql.allow] shop = ["dblink", "postgres_fdw"]`)
	r := call(t, reg, "exec", map[string]any{"db": "shop", "sql": write}, "k-write")
	refusedSaying(t, r, "a write through dblink_exec", "dblink")
	if r.Outcome != connector.OutcomeFailed {
		t.Fatalf("the refused exec's outcome: %v", r.Outcome)
	}
	if n := written(); n != 0 {
		t.Fatalf("dblink_exec wrote %d rows in the other database", n)
	}

	// The test's role, without superuser rights, on the same database:
	// refused for the extensions.
	c2, pools2 := sqlconn.New(map[string]string{"shop": asRole})
	defer pools2.Close()
	refusedSaying(t, call(t, connector.NewRegistry(c2), "query", map[string]any{"db": "shop", "sql": "SELECT 1 AS one"}, ""), "a read on a database with dblink", "dblink")

	// root without the allowance: refused for its rights first.
	c3, pools3 := sqlconn.New(map[string]string{"shop": asRoot})
	defer pools3.Close()
	refusedSaying(t, call(t, connector.NewRegistry(c3), "query", map[string]any{"db": "shop", "sql": "SELECT 1 AS one"}, ""), "a read as root",
		`role "root" has superuser`, `[connectors.sql.allow] shop = ["superuser"]`)

	// A role granted a server-file function is refused the same way: it
	// reads keep's files where the server runs as keep's user.
	exec1(t, asRoot, "GRANT EXECUTE ON FUNCTION pg_read_file(text) TO "+name)
	refusedSaying(t, call(t, connector.NewRegistry(c2), "query", map[string]any{"db": "shop", "sql": "SELECT 1 AS one"}, ""), "a role that may read server files",
		"EXECUTE on pg_read_file", `[connectors.sql.allow] shop = ["superuser"]`)
	exec1(t, asRoot, "REVOKE EXECUTE ON FUNCTION pg_read_file(text) FROM "+name)

	// Once the extensions are gone, the role's reads go through; allowed
	// knowingly, dblink works (the refusal above was keep's, not the setup's).
	exec1(t, asRoot, "DROP EXTENSION postgres_fdw")
	exec1(t, asRoot, "DROP EXTENSION dblink")
	if r := call(t, connector.NewRegistry(c2), "query", map[string]any{"db": "shop", "sql": "SELECT 1 AS one"}, ""); r.Err != nil {
		t.Fatalf("a read on %s without the extensions: %+v", name, r.Err)
	}
	// A role that may not make temporary objects cannot have its reads
	// judged: refused, saying what to grant.
	exec1(t, asRoot, "REVOKE TEMPORARY ON DATABASE "+name+" FROM PUBLIC, "+name)
	refusedSaying(t, call(t, connector.NewRegistry(c2), "query", map[string]any{"db": "shop", "sql": "SELECT 1 AS one"}, ""), "a read without TEMPORARY", "GRANT TEMPORARY ON DATABASE", name)
	exec1(t, asRoot, "GRANT TEMPORARY ON DATABASE "+name+" TO PUBLIC, "+name)
	exec1(t, asRoot, "CREATE EXTENSION dblink")
	c4, pools4 := sqlconn.New(map[string]string{"shop": asRoot}, sqlconn.Allow(map[string][]string{"shop": {"superuser", "dblink"}}))
	defer pools4.Close()
	reg4 := connector.NewRegistry(c4)
	// dblink allowed knowingly: a read still calls no VOLATILE function,
	// and an exec through dblink_exec is the person's choice.
	refusedSaying(t, call(t, reg4, "query", map[string]any{"db": "shop", "sql": read}, ""), "a read through dblink allowed", "public.dblink", "VOLATILE")
	if r := call(t, reg4, "exec", map[string]any{"db": "shop", "sql": write}, "k-allowed"); r.Err != nil || written() != 1 {
		t.Fatalf("dblink allowed knowingly: %+v, %d rows written", r.Err, written())
	}
}

// keep's own PostgreSQL store is judged by identity, not by the URL's
// text: another host name for the same server, another search_path, the
// same database; refused when the declared role may use keep's schema,
// and on any database of that server as keep's store's own role.
func TestKeepsOwnPostgresStoreIsRefusedByIdentity(t *testing.T) {
	store := pgtest.FreshSchema(t)
	su, _ := url.Parse(store)
	same := "postgres://localhost:5432" + su.Path + "?sslmode=disable&search_path=public"
	if err := sqlconn.RefuseKeepsStore(map[string]string{"app": same}, "", store); err != nil {
		t.Fatalf("the text differs, so the start check lets it by (the call judges it): %v", err)
	}
	asRoot, asRole, _ := freshPGDatabase(t)
	roleSameDB, _ := url.Parse(asRole)
	roleSameDB.Path = su.Path
	dbs := map[string]string{"same": same, "tokyo": same + "&timezone=Asia/Tokyo&datestyle=SQL", "elsewhere": strings.Replace(asRole, "127.0.0.1", "localhost", 1), "nousage": roleSameDB.String()}
	dbs["samerole"] = asRoot
	c, pools := sqlconn.New(dbs, sqlconn.Allow(map[string][]string{"same": {"superuser"}, "tokyo": {"superuser"}, "samerole": {"superuser"}}), sqlconn.KeepsStore(store))
	defer pools.Close()
	reg := connector.NewRegistry(c)
	refusedSaying(t, call(t, reg, "query", map[string]any{"db": "same", "sql": "SELECT 1 AS one"}, ""), "a read on keep's store", "keep's own store")
	refusedSaying(t, call(t, reg, "query", map[string]any{"db": "tokyo", "sql": "SELECT 1 AS one"}, ""), "a read on keep's store in another time zone", "keep's own store")
	// Another database of the server, as keep's store's own role: a
	// statement could end keep's sessions or ALTER ROLE its settings.
	// (The statement is harmless: the test's role is the machine's root.)
	refusedSaying(t, call(t, reg, "exec", map[string]any{"db": "samerole", "sql": "CREATE TABLE harmless (a INT)"}, "k3"), "keep's role elsewhere", "the role keep's store uses")
	refusedSaying(t, call(t, reg, "exec", map[string]any{"db": "same", "sql": "CREATE TABLE x (a INT)"}, "k1"), "an exec on keep's store", "keep's own store")
	// keep makes nothing there either: no keep_mutations in keep's schema.
	schema := su.Query().Get("search_path")
	c2, pools2 := sqlconn.New(map[string]string{"inkeep": "postgres://localhost:5432" + su.Path + "?sslmode=disable&search_path=" + schema},
		sqlconn.Allow(map[string][]string{"inkeep": {"superuser"}}), sqlconn.KeepsStore(store))
	defer pools2.Close()
	refusedSaying(t, call(t, connector.NewRegistry(c2), "exec", map[string]any{"db": "inkeep", "sql": "DELETE FROM grants"}, "k2"), "an exec in keep's schema", "keep's own store")
	var made bool
	if err := dbOf(t, "postgres", store).QueryRow("SELECT to_regclass($1) IS NOT NULL", schema+".keep_mutations").Scan(&made); err != nil || made {
		t.Fatalf("keep made keep_mutations in its own store's schema: %v %v", made, err)
	}
	for _, db := range []string{"elsewhere", "nousage"} {
		if r := call(t, reg, "query", map[string]any{"db": db, "sql": "SELECT 1 AS one"}, ""); r.Err != nil {
			t.Fatalf("%s: %+v", db, r.Err)
		}
	}
}

// A read leaves nothing in its session (issue 38 #5): an advisory lock
// taken by PostgreSQL's pg_advisory_lock or MariaDB's GET_LOCK outlived
// the query in the pool's connection, and set_config changed the next
// read's search_path.
func TestAReadLeavesNothingInItsSession(t *testing.T) {
	for name, u := range map[string]string{"postgres": pgtest.FreshSchema(t), "mariadb": testdb.FreshMariaDB(t)} {
		t.Run(name, func(t *testing.T) {
			c, pools := newConn(map[string]string{"app": u})
			defer pools.Close()
			reg := connector.NewRegistry(c)
			// A function its owner declared STABLE is taken at its word
			// (volatile.go); what it leaves in the session dies with it.
			lock, free := "SELECT stable_lock(4242) AS l", "SELECT pg_try_advisory_lock(4242)"
			if name == "postgres" {
				if _, err := dbOf(t, name, u).Exec("CREATE FUNCTION stable_lock(bigint) RETURNS void STABLE LANGUAGE sql AS 'SELECT pg_advisory_lock($1)'"); err != nil {
					t.Fatal(err)
				}
			}
			if name == "mariadb" {
				lock, free = "SELECT GET_LOCK('keep-test-4242', 0) AS l", "SELECT IS_FREE_LOCK('keep-test-4242')"
			}
			if r := call(t, reg, "query", map[string]any{"db": "app", "sql": lock}, ""); r.Err != nil {
				t.Fatal(r.Err)
			}
			// The read ends its session; the server ends its side
			// after (a PostgreSQL backend exits, a MariaDB thread is
			// reaped, each then letting its locks go), so the lock is
			// looked for until it is free: one kept in a pooled session
			// is never.
			other := dbOf(t, name, u)
			deadline := time.Now().Add(testbin.Patience())
			for {
				var ok bool
				err := other.QueryRow(free).Scan(&ok)
				if err == nil && ok {
					break
				}
				if err != nil || time.Now().After(deadline) {
					t.Fatalf("the lock a read took is still held after it: %v %v", ok, err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// A PostgreSQL read calls only what PostgreSQL's catalog marks IMMUTABLE
// or STABLE (issue 38 #5): a read-only transaction let pg_terminate_backend
// end another session, pg_advisory_xact_lock, set_config and pg_notify
// act. Judged by the functions PostgreSQL resolves the statement to call,
// through views and operators too; random() and the clock are allowed.
func TestAPostgresReadCallsNoVolatileFunction(t *testing.T) {
	u := pgtest.FreshSchema(t)
	c, pools := newConn(map[string]string{"app": u})
	defer pools.Close()
	reg := connector.NewRegistry(c)
	setUp(t, reg, "postgres", u)
	admin := dbOf(t, "postgres", u)
	for _, s := range []string{
		"CREATE SEQUENCE seq",
		"CREATE VIEW locking AS SELECT pg_try_advisory_lock(7) AS l",
		"CREATE VIEW over_locking AS SELECT * FROM locking",
		"CREATE FUNCTION noisy(int, int) RETURNS boolean VOLATILE LANGUAGE sql AS 'SELECT pg_notify(''c'', ''x'') IS NULL'",
		"CREATE OPERATOR === (LEFTARG = int, RIGHTARG = int, FUNCTION = noisy)",
		"CREATE TABLE guarded (a INT)",
		"ALTER TABLE guarded ENABLE ROW LEVEL SECURITY",
		"CREATE POLICY p ON guarded FOR SELECT USING (pg_try_advisory_lock(9))",
		"CREATE FUNCTION locking_step(bigint, bigint) RETURNS bigint VOLATILE LANGUAGE sql AS 'SELECT $1 + $2 + (pg_try_advisory_lock(11))::int'",
		"CREATE AGGREGATE locking_sum(bigint) (SFUNC = locking_step, STYPE = bigint, INITCOND = '0')",
		"CREATE DOMAIN locked_int AS int CHECK (pg_try_advisory_lock(VALUE))",
	} {
		if _, err := admin.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	victim, err := admin.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	var pid int
	victim.QueryRowContext(context.Background(), "SELECT pg_backend_pid()").Scan(&pid)
	for _, q := range []struct {
		sql  string
		args []any
		says string
	}{
		{"SELECT pg_terminate_backend($1) AS t", []any{pid}, "pg_catalog.pg_terminate_backend"},
		{"SELECT pg_advisory_xact_lock(1) AS l", nil, "pg_advisory_xact_lock"},
		{"SELECT set_config('search_path', 'nowhere', false) AS s", nil, "set_config"},
		{"SELECT nextval('seq') AS n", nil, "nextval"},
		{"SELECT pg_notify('c', 'x') AS n", nil, "pg_notify"},
		{"SELECT state FROM orders WHERE id = $1 AND (SELECT pg_sleep(0)) IS NULL", []any{1}, "pg_sleep"},
		{"SELECT * FROM over_locking", nil, "pg_try_advisory_lock"},
		{"SELECT id FROM orders WHERE id === 1", nil, "noisy"},
		{"SELECT count(*) FROM orders WHERE EXISTS (SELECT 1 FROM guarded)", nil, "pg_try_advisory_lock"},
		{"SELECT locking_sum(id) AS s FROM orders", nil, "locking_step"},
		{"SELECT 5::locked_int AS d", nil, "pg_try_advisory_lock"},
		{"SELECT $1::locked_int AS d", []any{6}, "pg_try_advisory_lock"},
		{"SELECT count(*) FROM orders GROUP BY id HAVING max(pg_backend_pid()) > 0 AND bool_and(pg_try_advisory_lock(id))", nil, "pg_try_advisory_lock"},
		{"EXPLAIN ANALYZE SELECT pg_advisory_lock(1)", nil, "cannot take this statement"},
		// text that would close the function body keep has PostgreSQL parse
		{"SELECT $$ ; END; $$ AS a, pg_try_advisory_lock(1) AS l", nil, "pg_try_advisory_lock"},
		{"SELECT pg_try_advisory_lock(1) AS l -- END", nil, "pg_try_advisory_lock"},
		{"SELECT pg_try_advisory_lock(1) AS l;", nil, "pg_try_advisory_lock"},
	} {
		r := call(t, reg, "query", map[string]any{"db": "app", "sql": q.sql, "args": q.args}, "")
		refusedSaying(t, r, q.sql, q.says)
		t.Logf("%s: %s", q.sql, r.Err.Message)
	}
	if err := victim.PingContext(context.Background()); err != nil {
		t.Fatalf("the other session was ended: %v", err)
	}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"SELECT random() AS r, now() AS n, gen_random_uuid() AS u, clock_timestamp() AS c", nil},
		{"SELECT upper(state) AS s, count(*) OVER () AS n FROM orders WHERE id = $1", []any{1}},
		{"WITH o AS (SELECT id FROM orders) SELECT count(*) AS n FROM o JOIN pg_class ON true", nil},
		{"VALUES (1 + 2, 'a' || $1)", []any{"b"}},
	} {
		if r := call(t, reg, "query", map[string]any{"db": "app", "sql": q.sql, "args": q.args}, ""); r.Err != nil {
			t.Fatalf("%s: %+v", q.sql, r.Err)
		}
	}
}

// MariaDB's OPTIMIZE, ANALYZE, CHECK and REPAIR TABLE return rows and run
// in a read-only transaction (which they end): a read is what the server
// can EXPLAIN.
func TestAMariaDBReadIsWhatTheServerExplains(t *testing.T) {
	u := testdb.FreshMariaDB(t)
	c, pools := newConn(map[string]string{"app": u})
	defer pools.Close()
	reg := connector.NewRegistry(c)
	setUp(t, reg, "mariadb", u)
	for _, q := range []string{"OPTIMIZE TABLE orders", "ANALYZE TABLE orders", "CHECK TABLE orders", "REPAIR TABLE orders"} {
		refusedSaying(t, call(t, reg, "query", map[string]any{"db": "app", "sql": q}, ""), q, "EXPLAIN")
	}
	for _, q := range []string{"SELECT state FROM orders", "WITH o AS (SELECT state FROM orders) SELECT state FROM o"} {
		if r := call(t, reg, "query", map[string]any{"db": "app", "sql": q}, ""); r.Err != nil {
			t.Fatalf("%s: %+v", q, r.Err)
		}
	}
}

// A MariaDB server that offers FEDERATED (a table that is another
// server's) is refused: an exec made a FEDERATED table on keep's stand-in
// and wrote it. So is a user with SUPER or FILE, unless allowed knowingly.
func TestMariaDBFederatedIsRefused(t *testing.T) {
	u := testdb.FreshMariaDB(t)
	other := testdb.FreshMariaDB(t)
	admin := dbOf(t, "mariadb", u)
	c0, pools0 := sqlconn.New(map[string]string{"app": u})
	defer pools0.Close()
	refusedSaying(t, call(t, connector.NewRegistry(c0), "query", map[string]any{"db": "app", "sql": "SELECT 1 AS one"}, ""), "a read as root",
		"SUPER", `[connectors.sql.allow] app = ["superuser"]`)

	var installed int
	admin.QueryRow("SELECT COUNT(*) FROM information_schema.ENGINES WHERE ENGINE = 'FEDERATED' AND SUPPORT IN ('YES', 'DEFAULT')").Scan(&installed)
	if installed == 0 {
		if _, err := admin.Exec("INSTALL SONAME 'ha_federatedx'"); err != nil {
			t.Skipf("FEDERATED cannot be installed here: %v", err)
		}
		t.Cleanup(func() { admin.Exec("UNINSTALL SONAME 'ha_federatedx'") })
	}
	ou, _ := url.Parse(other)
	if _, err := dbOf(t, "mariadb", other).Exec("CREATE TABLE grants (item VARCHAR(20))"); err != nil {
		t.Fatal(err)
	}
	c, pools := newConn(map[string]string{"app": u})
	defer pools.Close()
	reg := connector.NewRegistry(c)
	fed := fmt.Sprintf("CREATE TABLE fed (item VARCHAR(20)) ENGINE=FEDERATED CONNECTION='mysql://root@127.0.0.1:3306%s/grants'", ou.Path)
	refusedSaying(t, call(t, reg, "exec", map[string]any{"db": "app", "sql": fed}, "k-fed"), "a FEDERATED table",
		"FEDERATED", `[connectors.sql.allow] app = ["FEDERATED"]`)
	var n int
	admin.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'fed'").Scan(&n)
	if n != 0 {
		t.Fatal("the FEDERATED table was made")
	}
}

// A result's bytes are bounded before they are in keep's memory (issue 38
// #5): one 300 MB value took keep to 636 MiB, SQLite's randomblob to 254
// MiB. The refusal names the bound; what keep allocated during the call
// stays well under the value's size.
func TestAResultIsBoundedBeforeItIsInKeepsMemory(t *testing.T) {
	const big = 64 << 20
	dbs := map[string]string{
		"postgres": pgtest.FreshSchema(t),
		"sqlite":   "sqlite://" + filepath.Join(t.TempDir(), "app.db"),
		"mariadb":  testdb.FreshMariaDB(t),
	}
	queries := map[string]string{
		"postgres": fmt.Sprintf("SELECT repeat('x', %d) AS v", big),
		"sqlite":   fmt.Sprintf("SELECT randomblob(%d) AS v", big),
		// MariaDB sends no value beyond max_allowed_packet: many rows of 1 MiB.
		"mariadb": "SELECT REPEAT('x', 1048576) AS v FROM seq_1_to_64",
	}
	for name, u := range dbs {
		t.Run(name, func(t *testing.T) {
			c, pools := newConn(map[string]string{"app": u})
			defer pools.Close()
			reg := connector.NewRegistry(c)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			r := call(t, reg, "query", map[string]any{"db": "app", "sql": queries[name]}, "")
			runtime.ReadMemStats(&after)
			refusedSaying(t, r, "a 64 MiB result", fmt.Sprintf("at most %d MiB", sqlconn.MaxResultBytes>>20), "LIMIT")
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%s: %.1f MiB allocated during the call: %s", name, float64(allocated)/(1<<20), r.Err.Message)
			if allocated > 40<<20 {
				t.Fatalf("keep allocated %.1f MiB for a result bounded at %d MiB", float64(allocated)/(1<<20), sqlconn.MaxResultBytes>>20)
			}
			// Under the bound, a large value still arrives whole.
			small := strings.ReplaceAll(strings.ReplaceAll(queries[name], fmt.Sprint(big), fmt.Sprint(4<<20)), "seq_1_to_64", "seq_1_to_4")
			if r := call(t, reg, "query", map[string]any{"db": "app", "sql": small}, ""); r.Err != nil {
				t.Fatalf("a 4 MiB result: %+v", r.Err)
			}
		})
	}
}

// keep.db through a hard link is keep.db: refused at start.
func TestKeepsOwnSQLiteStoreThroughAHardLinkIsRefused(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "data", "keep.db")
	os.MkdirAll(filepath.Dir(store), 0o700)
	if err := os.WriteFile(store, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "shop.db")
	if err := os.Link(store, link); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	err := sqlconn.RefuseKeepsStore(map[string]string{"shop": "sqlite://" + link}, store, "")
	if err == nil || !strings.Contains(err.Error(), "keep's own store") {
		t.Fatalf("keep.db through a hard link: %v", err)
	}
}

// [connectors.sql.allow] names declared databases only, and no empty item.
func TestAllowNamesADeclaredDatabase(t *testing.T) {
	for toml, says := range map[string]string{
		"[connectors.sql.databases]\nshop = \"sqlite:///tmp/shop.db\"\n\n[connectors.sql.allow]\nshpo = [\"dblink\"]\n": "names no database",
		"[connectors.sql.databases]\nshop = \"sqlite:///tmp/shop.db\"\n\n[connectors.sql.allow]\nshop = [\"\"]\n":       "empty",
	} {
		if _, err := config.Parse("keep.toml", toml); err == nil || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), "allow.") {
			t.Errorf("%s: %v (want it to say %q)", toml, err, says)
		}
	}
	cfg, err := config.Parse("keep.toml", "[connectors.sql.databases]\nshop = \"sqlite:///tmp/shop.db\"\n\n[connectors.sql.allow]\nshop = [\"superuser\", \"dblink\"]\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := config.Get[sqlconn.Config](cfg, "sql").Allow["shop"]; len(got) != 2 {
		t.Fatalf("allow: %v", got)
	}
}
