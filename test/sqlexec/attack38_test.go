package sqlexec

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/testdb"
)

// Issue 38, attack: keep judged the rights of the role a declared
// PostgreSQL database logs in as, not of the roles it may become. The
// superuser attribute is never inherited, so a role made a member of a
// superuser role (GRANT postgres TO app: a laptop's way of giving an
// application everything) passed as an ordinary role; one sql.exec of a
// DO block then did SET ROLE to the superuser, acted as it (a server
// file, a program, dblink to keep's store), and RESET ROLE before keep
// asked again. Now the role is refused for what it may become, naming
// the role and the keep.toml line that allows it knowingly; the DO block
// never runs.
func TestARoleThatMayBecomeASuperuserIsRefused(t *testing.T) {
	_, su, schema, admin := freshSchemaAndAdmin(t)
	var b [5]byte
	rand.Read(b[:])
	app, boss := "keep_app_"+hex.EncodeToString(b[:]), "keep_boss_"+hex.EncodeToString(b[:])
	for _, s := range []string{
		"CREATE ROLE " + boss + " SUPERUSER NOLOGIN",
		"CREATE ROLE " + app + " LOGIN NOINHERIT",
		"GRANT " + boss + " TO " + app,
		"GRANT ALL ON SCHEMA " + schema + " TO " + app,
		"CREATE TABLE " + schema + ".shipped (order_id INT NOT NULL, by_superuser BOOL)",
		"GRANT ALL ON " + schema + ".shipped TO " + app,
	} {
		if _, err := admin.Exec(s); err != nil {
			t.Fatal(s, err)
		}
	}
	t.Cleanup(func() {
		admin.Exec("DROP SCHEMA " + schema + " CASCADE")
		admin.Exec("DROP OWNED BY " + app + " CASCADE")
		admin.Exec("DROP ROLE " + app)
		admin.Exec("DROP ROLE " + boss)
	})
	su.User = url.User(app)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n", su.String())), 0o644)
	// One statement: become the superuser, write what only it could tell
	// (here its own rolsuper; in the attack a server file), become the
	// application again.
	do := fmt.Sprintf("DO $$BEGIN SET ROLE %s; INSERT INTO shipped SELECT 1, rolsuper FROM pg_roles WHERE rolname = current_user; RESET ROLE; END$$", boss)
	wf := strings.NewReplacer(`name: "orders"`, `name: "evil"`,
		`await ctx.sql.exec({ db: "shop", sql: "INSERT INTO shipped (order_id) VALUES (%PH%)", args: [p.data.id] })`,
		fmt.Sprintf(`await ctx.sql.exec({ db: "shop", sql: %q })`, do)).Replace(script)
	os.WriteFile(filepath.Join(dir, "evil.js"), []byte(wf), 0o644)
	code, out := keep(t, dir, nil, "run", "evil.js")
	var rows int
	if err := admin.QueryRow("SELECT count(*) FROM " + schema + ".shipped").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("the DO block ran as the superuser %s (%d rows written); keep run exited %d:\n%s", boss, rows, code, out)
	}
	waitsForAPersonNaming(t, code, out, boss)
}

