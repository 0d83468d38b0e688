package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/store/postgres/pgtest"
)

// BenchmarkPostgresShare measures what keep's producer and consumer runs
// cost PostgreSQL itself (docs/performance.md, "PostgreSQL's share per
// run"): per registered input and per consumer run, the rows inserted,
// updated (HOT or not) and deleted by table, the tally triggers' calls
// and time, the WAL written, and the CPU of the server processes serving
// keep's connections (from /proc, sampled while the phase runs), beside
// keep's own CPU, commits and round trips. PostgreSQL's counters are
// read once keep closed its connections (a backend flushes them when it
// exits). Run it alone in a database of its own, so that the backends
// counted are keep's:
//
//	createdb pgshare
//	KEEP_TEST_POSTGRES='postgres://127.0.0.1:5432/pgshare?sslmode=disable' \
//	  go test -run '^$' -bench PostgresShare -benchtime 2000x ./internal/bench
//
// PGSHARE_W sets the number of workflows (32 unless set). The WAL figure
// is the server's whole WAL over the phase: other databases' writes
// inflate it.
func BenchmarkPostgresShare(b *testing.B) {
	w := 32
	if s := os.Getenv("PGSHARE_W"); s != "" {
		w, _ = strconv.Atoi(s)
	}
	n := b.N/w + 1
	u := pgtest.FreshSchema(b)
	schema := u[strings.LastIndex(u, "search_path=")+len("search_path="):]
	u += "&track_functions=pl" + os.Getenv("PGSHARE_PARAMS")
	obs, err := sql.Open("pgx", pgtest.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer obs.Close()
	dir := b.TempDir()
	ctx := context.Background()

	l := &loaded{applied: &atomic.Int64{}}
	l.sink = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		l.applied.Add(1)
		rw.WriteHeader(http.StatusCreated)
	}))
	defer l.sink.Close()
	// Migrations and deploy, outside the phases.
	if err := l.open(dir, u); err != nil {
		b.Fatal(err)
	}
	if err := l.install(ctx, w, n); err != nil {
		b.Fatal(err)
	}
	l.k.Close()
	if q := os.Getenv("PGSHARE_SQL"); q != "" { // an experiment's change to the schema
		if _, err := obs.Exec(`SET search_path = ` + schema + `; ` + q); err != nil {
			b.Fatal(err)
		}
	}
	phase := func(name string, runs int, do func() error) {
		before := pgCounters(b, obs, schema)
		if err := l.open(dir, u); err != nil {
			b.Fatal(err)
		}
		cpu0 := cpuNow()
		stop := sampleBackends(obs)
		if err := do(); err != nil {
			b.Fatal(err)
		}
		keepCPU := cpuNow().sub(cpu0)
		st := l.k.Store.Stats()
		l.k.Close()
		server := stop()
		after := pgCounters(b, obs, schema)
		reportShare(b, name, runs, keepCPU, server, st.Commits, st.RoundTrips, before, after)
	}
	phase("producer (per input)", w*n, func() error { return l.produce(ctx, w, n) })
	phase("consumer (per run)", w*n, func() error { return l.k.Scheduler.RunUntilIdle(ctx) })
	if got := l.applied.Load(); got != int64(w*n) {
		b.Fatalf("the sink saw %d writes, want %d", got, w*n)
	}
}

type counters struct {
	tables map[string][4]int64 // ins, upd, hot_upd, del
	funcs  map[string][2]float64
	wal    int64
}

func pgCounters(b *testing.B, db *sql.DB, schema string) counters {
	// Wait for keep's backends to exit (and so to flush their counters).
	for i := 0; i < 100; i++ {
		var left int
		db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&left)
		if left == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	c := counters{tables: map[string][4]int64{}, funcs: map[string][2]float64{}}
	conn, err := db.Conn(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	conn.ExecContext(context.Background(), `SELECT pg_stat_clear_snapshot()`)
	rows, err := conn.QueryContext(context.Background(), `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables WHERE schemaname = $1`, schema)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var name string
		var v [4]int64
		rows.Scan(&name, &v[0], &v[1], &v[2], &v[3])
		c.tables[name] = v
	}
	rows.Close()
	rows, err = conn.QueryContext(context.Background(), `SELECT funcname, calls, self_time FROM pg_stat_user_functions WHERE schemaname = $1`, schema)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var name string
		var calls, self float64
		rows.Scan(&name, &calls, &self)
		c.funcs[name] = [2]float64{calls, self}
	}
	rows.Close()
	conn.QueryRowContext(context.Background(), `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&c.wal)
	return c
}

// sampleBackends samples the CPU of the database's client backends (but
// the observer's) every 100 ms until the returned function is called,
// which gives their total CPU over the time.
func sampleBackends(db *sql.DB) func() time.Duration {
	var mu sync.Mutex
	first, last := map[int]int64{}, map[int]int64{}
	sample := func() {
		rows, err := db.Query(`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
		if err != nil {
			return
		}
		defer rows.Close()
		mu.Lock()
		defer mu.Unlock()
		for rows.Next() {
			var pid int
			rows.Scan(&pid)
			t := procTicks(pid)
			if t < 0 {
				continue
			}
			if _, ok := first[pid]; !ok {
				first[pid] = t
			}
			last[pid] = t
		}
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			sample()
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() time.Duration {
		sample()
		close(done)
		<-stopped
		var ticks int64
		for pid, t := range last {
			ticks += t - first[pid]
		}
		return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ = 100
	}
}

// procTicks is a process's user + system CPU in clock ticks (-1 when gone).
func procTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

func reportShare(b *testing.B, name string, runs int, keep cpu, server time.Duration, commits, trips int64, x, y counters) {
	per := func(v float64) float64 { return v / float64(runs) }
	fmt.Fprintf(os.Stderr, "\n%s, %d: keep %.0f µs (workers %.0f), PostgreSQL backends %.0f µs, commits %.2f, round trips %.2f, WAL %.0f B (server-wide)\n",
		name, runs, per(float64(keep.total().Microseconds())), per(float64(keep.workers.Microseconds())), per(float64(server.Microseconds())),
		per(float64(commits)), per(float64(trips)), per(float64(y.wal-x.wal)))
	var names []string
	for t := range y.tables {
		names = append(names, t)
	}
	sort.Strings(names)
	var tot [4]int64
	for _, t := range names {
		a, c := x.tables[t], y.tables[t]
		var d [4]int64
		for i := range d {
			d[i] = c[i] - a[i]
			tot[i] += d[i]
		}
		if d != [4]int64{} {
			fmt.Fprintf(os.Stderr, "  %-22s ins %.2f upd %.2f (hot %.2f) del %.2f\n", t, per(float64(d[0])), per(float64(d[1])), per(float64(d[2])), per(float64(d[3])))
		}
	}
	fmt.Fprintf(os.Stderr, "  %-22s ins %.2f upd %.2f (hot %.2f) del %.2f\n", "ALL", per(float64(tot[0])), per(float64(tot[1])), per(float64(tot[2])), per(float64(tot[3])))
	for f, c := range y.funcs {
		a := x.funcs[f]
		fmt.Fprintf(os.Stderr, "  fn %-19s calls %.2f self %.1f µs\n", f, per(c[0]-a[0]), per((c[1]-a[1])*1000))
	}
	b.ReportMetric(per(float64(server.Microseconds())), strings.Fields(name)[0]+"-pg-cpu-µs")
	b.ReportMetric(per(float64(keep.total().Microseconds())), strings.Fields(name)[0]+"-keep-cpu-µs")
}
