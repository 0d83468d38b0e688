package engine_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/intake"
)

// What keep stores per unit of work (issue 44), measured on the store the
// engine's tests run on: storedBytes is the bytes of every live row of
// every table (each value as the database hands it back: text, numbers
// as digits), deterministic and the same measure on SQLite and
// PostgreSQL; fileBytes is keep.db's size after a checkpoint (SQLite).

// storedBytes sums the bytes of every value of every row keep stores.
func (e *env) storedBytes() int64 {
	e.t.Helper()
	driver, dsn, tables := "sqlite", "file:"+filepath.Join(e.opts.DataDir, "keep.db")+"?mode=ro", `SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'`
	if e.opts.Store != "" {
		driver, dsn, tables = "pgx", e.opts.Store, `SELECT table_name FROM information_schema.tables WHERE table_schema=current_schema() AND table_type='BASE TABLE'`
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	var names []string
	rows, err := db.Query(tables)
	if err != nil {
		e.t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			e.t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	var total int64
	for _, n := range names {
		rs, err := db.Query(`SELECT * FROM "` + n + `"`)
		if err != nil {
			e.t.Fatal(err)
		}
		cols, _ := rs.Columns()
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rs.Next() {
			if err := rs.Scan(ptrs...); err != nil {
				e.t.Fatal(err)
			}
			for _, v := range vals {
				total += int64(len(v))
			}
		}
		if err := rs.Err(); err != nil {
			e.t.Fatal(err)
		}
		rs.Close()

	}
	return total
}

// fileBytes is keep.db's size after a checkpoint of its write-ahead log
// (0 on PostgreSQL).
func (e *env) fileBytes() int64 {
	e.t.Helper()
	if e.opts.Store != "" {
		return 0
	}
	path := filepath.Join(e.opts.DataDir, "keep.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		e.t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		e.t.Fatal(err)
	}
	return fi.Size()
}

// poll makes the workflow's producers due now and steps until idle.
func (e *env) poll(wf string) {
	e.t.Helper()
	if err := e.k.QueueProducers(e.ctx(), wf); err != nil {
		e.t.Fatal(err)
	}
	e.settle()
}

// perPoll is what each of n polls of wf adds, after one poll more (the
// first that finds nothing new, which starts the row that counts them):
// stored bytes and keep.db's; first is what that one poll added.
func (e *env) perPoll(wf string, n int) (rowBytes, fileBytes float64, first int64) {
	e.t.Helper()
	before := e.storedBytes()
	e.poll(wf)
	b0, f0 := e.storedBytes(), e.fileBytes()
	first = b0 - before
	for range n {
		e.poll(wf)
	}
	b1, f1 := e.storedBytes(), e.fileBytes()
	return float64(b1-b0) / float64(n), float64(f1-f0) / float64(n), first
}

// feedServer serves a JSON feed of about 53 KB (items 1…count, newest
// last) and counts the reads; add puts a newer item in.
type feedServer struct {
	*httptest.Server
	count, reads atomic.Int64
	// fail is how many reads from now are answered 503.
	fail atomic.Int64
}

func newFeedServer(t testing.TB) *feedServer {
	f := &feedServer{}
	f.count.Store(180)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.reads.Add(1)
		if f.fail.Add(-1) >= 0 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		f.fail.Store(0)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(f.body())
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *feedServer) body() []byte {
	type item struct {
		ID      int64  `json:"id"`
		Title   string `json:"title"`
		Link    string `json:"link"`
		Summary string `json:"summary"`
	}
	var items []item
	for i := int64(1); i <= f.count.Load(); i++ {
		items = append(items, item{ID: i, Title: fmt.Sprintf("Release %d of the project", i), Link: fmt.Sprintf("https://example.com/releases/%d", i),
			Summary: strings.Repeat(fmt.Sprintf("change %d; ", i%10), 18)})
	}
	b, _ := json.MarshalIndent(map[string]any{"title": "Releases", "items": items}, "", " ")
	return b
}

// feedScript registers and publishes the items newer than its state's
// (the newest one only, the first time); a consumer POSTs each.
const feedScript = `export default Keep.workflow({ name: "feed",
  topics: { "release": {} },
  producers: { poll: { publishes: ["release"], schedule: { interval: "1m" },
    handler: async (ctx, state) => {
      const res = await ctx.http.request({ method: "GET", url: "%FEED%/feed.json" })
      const items = res.json.items
      const newest = Math.max(...items.map(i => i.id))
      const last = state && state.last ? state.last : newest - 1
      for (const it of items.filter(i => i.id > last)) {
        const inputId = ctx.registerInput({ source: "http", type: "record", id: String(it.id), title: it.title })
        await ctx.publish("release", { messageId: "release:" + it.id, inputId, payload: { id: it.id, title: it.title } })
      }
      return { last: newest }
    } } },
  consumers: { post: Keep.consumer({ subscribe: ["release"],
    async prepare(ctx) {
      const [ev] = await ctx.peek("release", { limit: 1 })
      if (!ev) return { reservations: [] }
      return { reservations: [{ topic: "release", ids: [ev.messageId] }], data: ev.payload }
    },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data }) },
  }) },
})`

// feedEnv is a keep allowed to read the feed and write to its sink, with
// the feed workflow deployed and its first poll done.
func feedEnv(t *testing.T) (*env, *feedServer, string) {
	e := newEnv(t)
	f := newFeedServer(t)
	host := strings.TrimPrefix(f.URL, "http://")
	if err := os.WriteFile(e.opts.ConfigFile, []byte(testPolicy+"\n[connectors.http]\nallow = [\""+e.sink.Host()+"\", \""+host+"\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.restart()
	wf := e.deploy(strings.ReplaceAll(feedScript, "%FEED%", f.URL))
	e.settle()
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink after the first poll: %d, want 1", n)
	}
	return e, f, wf
}

// quickstartEnv is the quick start with files order files in incoming/,
// its first poll and their confirmations done.
func quickstartEnv(t *testing.T, files int) (*env, string) {
	e := newEnvWith(t, roomyPolicy)
	in := filepath.Join(e.dir, "files", "incoming")
	if err := os.MkdirAll(in, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range files {
		if err := os.WriteFile(filepath.Join(in, fmt.Sprintf("order-%d.json", i)), []byte(fmt.Sprintf(`{"id":%d,"customer":"c%d@example.com","items":[{"sku":"MUG","qty":1,"price":2}]}`, i, i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.ReadFile("../../examples/quickstart/workflow.js")
	if err != nil {
		t.Fatal(err)
	}
	wf := e.deploy(string(src))
	e.settle()
	outs, err := os.ReadDir(filepath.Join(e.dir, "files", "out"))
	if err != nil || len(outs) != files {
		t.Fatalf("confirmations after the first poll: %d (%v), want %d", len(outs), err, files)
	}
	return e, wf
}

// apiScript takes events posted through the event API: its consumer
// POSTs each one's payload.
const apiScript = `export default Keep.workflow({ name: "api",
  topics: { "job": { from: "api" } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) {
      const [ev] = await ctx.peek("job")
      if (!ev) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [ev.messageId] }], data: ev.payload }
    },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data }) },
  }) },
})`

// perEvent is what each of n events posted through the event API, and
// its consumer's POST, adds.
func perEvent(t *testing.T, n int) (rowBytes, fileBytes float64) {
	e := newEnv(t)
	wf := e.deploy(apiScript)
	post := func(i int) {
		id := fmt.Sprintf("e%d", i)
		payload := fmt.Sprintf(`{"id":%q,"customer":"c%d@example.com","amount":%d,"note":"an order placed through the shop's API"}`, id, i, 100+i)
		if _, err := intake.Post(e.ctx(), e.k.Store, intake.APIEvent{Workflow: wf, Topic: "job", ID: id, Title: "Job " + id, Payload: json.RawMessage(payload)}, time.Now()); err != nil {
			t.Fatal(err)
		}
		e.settle()
	}
	post(0) // the first: tables and pages made once
	b0, f0 := e.storedBytes(), e.fileBytes()
	for i := 1; i <= n; i++ {
		post(i)
	}
	b1, f1 := e.storedBytes(), e.fileBytes()
	if w := len(e.sink.Writes()); w != n+1 {
		t.Fatalf("writes at the sink: %d, want %d", w, n+1)
	}
	return float64(b1-b0) / float64(n), float64(f1-f0) / float64(n)
}

// TestBytesStoredPerPollAndEvent reports the four figures of
// docs/performance.md "Quiet polls and traces (issue 44)".
func TestBytesStoredPerPollAndEvent(t *testing.T) {
	t.Run("feed", func(t *testing.T) {
		e, f, wf := feedEnv(t)
		rb, fb, first := e.perPoll(wf, 20)
		t.Logf("a 53 KB feed (%d bytes), nothing new: %.0f bytes of rows, %.0f bytes of keep.db per poll (the first of them: %d bytes of rows)", len(f.body()), rb, fb, first)
	})
	t.Run("quickstart-3", func(t *testing.T) {
		e, wf := quickstartEnv(t, 3)
		rb, fb, first := e.perPoll(wf, 20)
		t.Logf("the quick start, 3 files, nothing new: %.0f bytes of rows, %.0f bytes of keep.db per poll (the first of them: %d bytes of rows)", rb, fb, first)
	})
	t.Run("quickstart-1000", func(t *testing.T) {
		if testing.Short() || os.Getenv("KEEP_TEST_THOUSAND_FILES") == "" {
			t.Skip("1,000 files take minutes: set KEEP_TEST_THOUSAND_FILES=1")
		}
		e, wf := quickstartEnv(t, 1000)
		rb, fb, first := e.perPoll(wf, 5)
		t.Logf("the quick start, 1,000 files, nothing new: %.0f bytes of rows, %.0f bytes of keep.db per poll (the first of them: %d bytes of rows)", rb, fb, first)
	})
	t.Run("event", func(t *testing.T) {
		rb, fb := perEvent(t, 20)
		t.Logf("an event API post and its consumer's POST: %.0f bytes of rows, %.0f bytes of keep.db per event", rb, fb)
	})
}