// Issue 38, attack: a declared MariaDB URL passes its query parameters to
// the driver, and go-sql-driver reads allowAllFiles=true as leave to
// answer a server's LOAD DATA LOCAL INFILE with any file keep's process
// can read. MariaDB prepares LOAD DATA LOCAL, so one sql.exec sent keep's
// own secret.key (the key to every sealed secret) into a table the next
// sql.query read back. Now keep refuses the parameter when it reads
// keep.toml, naming the key, and keep does not start.
func TestAMariaDBURLCannotLetTheServerReadKeepsFiles(t *testing.T) {
	_, u, dbName, root := freshMariaDBAsRoot(t)
	var b [5]byte
	rand.Read(b[:])
	user := "keep_app_" + hex.EncodeToString(b[:])
	for _, s := range []string{
		"CREATE USER '" + user + "'@'%'",
		"CREATE USER '" + user + "'@'localhost'",
		"GRANT ALL ON " + dbName + ".* TO '" + user + "'@'%'",
		"GRANT ALL ON " + dbName + ".* TO '" + user + "'@'localhost'",
		"CREATE TABLE loot (line TEXT)",
	} {
		if _, err := root.Exec(s); err != nil {
			t.Fatal(s, err)
		}
	}
	t.Cleanup(func() {
		root.Exec("DROP USER '" + user + "'@'%'")
		root.Exec("DROP USER '" + user + "'@'localhost'")
	})
	u.User = url.User(user)
	u.RawQuery = "allowAllFiles=true"
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n", u.String())), 0o644)
	key := filepath.Join(dir, "keep-data", "secret.key")
	wf := strings.NewReplacer(`name: "orders"`, `name: "evil"`,
		`await ctx.sql.exec({ db: "shop", sql: "INSERT INTO shipped (order_id) VALUES (%PH%)", args: [p.data.id] })`,
		fmt.Sprintf(`await ctx.sql.exec({ db: "shop", sql: %q })`, "LOAD DATA LOCAL INFILE '"+key+"' INTO TABLE loot")).Replace(script)
	os.WriteFile(filepath.Join(dir, "evil.js"), []byte(wf), 0o644)
	code, out := keep(t, dir, nil, "run", "evil.js")
	var rows int
	if err := root.QueryRow("SELECT count(*) FROM loot").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("keep's %s reached the server (%d lines in loot); keep run exited %d:\n%s", key, rows, code, out)
	}
	if code == 0 || !strings.Contains(out, "databases.shop") || !strings.Contains(out, "allowAllFiles") {
		t.Fatalf("keep run exited %d; want keep.toml refused, naming databases.shop and allowAllFiles:\n%s", code, out)
	}
}

// Issue 38, attack: keep judged a MariaDB user's server-wide rights and
// its current role's from information_schema.USER_PRIVILEGES, which shows
// an ordinary user its own rows only, never a role's. A user whose
// default role holds FILE passed as ordinary, and a plain sql.query of
// LOAD_FILE read the server's files (keep's own, where the server runs as
// keep's user); a role not enabled is one SET ROLE away inside a compound
// statement (BEGIN NOT ATOMIC …, which MariaDB prepares). keep cannot read
// a role's rights as such a user, so a user that may use a role is
// refused unless allowed knowingly, naming the roles.
func TestAMariaDBUserWithARoleIsRefused(t *testing.T) {
	_, u, dbName, root := freshMariaDBAsRoot(t)
	var b [5]byte
	rand.Read(b[:])
	user, role := "keep_app_"+hex.EncodeToString(b[:]), "keep_filer_"+hex.EncodeToString(b[:])
	stmts := []string{"CREATE ROLE " + role, "GRANT FILE ON *.* TO " + role, "CREATE TABLE loot (line TEXT)"}
	for _, host := range []string{"%", "localhost"} {
		who := "'" + user + "'@'" + host + "'"
		stmts = append(stmts, "CREATE USER "+who, "GRANT ALL ON "+dbName+".* TO "+who, "GRANT "+role+" TO "+who, "SET DEFAULT ROLE "+role+" FOR "+who)
	}
	for _, s := range stmts {
		if _, err := root.Exec(s); err != nil {
			t.Fatal(s, err)
		}
	}
	t.Cleanup(func() {
		root.Exec("DROP USER '" + user + "'@'%'")
		root.Exec("DROP USER '" + user + "'@'localhost'")
		root.Exec("DROP ROLE " + role)
	})
	u.User = url.User(user)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n", u.String())), 0o644)
	// prepare reads a server file; mutate writes what it read.
	wf := strings.NewReplacer(`name: "orders"`, `name: "evil"`,
		"return { reservations: [{ topic: \"job\", ids: [e.messageId] }], data: e.payload }",
		"const [f] = await ctx.sql.query({ db: \"shop\", sql: \"SELECT LOAD_FILE('/etc/hostname') AS f\" }); return { reservations: [{ topic: \"job\", ids: [e.messageId] }], data: { f: String(f.f) } }",
		`await ctx.sql.exec({ db: "shop", sql: "INSERT INTO shipped (order_id) VALUES (%PH%)", args: [p.data.id] })`,
		`await ctx.sql.exec({ db: "shop", sql: "INSERT INTO loot (line) VALUES (?)", args: [p.data.f] })`).Replace(script)
	if !strings.Contains(wf, "LOAD_FILE") || !strings.Contains(wf, "loot") {
		t.Fatal("the attack script was not made")
	}
	os.WriteFile(filepath.Join(dir, "evil.js"), []byte(wf), 0o644)
	code, out := keep(t, dir, nil, "run", "evil.js")
	var rows int
	if err := root.QueryRow("SELECT count(*) FROM loot WHERE line <> 'null'").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("a server file was read through the role %s (%d rows in loot); keep run exited %d:\n%s", role, rows, code, out)
	}
	waitsForAPersonNaming(t, code, out, role)
}

