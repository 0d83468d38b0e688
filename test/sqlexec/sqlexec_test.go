// Package sqlexec runs keep as people do against the machine's PostgreSQL
// and MariaDB, and kills it (the process exits as if killed with kill -9)
// at every durable step of an sql.exec: after the restart each job's row
// is in the table exactly once, and every output is applied.
package sqlexec

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testdb"
)

var keepBin string

func TestMain(m *testing.M) { testbin.Main(m, &keepBin) }

const script = `export default Keep.workflow({
  name: "orders",
  topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    for (const id of [1, 2, 3]) {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id: String(id), title: "Order " + id })
      await ctx.publish("job", { messageId: String(id), inputId, payload: { id } })
    }
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) {
      const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload }
    },
    async mutate(ctx, p) {
      await ctx.sql.exec({ db: "shop", sql: "INSERT INTO shipped (order_id) VALUES (%PH%)", args: [p.data.id] })
    },
  }) },
})`

// rootAllowed lets keep run statements as the machine's root role on
// PostgreSQL and MariaDB, which it refuses by default (issue 38).
const rootAllowed = "[connectors.sql.allow]\nshop = [\"superuser\"]\n\n"

type target struct {
	name, url, driver, dsn, ph string
}

func targets(t *testing.T) []target {
	pg := pgtest.FreshSchema(t)
	my := testdb.FreshMariaDB(t)
	u, _ := url.Parse(my)
	return []target{
		{"postgres", pg, "pgx", pg, "$1"},
		{"mariadb", my, "mysql", u.User.Username() + "@tcp(" + u.Host + ")" + u.Path, "?"},
	}
}

func keep(t *testing.T, dir string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(keepBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String()
}

func TestKillAtEveryStepOfAnSQLExec(t *testing.T) {
	for _, tg := range targets(t) {
		db, err := sql.Open(tg.driver, tg.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, point := range []string{engine.CrashAfterPrepared, engine.CrashInsideInFlight, engine.CrashAfterInFlight, engine.CrashAfterCall, engine.CrashInsideCommit} {
			t.Run(tg.name+"/"+point, func(t *testing.T) {
				// Each case starts afresh: keep's marker rows of the last case
				// would (rightly) answer this case's writes as done.
				for _, table := range []string{"shipped", "keep_mutations"} {
					if _, err := db.Exec("DROP TABLE IF EXISTS " + table); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := db.Exec("CREATE TABLE shipped (order_id INT NOT NULL)"); err != nil { // no unique key: a second insert would show
					t.Fatal(err)
				}
				dir := t.TempDir()
				cfg := fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n\n"+rootAllowed+"[policy]\ntool_timeout = \"2s\"\ntransient_backoff = \"20ms\"\nreconcile_backoff = \"20ms\"\n", tg.url)
				os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(cfg), 0o644)
				os.WriteFile(filepath.Join(dir, "workflow.js"), []byte(strings.ReplaceAll(script, "%PH%", tg.ph)), 0o644)
				code, out := keep(t, dir, []string{"KEEP_TEST_CRASH_AFTER=" + point}, "run", "workflow.js")
				if code != 137 {
					t.Fatalf("keep run with the crash point %s exited %d:\n%s", point, code, out)
				}
				if code, out := keep(t, dir, nil, "run", "workflow.js"); code != 0 {
					t.Fatalf("keep run after the crash exited %d:\n%s", code, out)
				}
				rows, err := db.Query("SELECT order_id, COUNT(*) FROM shipped GROUP BY order_id ORDER BY order_id")
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for rows.Next() {
					var id, n int
					rows.Scan(&id, &n)
					got = append(got, fmt.Sprintf("%d×%d", id, n))
				}
				rows.Close()
				if strings.Join(got, " ") != "1×1 2×1 3×1" {
					_, o := keep(t, dir, nil, "outputs", "orders")
					t.Fatalf("rows per order after a kill at %s: %v (want each order once)\n%s", point, got, o)
				}
				_, out = keep(t, dir, nil, "outputs", "orders", "--json")
				var outs []struct{ Status string }
				if err := json.Unmarshal([]byte(out), &outs); err != nil || len(outs) != 3 {
					t.Fatalf("outputs: %v %s", err, out)
				}
				for _, o := range outs {
					if o.Status != "applied" {
						t.Fatalf("outputs %+v", outs)
					}
				}
			})
		}
	}
}

// One sql.exec is one statement (issue 23 #3): with the simple protocol,
// `INSERT …; COMMIT; INSERT …; DELETE FROM keep_mutations` committed the
// first insert inside keep's transaction and wiped another workflow's
// marker rows. Now the run fails saying why, nothing of it is written,
// and the other workflow's markers are intact.
func TestAnExecOfSeveralStatementsWritesNothing(t *testing.T) {
	for _, tg := range targets(t) {
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
			cfg := fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n\n"+rootAllowed, tg.url)
			os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(cfg), 0o644)
			os.WriteFile(filepath.Join(dir, "orders.js"), []byte(strings.ReplaceAll(script, "%PH%", tg.ph)), 0o644)
			if code, out := keep(t, dir, nil, "run", "orders.js"); code != 0 {
				t.Fatalf("keep run orders.js exited %d:\n%s", code, out)
			}
			evil := strings.NewReplacer(`name: "orders"`, `name: "evil"`, `"INSERT INTO shipped (order_id) VALUES (%PH%)", args: [p.data.id]`,
				`"INSERT INTO shipped (order_id) VALUES (90); COMMIT; INSERT INTO shipped (order_id) VALUES (91); DELETE FROM keep_mutations"`).Replace(script)
			if !strings.Contains(evil, "COMMIT") {
				t.Fatal("the attack script was not made")
			}
			os.WriteFile(filepath.Join(dir, "evil.js"), []byte(evil), 0o644)
			code, out := keep(t, dir, nil, "run", "evil.js")
			if code == 0 || !strings.Contains(out, "failed:logic") {
				t.Fatalf("keep run evil.js exited %d; want its runs failed:logic:\n%s", code, out)
			}
			want := "one statement"
			if tg.name == "mariadb" {
				want = "one statement at a time" // MariaDB's syntax error, with keep's note
			}
			if !strings.Contains(out, want) {
				t.Fatalf("the failure does not say why (want %q):\n%s", want, out)
			}
			var rows, marks int
			db.QueryRow("SELECT COUNT(*) FROM shipped").Scan(&rows)
			db.QueryRow("SELECT COUNT(*) FROM keep_mutations").Scan(&marks)
			if rows != 3 || marks != 3 {
				t.Fatalf("after the attack: %d rows in shipped and %d marker rows; want the orders workflow's 3 and 3", rows, marks)
			}
		})
	}
}

