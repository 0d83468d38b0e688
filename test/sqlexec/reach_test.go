package sqlexec

import (
	"bytes"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The attack of issue 38 #3, through keep run on a PostgreSQL store: a
// workflow granted sql.query on database shop (the same server as keep's
// store, dblink installed) read keep's grants with dblink and, with
// dblink_exec, inserted "*" for itself as "alice"; a one-statement
// sql.exec through dblink_exec deleted another workflow's exactly-once
// markers on a second connection. Now every statement on shop is refused
// while dblink is installed there (naming it and the keep.toml line that
// allows it knowingly), as is a role with superuser rights not allowed
// knowingly, and keep's own store declared under another URL: the runs
// fail saying why, keep's grants and the markers are unchanged.
func TestADeclaredDatabaseNeverReachesKeepsStore(t *testing.T) {
	store, su, schema, admin := freshSchemaAndAdmin(t) // admin closes after the cleanups below, which use it
	var b [5]byte
	rand.Read(b[:])
	// keep's store has a role of its own (keep refuses a declared database
	// on its server as its store's role); the shop is root's, as on a
	// laptop where one superuser does everything.
	storeRole := "keep_store_" + hex.EncodeToString(b[:])
	for _, s := range []string{"CREATE ROLE " + storeRole + " LOGIN", "GRANT ALL ON SCHEMA " + schema + " TO " + storeRole} {
		if _, err := admin.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		admin.Exec("DROP OWNED BY " + storeRole + " CASCADE")
		admin.Exec("DROP ROLE " + storeRole)
	})
	su.User = url.User(storeRole)
	store = su.String()
	shopDB := "keep_attack_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec("CREATE DATABASE " + shopDB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE " + shopDB + " WITH (FORCE)") })
	su.User, su.Path, su.RawQuery = nil, "/"+shopDB, "sslmode=disable"
	shopURL := su.String()
	shop, err := sql.Open("pgx", shopURL)
	if err != nil {
		t.Fatal(err)
	}
	defer shop.Close()
	if _, err := shop.Exec("CREATE TABLE shipped (order_id INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	config := func(extra string) {
		cfg := fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n%s\n", shopURL, extra)
		os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(cfg), 0o644)
	}
	config("\n" + rootAllowed)
	os.WriteFile(filepath.Join(dir, "orders.js"), []byte(strings.ReplaceAll(script, "%PH%", "$1")), 0o644)
	if code, out := keep(t, dir, nil, "run", "--store", store, "orders.js"); code != 0 {
		t.Fatalf("keep run orders.js exited %d:\n%s", code, out)
	}
	if _, err := shop.Exec("CREATE EXTENSION dblink"); err != nil {
		t.Fatal(err)
	}

	keepConn := fmt.Sprintf("host=127.0.0.1 port=5432 dbname=test user=root options=-csearch_path=%s", schema)
	shopConn := fmt.Sprintf("host=127.0.0.1 port=5432 dbname=%s user=root", shopDB)
	sqlText := func(s string) string { return strings.ReplaceAll(s, "'", "''") }
	attacks := []string{
		// a read of keep's grants
		fmt.Sprintf(`await ctx.sql.query({ db: "shop", sql: %q })`,
			fmt.Sprintf("SELECT * FROM dblink('%s', 'SELECT workflow || '':'' || item FROM grants') AS t(g text)", keepConn)),
		// a "read" that grants itself everything as alice
		fmt.Sprintf(`await ctx.sql.query({ db: "shop", sql: %q })`,
			fmt.Sprintf("SELECT dblink_exec('%s', '%s') AS done", keepConn, sqlText("INSERT INTO grants (workflow, item, granted_by, granted_at) VALUES ('evil', '*', 'alice', 0)"))),
		// one statement that deletes the orders workflow's markers on a second connection
		fmt.Sprintf(`await ctx.sql.exec({ db: "shop", sql: %q })`,
			fmt.Sprintf("SELECT dblink_exec('%s', 'DELETE FROM keep_mutations') AS done", shopConn)),
	}
	holds := func(what, out string) {
		t.Helper()
		var stars, marks, rows int
		if err := admin.QueryRow("SELECT count(*) FROM " + schema + ".grants WHERE item = '*'").Scan(&stars); err != nil {
			t.Fatal(err)
		}
		shop.QueryRow("SELECT count(*) FROM keep_mutations").Scan(&marks)
		shop.QueryRow("SELECT count(*) FROM shipped").Scan(&rows)
		if stars != 0 || marks != 3 || rows != 3 {
			t.Fatalf("after %s: %d grants of * in keep's store, %d markers and %d rows in shop; want 0, 3 and 3\n%s", what, stars, marks, rows, out)
		}
	}
	for i, attack := range attacks {
		// a read goes in prepare, an exec in mutate
		at, mutate := attack, ""
		if strings.Contains(attack, "sql.exec") {
			at, mutate = "", attack
		}
		wf := strings.NewReplacer(`name: "orders"`, `name: "evil"`, "const [e] = await ctx.peek", at+"; const [e] = await ctx.peek",
			`await ctx.sql.exec({ db: "shop", sql: "INSERT INTO shipped (order_id) VALUES (%PH%)", args: [p.data.id] })`, mutate).Replace(script)
		if !strings.Contains(wf, "dblink") {
			t.Fatal("the attack script was not made")
		}
		os.WriteFile(filepath.Join(dir, "evil.js"), []byte(wf), 0o644)
		code, out := keep(t, dir, nil, "run", "--store", store, "evil.js")
		// The database's setup, not the script, is what keep refuses: the
		// run waits for a person (paused:approval), its card naming the
		// extension and the keep.toml line that allows it knowingly.
		if code != 3 || !strings.Contains(out, "paused:approval") || strings.Contains(out, "bug in the script") || !strings.Contains(out, "dblink") || !strings.Contains(out, "[connectors.sql.allow]") {
			t.Fatalf("attack %d: keep run exited %d; want its run waiting for a person (exit 3, paused:approval) naming dblink and how to allow it:\n%s", i, code, out)
		}
		holds(fmt.Sprintf("attack %d", i), out)
	}

	// root not allowed knowingly: refused for its rights.
	config("")
	os.WriteFile(filepath.Join(dir, "evil.js"), []byte(strings.Replace(script, `name: "orders"`, `name: "root"`, 1)), 0o644)
	code, out := keep(t, dir, nil, "run", "--store", store, "evil.js")
	if code == 0 || !strings.Contains(out, `has superuser`) || !strings.Contains(out, `shop = ["superuser"]`) {
		t.Fatalf("a superuser role not allowed: keep run exited %d:\n%s", code, out)
	}
	holds("the superuser's run", out)

	// keep's own store's database under another URL (localhost, the
	// public search_path): refused at the call, by identity.
	if _, err := shop.Exec("DROP EXTENSION dblink"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte("[connectors.sql.databases]\nshop = \"postgres://localhost:5432/test?sslmode=disable\"\n\n"+rootAllowed), 0o644)
	wf := strings.NewReplacer(`name: "orders"`, `name: "mine"`,
		`await ctx.sql.exec({ db: "shop", sql: "INSERT INTO shipped (order_id) VALUES (%PH%)", args: [p.data.id] })`,
		fmt.Sprintf(`await ctx.sql.exec({ db: "shop", sql: %q })`, "INSERT INTO "+schema+".grants (workflow, item, granted_by, granted_at) VALUES ('mine', '*', 'alice', 0)")).Replace(script)
	os.WriteFile(filepath.Join(dir, "evil.js"), []byte(wf), 0o644)
	code, out = keep(t, dir, nil, "run", "--store", store, "evil.js")
	if code == 0 || !strings.Contains(out, "keep's own store") {
		t.Fatalf("keep's store under another URL: keep run exited %d:\n%s", code, out)
	}
	holds("keep's store declared", out)
}