// Issue 38, attack: on MariaDB a statement can end keep's transaction
// before keep looks: TRUNCATE (DDL commits the transaction it runs in, and
// is not rolled back), or a compound statement (BEGIN NOT ATOMIC …, which
// MariaDB prepares) that deletes and COMMITs. keep's check after the
// statement saw the markers gone and "rolled back" — nothing: another
// workflow's exactly-once markers were deleted for good, so its writes
// would be sent again. Now keep's transaction on MariaDB is an XA
// transaction, in which the server itself refuses whatever would commit
// it (XAER_RMFAIL): the statement fails, the markers stay. And a
// temporary table named keep_mutations hid the real one from keep's
// check in that session: a compound statement copied the markers into
// one and deleted the real ones; now such a table is dropped and the
// statement refused.
func TestAMariaDBStatementCannotCommitKeepsTransaction(t *testing.T) {
	my, _, _, root := freshMariaDBAsRoot(t)
	if _, err := root.Exec("CREATE TABLE shipped (order_id INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n\n%s", my, rootAllowed)), 0o644)
	os.WriteFile(filepath.Join(dir, "orders.js"), []byte(strings.ReplaceAll(script, "%PH%", "?")), 0o644)
	if code, out := keep(t, dir, nil, "run", "orders.js"); code != 0 {
		t.Fatalf("keep run orders.js exited %d:\n%s", code, out)
	}
	for i, attack := range []string{
		"TRUNCATE TABLE keep_mutations",
		"BEGIN NOT ATOMIC DELETE FROM keep_mutations; COMMIT; END",
		// a temporary copy stands in for the markers while the real ones go
		"BEGIN NOT ATOMIC CREATE TEMPORARY TABLE t0 AS SELECT * FROM keep_mutations; DELETE FROM keep_mutations; CREATE TEMPORARY TABLE keep_mutations AS SELECT * FROM t0; END",
	} {
		wf := strings.NewReplacer(`name: "orders"`, fmt.Sprintf(`name: "evil%d"`, i),
			`await ctx.sql.exec({ db: "shop", sql: "INSERT INTO shipped (order_id) VALUES (%PH%)", args: [p.data.id] })`,
			fmt.Sprintf(`await ctx.sql.exec({ db: "shop", sql: %q })`, attack)).Replace(script)
		os.WriteFile(filepath.Join(dir, "evil.js"), []byte(wf), 0o644)
		code, out := keep(t, dir, nil, "run", "evil.js")
		var marks int
		if err := root.QueryRow("SELECT count(*) FROM keep_mutations").Scan(&marks); err != nil {
			t.Fatal(err)
		}
		if marks != 3 {
			t.Fatalf("%s: %d of orders' 3 exactly-once markers left; keep run exited %d:\n%s", attack, marks, code, out)
		}
		if code == 0 {
			t.Fatalf("%s: keep run exited 0; want the statement refused:\n%s", attack, out)
		}
	}
}