// A SQLite target cannot reach keep's own keep.db (issue 23 #2): a read
// ATTACHed it and granted itself everything. Now ATTACH is refused, in a
// query and in an exec, the run fails saying so, and keep.db itself is
// refused as a target.
func TestASQLiteTargetCannotReachKeepsStore(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	keepDB := filepath.Join(data, "keep.db")
	cfg := fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n", "sqlite://"+filepath.Join(dir, "app.db"))
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(cfg), 0o644)
	for _, attack := range []string{
		`await ctx.sql.exec({ db: "shop", sql: "ATTACH '` + keepDB + `' AS k" })`,
		`await ctx.sql.query({ db: "shop", sql: "SELECT 1; ATTACH '` + keepDB + `' AS k" })`,
	} {
		wf := strings.NewReplacer(`await ctx.sql.exec({ db: "shop", sql: "INSERT INTO shipped (order_id) VALUES (%PH%)", args: [p.data.id] })`, attack).Replace(script)
		if !strings.Contains(wf, "ATTACH") {
			t.Fatal("the attack script was not made")
		}
		os.WriteFile(filepath.Join(dir, "wf.js"), []byte(wf), 0o644)
		code, out := keep(t, dir, nil, "run", "--data", data, "wf.js")
		if code == 0 || !strings.Contains(out, "failed:logic") || !strings.Contains(out, "ATTACH") {
			t.Fatalf("keep run with %s exited %d; want failed:logic saying ATTACH is refused:\n%s", attack, code, out)
		}
		db, err := sql.Open("sqlite", keepDB)
		if err != nil {
			t.Fatal(err)
		}
		var grants int
		err = db.QueryRow("SELECT COUNT(*) FROM grants WHERE item = '*'").Scan(&grants)
		db.Close()
		if err != nil || grants != 0 {
			t.Fatalf("grants of * in keep.db: %d %v", grants, err)
		}
	}
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n", "sqlite://"+keepDB)), 0o644)
	if code, out := keep(t, dir, nil, "run", "--data", data, "wf.js"); code == 0 || !strings.Contains(out, "keep's own store") {
		t.Fatalf("keep run with keep.db declared as a target exited %d:\n%s", code, out)
	}
}

// An argument the database cannot hold (issue 40 #8: 2^31+5 into an INT
// column) is the script's to fix: the run fails once as failed:logic with
// a message that names the argument, and keep does not retry it. pgx
// refused to encode it in keep's process with an error of no type, which
// keep took for transient and retried five times.
func TestAnArgumentTheColumnCannotHoldFailsAtOnceAsLogic(t *testing.T) {
	for _, tg := range targets(t) {
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
			cfg := fmt.Sprintf("[connectors.sql.databases]\nshop = %q\n\n"+rootAllowed+"[policy]\ntransient_backoff = \"20ms\"\ntransient_backoff_max = \"20ms\"\n", tg.url)
			os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(cfg), 0o644)
			big := strings.NewReplacer("[1, 2, 3]", "[1]", "args: [p.data.id]", "args: [2 ** 31 + 5]").Replace(strings.ReplaceAll(script, "%PH%", tg.ph))
			os.WriteFile(filepath.Join(dir, "orders.js"), []byte(big), 0o644)
			code, out := keep(t, dir, nil, "run", "orders.js")
			if code == 0 || !strings.Contains(out, "failed:logic") {
				t.Fatalf("keep run exited %d; want the consumer's run failed:logic:\n%s", code, out)
			}
			want := "args[0] (2147483653)" // keep's words: pgx names no argument
			if tg.name == "mariadb" {
				want = "Out of range value for column 'order_id'" // MariaDB's words: the column, not the argument
			}
			if !strings.Contains(out, want) {
				t.Fatalf("the failure does not name the argument (want %q):\n%s", want, out)
			}
			_, out = keep(t, dir, nil, "runs", "orders", "--json")
			var runs []struct{ Handler, Status string }
			if err := json.Unmarshal([]byte(out), &runs); err != nil {
				t.Fatalf("keep runs --json: %v\n%s", err, out)
			}
			consumer := 0
			for _, r := range runs {
				if r.Handler == "c" {
					consumer++
					if r.Status != "failed:logic" {
						t.Errorf("the consumer's run is %s, want failed:logic", r.Status)
					}
				}
			}
			if consumer != 1 {
				t.Fatalf("the consumer ran %d times; want once, no retry:\n%s", consumer, out)
			}
			var n int
			db.QueryRow("SELECT COUNT(*) FROM shipped").Scan(&n)
			if n != 0 {
				t.Fatalf("%d rows written", n)
			}
		})
	}
}
