package bench

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
)

// BenchmarkReadsAtScale (issue 44) fills a store with a workflow's history
// of KEEP_READS_ROWS inputs (default 1,000,000), each with its event, its
// consumer run (a trace of a few hundred bytes) and its write, inserted
// by SQL straight into the tables (the fill is not what is measured), and
// then measures each read a person or a program makes, through keep
// serve's HTTP handler: the API's lists, the workflow list and summary,
// the topics view, the workflow's page and /metrics. ns/op and B/op are a
// read's time and the bytes it allocates; rss-MB is keep's resident
// memory after them. KEEP_READS_STORE picks sqlite (default) or postgres.
//
//	KEEP_READS_ROWS=1000000 go test -run '^$' -bench ReadsAtScale -benchtime 20x ./internal/bench
func BenchmarkReadsAtScale(b *testing.B) {
	rows := 1_000_000
	if s := os.Getenv("KEEP_READS_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("KEEP_READS_ROWS=%q: a number of inputs", s)
		}
		rows = n
	}
	ctx := context.Background()
	dir := b.TempDir()
	storeURL, dialect := "", os.Getenv("KEEP_READS_STORE")
	switch dialect {
	case "", "sqlite":
		dialect = "sqlite"
	case "postgres":
		storeURL = pgtest.FreshSchema(b)
	default:
		b.Fatalf("KEEP_READS_STORE=%q: sqlite or postgres", dialect)
	}
	open := func() *daemon.Keep {
		k, err := daemon.Open(daemon.Options{DataDir: filepath.Join(dir, "data"), Store: storeURL, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		return k
	}
	k := open()
	if _, err := control.DeployAndGrant(ctx, k.Engine, "orders.js", readsScript, control.DeployOptions{}); err != nil {
		b.Fatal(err)
	}
	k.Close()
	start := time.Now()
	if err := fillHistory(dialect, storeURL, filepath.Join(dir, "data", "keep.db"), rows); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "filled %d inputs (with their events, runs and writes) on %s in %s\n", rows, dialect, time.Since(start).Round(time.Second))
	k = open()
	defer k.Close()
	h := k.HTTPHandler("")
	for _, r := range []struct{ name, path string }{
		{"inputs", "/api/v1/workflows/orders/inputs"},
		{"outputs", "/api/v1/workflows/orders/outputs"},
		{"runs", "/api/v1/workflows/orders/runs"},
		{"items", "/api/v1/workflows/orders/items"},
		{"inputs-deep", "/api/v1/workflows/orders/inputs?limit=50&cursor=" + deepCursor(rows)},
		{"inputs-search", "/api/v1/workflows/orders/inputs?q=order+" + strconv.Itoa(rows/2) + "+"},
		{"workflows", "/api/v1/workflows"},
		{"workflow", "/api/v1/workflows/orders"},
		{"topics", "/api/v1/workflows/orders/topics"},
		{"page", "/w/orders"},
		{"page-topics", "/w/orders/topics"},
		{"metrics", "/metrics"},
	} {
		b.Run(r.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodGet, "http://localhost"+r.path, nil)
				req.RemoteAddr = "127.0.0.1:40000"
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", r.path, rec.Code, rec.Body.String())
				}
			}
		})
	}
	// keep serve's memory after those reads, as a sub-benchmark of its own
	// (a parent's metrics are not printed).
	b.Run("memory", func(b *testing.B) {
		for b.Loop() {
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(residentBytes())/(1<<20), "rss-MB")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MB")
	})
}

// deepCursor is the cursor of the page in the middle of the history, as
// a person who paged there holds it (the API's encoding: "o" and the
// position's created_at and id).
func deepCursor(rows int) string {
	i := rows / 2
	return base64URL(fmt.Sprintf("o%d.in_%d", historyStart+int64(i)*1000, i))
}

// historyStart is when the filled history starts (ms): a year before
// 2026-11-28, one input a second... a thousand ms apart.
const historyStart = int64(1_733_000_000_000)