// Issue 38, attack: on PostgreSQL keep's record of the writes it made
// exactly once (keep_mutations) is the application role's table, and
// keep judged a statement by the rows it changed in it, not by what it
// made of it. One sql.exec put a trigger on keep_mutations (a DO block
// making a function and the trigger: no row changed); keep's own insert
// of its record in the next exec fired it, deleting every other marker,
// and keep committed. Now a keep_mutations with a trigger, rule or row
// security policy is refused before and after each statement, and keep's
// own queries after the statement run with the search path pg_catalog
// (a statement's set_config of search_path put the role's own count or
// hashtext before PostgreSQL's).
func TestAPostgresStatementCannotArmKeepsRecord(t *testing.T) {
	_, su, schema, admin := freshSchemaAndAdmin(t)
	var b [5]byte
	rand.Read(b[:])
	app := "keep_app_" + hex.EncodeToString(b[:])
	for _, s := range []string{
		"CREATE ROLE " + app + " LOGIN",
		"GRANT ALL ON SCHEMA " + schema + " TO " + app,
		"CREATE TABLE " + schema + ".shipped (order_id INT NOT NULL)",
		"GRANT ALL ON " + schema + ".shipped TO " + app,
	} {
		if _, err := admin.Exec(s); err != nil {
			t.Fatal(s, err)
		}
	}
	t.Cleanup(func() {
		admin.Exec("DROP SCHEMA " + schema + " CASCADE")
		admin.Exec("DROP OWNED BY " + app + " CASCADE")
		admin.Exec("DROP ROLE " + app)
	})
	su.User = url.User(app)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n", su.String())), 0o644)
	os.WriteFile(filepath.Join(dir, "orders.js"), []byte(strings.ReplaceAll(script, "%PH%", "$1")), 0o644)
	if code, out := keep(t, dir, nil, "run", "orders.js"); code != 0 {
		t.Fatalf("keep run orders.js exited %d:\n%s", code, out)
	}
	arm := "DO $d$BEGIN CREATE FUNCTION wipe() RETURNS trigger LANGUAGE plpgsql AS $f$BEGIN DELETE FROM keep_mutations WHERE idempotency_key <> NEW.idempotency_key; RETURN NEW; END$f$; " +
		"CREATE TRIGGER wipe AFTER INSERT ON keep_mutations FOR EACH ROW EXECUTE FUNCTION wipe(); END$d$"
	wf := strings.NewReplacer(`name: "orders"`, `name: "evil"`,
		`await ctx.sql.exec({ db: "shop", sql: "INSERT INTO shipped (order_id) VALUES (%PH%)", args: [p.data.id] })`,
		fmt.Sprintf(`await ctx.sql.exec({ db: "shop", sql: p.data.id == 1 ? %q : "INSERT INTO shipped (order_id) VALUES (0)" })`, arm)).Replace(script)
	os.WriteFile(filepath.Join(dir, "evil.js"), []byte(wf), 0o644)
	code, out := keep(t, dir, nil, "run", "evil.js")
	var marks int
	if err := admin.QueryRow("SELECT count(*) FROM " + schema + ".keep_mutations").Scan(&marks); err != nil {
		t.Fatal(err)
	}
	if marks < 3 {
		t.Fatalf("%d markers left, fewer than orders' 3; keep run exited %d:\n%s", marks, code, out)
	}
	var armed int
	admin.QueryRow("SELECT count(*) FROM pg_trigger WHERE tgrelid = '" + schema + ".keep_mutations'::regclass AND NOT tgisinternal").Scan(&armed)
	if armed != 0 || code == 0 {
		t.Fatalf("a trigger on keep_mutations was kept (%d), keep run exited %d; want the statement refused:\n%s", armed, code, out)
	}
}

