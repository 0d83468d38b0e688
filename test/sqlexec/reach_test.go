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
	store := pgtest.FreshSchema(t)
	su, _ := url.Parse(store)
	schema := su.Query().Get("search_path")
	admin, err := sql.Open("pgx", pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var b [5]byte
	rand.Read(b[:])
	shopDB := "keep_attack_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec("CREATE DATABASE " + shopDB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE " + shopDB + " WITH (FORCE)") })
	su.Path, su.RawQuery = "/"+shopDB, "sslmode=disable"
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
		if code == 0 || !strings.Contains(out, "failed:logic") || !strings.Contains(out, "dblink") || !strings.Contains(out, "[connectors.sql.allow]") {
			t.Fatalf("attack %d: keep run exited %d; want its runs failed:logic naming dblink and how to allow it:\n%s", i, code, out)
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