const readsScript = `export default Keep.workflow({
  name: "orders",
  topics: { "order.placed": { from: "api" } },
  producers: {},
  consumers: { c: Keep.consumer({ subscribe: ["order.placed"],
    async prepare(ctx) {
      const [e] = await ctx.peek("order.placed")
      if (!e) return { reservations: [] }
      return { reservations: [{ topic: "order.placed", ids: [e.messageId] }], data: e.payload, ui: { title: "Order " + e.payload.order } }
    },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "https://shop.example.com/orders", json: p.data }) } }) } })`

// fillHistory inserts n inputs of workflow orders, each with its event
// (consumed), its consumer run (committed, with a trace) and its write
// (applied), as keep would have stored them, by SQL that generates the
// rows in the database.
func fillHistory(dialect, storeURL, sqlitePath string, n int) error {
	var db *sql.DB
	var err error
	series := ""
	cat := func(parts ...string) string { // SQL string concatenation
		s := parts[0]
		for _, p := range parts[1:] {
			s += " || " + p
		}
		return s
	}
	i := "CAST(i AS TEXT)"
	if dialect == "sqlite" {
		db, err = sql.Open("sqlite", "file:"+sqlitePath+"?_pragma=journal_mode(wal)&_pragma=synchronous(normal)")
		series = fmt.Sprintf("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i < %d) ", n)
	} else {
		db, err = sql.Open("pgx", storeURL)
		i = "i::text"
	}
	if err != nil {
		return err
	}
	defer db.Close()
	from := " FROM s"
	if dialect != "sqlite" {
		from = fmt.Sprintf(" FROM generate_series(1, %d) AS s(i)", n)
	}
	at := fmt.Sprintf("(%d + i*1000)", historyStart)
	var version int64
	if err := db.QueryRow(`SELECT active_version FROM workflows WHERE name='orders'`).Scan(&version); err != nil {
		return fmt.Errorf("the deployed workflow: %w", err)
	}
	trace := `'[{"at":1,"phase":"preparing","kind":"call","method":"ctx.peek","duration":1,"outcome":"1 event"},{"at":2,"phase":"mutating","kind":"call","method":"http.request","duration":84,"outcome":"201 Created","detail":"POST https://shop.example.com/orders"},{"at":3,"phase":"committed","kind":"note","outcome":"applied"}]'`
	stmts := []string{
		series + `INSERT INTO items (id, workflow, key, kind, source, type, external_id, title, status, current_attempt, created_by, last_run, last_version, created_at, updated_at)
SELECT ` + cat("'in_'", i) + `, 'orders', ` + cat("'api:order.placed:'", i) + `, 'input', 'api', 'order.placed', ` + i + `, ` + cat("'Order '", i, "' from customer'", "CAST(i % 997 AS TEXT)", "'@example.com'") + `, '', 1, 'api', ` + cat("'r_'", i) + `, ` + strconv.FormatInt(version, 10) + `, ` + at + `, ` + at + from,
		series + `INSERT INTO events (id, workflow, topic, message_id, payload, status, reserved_by, created_by, caused_by, attempt, created_at, updated_at)
SELECT i, 'orders', 'order.placed', ` + i + `, ` + cat(`'{"order":'`, i, `',"customer":"customer'`, "CAST(i % 997 AS TEXT)", `'@example.com","items":[{"sku":"MUG-BLUE","qty":2,"price":12.5}],"total":25}'`) + `, 'consumed', '', 'api', ` + cat(`'["in_'`, i, `'"]'`) + `, 1, ` + at + `, ` + at + from,
		series + `INSERT INTO event_causes (event_id, input_id) SELECT i, ` + cat("'in_'", i) + from,
		series + `INSERT INTO runs (id, workflow, version, handler, handler_type, phase, status, prepare_result, mutation_result, trace, created_at, updated_at, finished_at, open)
SELECT ` + cat("'r_'", i) + `, 'orders', ` + strconv.FormatInt(version, 10) + `, 'c', 'consumer', 'committed', 'committed', ` + cat(`'{"reservations":[{"topic":"order.placed","ids":["'`, i, `'"]}],"ui":{"title":"Order '`, i, `'"}}'`) + `, '{"status":201}', ` + trace + `, ` + at + `, ` + at + `, ` + at + `, 0` + from,
		series + `INSERT INTO mutations (id, workflow, run_id, handler, item_keys, attempt, tool, method, params, target, identity_key, payload_hash, idempotency_key, status, result, created_at, updated_at, sent_at)
SELECT ` + cat("'m_'", i) + `, 'orders', ` + cat("'r_'", i) + `, 'c', ` + cat(`'["in_'`, i, `'"]'`) + `, 1, 'http', 'request', ` + cat(`'{"method":"POST","url":"https://shop.example.com/orders","json":{"order":'`, i, `'}}'`) + `, 'POST https://shop.example.com/orders', ` + cat("'id_'", i) + `, 'h', ` + cat("'keep-'", i) + `, 'applied', '{"status":201,"body":{"ok":true}}', ` + at + `, ` + at + `, ` + at + from,
	}
	if dialect == "sqlite" {
		for _, q := range stmts {
			if _, err := db.Exec(q); err != nil {
				return fmt.Errorf("fill: %w\n%s", err, q)
			}
		}
		_, err = db.Exec(`PRAGMA wal_checkpoint(TRUNCATE); ANALYZE`)
		return err
	}
	if err := fillWithoutTriggers(db, stmts); err != nil {
		return err
	}
	_, err = db.Exec(`ANALYZE`)
	return err
}