// Issue 38, attack: keep judges a PostgreSQL read by the functions the
// catalog says it calls, reading pg_proc by its unqualified name. A role
// may set its own search path (ALTER ROLE … SET search_path, one earlier
// sql.exec) to a schema of its own before pg_catalog, where a view named
// pg_proc says every function is STABLE: a "read" then ended another
// session with pg_terminate_backend. Now keep's own catalog queries run
// with pg_catalog first, the read's text with the role's path.
func TestAPostgresReadIsJudgedByTheRealCatalog(t *testing.T) {
	_, su, schema, admin := freshSchemaAndAdmin(t)
	var b [5]byte
	rand.Read(b[:])
	app := "keep_app_" + hex.EncodeToString(b[:])
	for _, s := range []string{
		"CREATE ROLE " + app + " LOGIN",
		"GRANT ALL ON SCHEMA " + schema + " TO " + app,
		"GRANT TEMPORARY ON DATABASE test TO " + app,
	} {
		if _, err := admin.Exec(s); err != nil {
			t.Fatal(s, err)
		}
	}
	t.Cleanup(func() {
		admin.Exec("DROP SCHEMA " + schema + " CASCADE")
		admin.Exec("DROP OWNED BY " + app + " CASCADE")
		admin.Exec("DROP ROLE " + app)
	})
	su.User = url.User(app)
	// What one earlier sql.exec each can do as the role.
	asApp, err := sql.Open("pgx", su.String())
	if err != nil {
		t.Fatal(err)
	}
	defer asApp.Close()
	for _, s := range []string{
		`CREATE VIEW pg_proc AS SELECT oid, proname, pronamespace, prosqlbody, 's'::"char" AS provolatile FROM pg_catalog.pg_proc`,
		"ALTER ROLE " + app + " SET search_path = " + schema + ", pg_catalog",
	} {
		if _, err := asApp.Exec(s); err != nil {
			t.Fatal(s, err)
		}
	}
	// The victim: another session of the role.
	victim, err := sql.Open("pgx", su.String()+"&application_name=victim_"+app)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	victim.SetMaxOpenConns(1)
	if err := victim.Ping(); err != nil {
		t.Fatal(err)
	}
	u2, _ := url.Parse(su.String())
	q := u2.Query()
	q.Del("search_path") // the role's own path, as a URL without one gets
	u2.RawQuery = q.Encode()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n", u2.String())), 0o644)
	read := fmt.Sprintf("SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity WHERE application_name = 'victim_%s'", app)
	wf := strings.NewReplacer(`name: "orders"`, `name: "evil"`,
		"const [e] = await ctx.peek", fmt.Sprintf("await ctx.sql.query({ db: \"shop\", sql: %q }); const [e] = await ctx.peek", read)).Replace(script)
	os.WriteFile(filepath.Join(dir, "evil.js"), []byte(wf), 0o644)
	code, out := keep(t, dir, nil, "run", "evil.js")
	var alive int
	admin.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'victim_" + app + "'").Scan(&alive)
	if alive != 1 {
		t.Fatalf("the read ended the role's other session (%d left); keep run exited %d:\n%s", alive, code, out)
	}
	if code == 0 || !strings.Contains(out, "pg_terminate_backend") {
		t.Fatalf("keep run exited %d; want the read refused, naming pg_terminate_backend:\n%s", code, out)
	}
}

// freshMariaDBAsRoot is a fresh MariaDB database (its URL, parsed, and
// name) and a connection to it as the machine's root, closed at the end.
func freshMariaDBAsRoot(t *testing.T) (string, *url.URL, string, *sql.DB) {
	t.Helper()
	my := testdb.FreshMariaDB(t)
	u, _ := url.Parse(my)
	dbName := strings.TrimPrefix(u.Path, "/")
	root, err := sql.Open("mysql", "root@tcp("+u.Host+")/"+dbName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return my, u, dbName, root
}

// waitsForAPersonNaming checks that keep run stopped with its run waiting
// for a person (exit 3, paused:approval), naming who and the keep.toml
// line that allows a superuser knowingly.
func waitsForAPersonNaming(t *testing.T, code int, out, who string) {
	t.Helper()
	if code != 3 || !strings.Contains(out, "paused:approval") || !strings.Contains(out, who) || !strings.Contains(out, `shop = ["superuser"]`) {
		t.Fatalf("keep run exited %d; want its run waiting for a person (exit 3, paused:approval) naming %s and how to allow it:\n%s", code, who, out)
	}
}

// freshSchemaAndAdmin is a fresh PostgreSQL schema (its URL, parsed, and
// name) and a connection as the machine's admin role, closed after every
// cleanup the test registers later (they may use it).
func freshSchemaAndAdmin(t *testing.T) (string, *url.URL, string, *sql.DB) {
	t.Helper()
	u := pgtest.FreshSchema(t)
	su, _ := url.Parse(u)
	admin, err := sql.Open("pgx", pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return u, su, su.Query().Get("search_path"), admin
}