// keepRSS runs keep like keep() and also says the most memory its process
// held (its peak resident set, as the kernel counted it).
func keepRSS(t *testing.T, dir string, args ...string) (int, string, int64) {
	t.Helper()
	cmd := exec.Command(keepBin, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if ru == nil {
		t.Skip("no resource usage on this system")
	}
	return code, out.String(), ru.Maxrss << 10 // Linux counts KiB
}

// A "read-only" sql.query that acts, through keep run (issue 38 #5): a
// PostgreSQL read that takes an advisory lock and one that ends another
// session, MariaDB's OPTIMIZE TABLE, a read of a 300 MB value, which took
// keep to 636 MiB (631 here before the fix), SQLite's randomblob of 250
// MB. Now each run fails (logic) saying why, the lock
// is free, the other session alive, and keep's peak memory stays near an
// ordinary run's.
func TestAReadThatActsFailsTheRun(t *testing.T) {
	lite := filepath.Join(t.TempDir(), "app.db")
	for _, tg := range append(targets(t), target{"sqlite", "sqlite://" + lite, "sqlite", lite, "?"}) {
		t.Run(tg.name, func(t *testing.T) {
			db, err := sql.Open(tg.driver, tg.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("CREATE TABLE shipped (order_id INT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n\n"+rootAllowed, tg.url)), 0o644)
			os.WriteFile(filepath.Join(dir, "orders.js"), []byte(strings.ReplaceAll(script, "%PH%", tg.ph)), 0o644)
			code, out, ordinary := keepRSS(t, dir, "run", "orders.js")
			if code != 0 {
				t.Fatalf("keep run orders.js exited %d:\n%s", code, out)
			}
			victim, err := db.Conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer victim.Close()
			var pid int
			attacks := map[string]string{}
			if tg.name == "postgres" {
				victim.QueryRowContext(t.Context(), "SELECT pg_backend_pid()").Scan(&pid)
				attacks["SELECT pg_advisory_lock(4242) AS l"] = "VOLATILE"
				attacks[fmt.Sprintf("SELECT pg_terminate_backend(%d) AS t", pid)] = "VOLATILE"
				attacks["SELECT repeat('x', 300000000) AS v"] = "at most 8 MiB"
			} else if tg.name == "sqlite" {
				attacks["SELECT randomblob(250000000) AS v"] = "at most 8 MiB" // SQLite runs inside keep
			} else {
				attacks["OPTIMIZE TABLE shipped"] = "EXPLAIN"
				attacks["SELECT REPEAT('x', 1048576) AS v FROM seq_1_to_300"] = "at most 8 MiB"
			}
			n := 0
			for q, says := range attacks {
				n++
				t.Run(fmt.Sprint(n), func(t *testing.T) {
					wf := strings.NewReplacer(`name: "orders"`, fmt.Sprintf(`name: "reader%d"`, n),
						"const [e] = await ctx.peek", fmt.Sprintf("await ctx.sql.query({ db: \"shop\", sql: %q }); const [e] = await ctx.peek", q)).Replace(script)
					os.WriteFile(filepath.Join(dir, fmt.Sprintf("reader%d.js", n)), []byte(wf), 0o644)
					code, out, peak := keepRSS(t, dir, "run", fmt.Sprintf("reader%d.js", n))
					t.Logf("%s: keep's peak memory %d MiB (an ordinary run's %d MiB)", q, peak>>20, ordinary>>20)
					if code == 0 || !strings.Contains(out, "failed:logic") || !strings.Contains(out, says) {
						t.Errorf("%s: keep run exited %d; want its runs failed:logic saying %q:\n%s", q, code, says, out)
					}
					if peak > ordinary+64<<20 {
						t.Errorf("%s: keep's peak memory was %d MiB, an ordinary run's %d MiB", q, peak>>20, ordinary>>20)
					}
				})
			}
			if tg.name == "postgres" {
				var free bool
				if err := db.QueryRow("SELECT pg_try_advisory_lock(4242)").Scan(&free); err != nil || !free {
					t.Fatalf("the read's advisory lock is held: %v %v", free, err)
				}
				if err := victim.PingContext(t.Context()); err != nil {
					t.Fatalf("the other session was ended: %v", err)
				}
			}
		})
	}
}