// pgTallied are the tables whose rows PostgreSQL's per-row triggers
// count in the tallies (migrations 024_paged_reads.sql and
// 028_cheaper_tallies.sql): they have no other triggers of keep's.
var pgTallied = []string{"items", "runs", "mutations", "events"}

// fillWithoutTriggers runs the fill's statements on PostgreSQL with the
// tally triggers off, and writes their effect once: the tallies of
// workflow orders counted from its rows by GROUP BY, as the migration that
// made the triggers counts them. Row by row, the plpgsql trigger made a
// million inputs' fill take longer than this machine gave it; the tallies
// are the same. One transaction: the triggers are never seen off (the
// test's user owns its schema's tables, which ALTER TABLE needs), and
// keep is closed meanwhile.
func fillWithoutTriggers(db *sql.DB, stmts []string) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var qs []string
	for _, t := range pgTallied {
		qs = append(qs, "ALTER TABLE "+t+" DISABLE TRIGGER USER")
	}
	qs = append(qs, stmts...)
	qs = append(qs, `DELETE FROM tallies WHERE workflow = 'orders'`,
		`INSERT INTO tallies (workflow, kind, topic, status, n)
  SELECT workflow, 'input', '', '', count(*) FROM items WHERE workflow = 'orders' GROUP BY workflow`,
		`INSERT INTO tallies (workflow, kind, topic, status, n)
  SELECT workflow, 'run', '', status, count(*) FROM runs WHERE workflow = 'orders' GROUP BY workflow, status`,
		`INSERT INTO tallies (workflow, kind, topic, status, n)
  SELECT workflow, 'mutation', '', status, count(*) FROM mutations WHERE workflow = 'orders' GROUP BY workflow, status`,
		`INSERT INTO tallies (workflow, kind, topic, status, n)
  SELECT workflow, 'event', topic, CASE WHEN status = 'pending' AND reserved_by <> '' THEN 'reserved' ELSE status END, count(*)
  FROM events WHERE workflow = 'orders' GROUP BY 1, 2, 3, 4`)
	for _, t := range pgTallied {
		qs = append(qs, "ALTER TABLE "+t+" ENABLE TRIGGER USER")
	}
	for _, q := range qs {
		if _, err := tx.Exec(q); err != nil {
			return fmt.Errorf("fill: %w\n%s", err, q)
		}
	}
	return tx.Commit()
}

func base64URL(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
