// Package bench is `keep bench`: it measures what keep's durability costs
// on this machine, in one run, as figures and as ratios to the disk's own
// fsync rate — the physical limit of "one input → one durable side effect".
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/daemon"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqlite"
)

// Options choose the sizes.
type Options struct {
	Quick bool
	// Dir is where the temporary data directories go (default: the system temp dir).
	Dir string
	// Progress, when set, receives a line per step.
	Progress io.Writer
}

// Result is what `keep bench --json` prints.
type Result struct {
	Quick          bool    `json:"quick"`
	FsyncRate      float64 `json:"fsyncRate"`
	FsyncsPerRun   float64 `json:"fsyncsPerRun"`
	SerialBound    float64 `json:"serialBoundEventsPerSec"`
	W1Events       int     `json:"w1Events"`
	W1EventsPerSec float64 `json:"w1EventsPerSec"`
	W1Ratio        float64 `json:"w1Ratio"`
	// The CPU figures count keep's process and the sandbox worker
	// processes it starts; the Worker ones are the workers' share.
	W1CPUMicros         float64 `json:"w1CpuMicrosPerEvent"`
	W1WorkerCPUMicros   float64 `json:"w1WorkerCpuMicrosPerEvent"`
	W100Events          int     `json:"w100Events"`
	W100EventsPerSec    float64 `json:"w100EventsPerSec"`
	W100OverW1          float64 `json:"w100OverW1"`
	W100FsyncsPerRun    float64 `json:"w100FsyncsPerRun"`
	W100CPUMicros       float64 `json:"w100CpuMicrosPerEvent"`
	W100WorkerCPUMicros float64 `json:"w100WorkerCpuMicrosPerEvent"`
	W100RSSBytes        int64   `json:"w100RssBytes"` // resident memory of the process after W=100 (0 where unknown)
	LatencyP50Millis    float64 `json:"latencyP50Millis"`
	LatencyP99Millis    float64 `json:"latencyP99Millis"`
	HandlerCallP50Micro float64 `json:"handlerCallP50Micros"`
	HandlerCallP99Micro float64 `json:"handlerCallP99Micros"`
	HandlerFirstP50     float64 `json:"handlerFirstCallP50Micros"`
	NewVMP50Micros      float64 `json:"newVMP50Micros"`
	// HostCallP50Micros is what one ctx call (here files.read) costs a
	// handler: a round trip between the sandbox worker and keep.
	HostCallP50Micros float64 `json:"hostCallP50Micros"`
	// Sandbox says where handlers ran: "wasm in keep's process", "worker
	// processes" or "in-process" (not isolated). With wasm, the sandbox
	// workers' CPU is 0: the handlers' CPU is keep's own.
	Sandbox           string   `json:"sandbox"`
	PeekEvents        int      `json:"peekTopicEvents"`
	PeekP50Millis     float64  `json:"peekP50Millis"`
	StartupWorkflows  int      `json:"startupWorkflows"`
	StartupEvents     int      `json:"startupPendingEvents"`
	StartupSeconds    float64  `json:"startupSeconds"`
	IdleWorkflows     int      `json:"idleWorkflows"`
	IdleWorkflowBytes float64  `json:"idleWorkflowBytes"`
	Notes             []string `json:"notes"`
}

func (o Options) say(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// Run measures everything.
func Run(ctx context.Context, o Options) (Result, error) {
	r := Result{Quick: o.Quick}
	if o.Dir != "" {
		// --dir names a disk to measure: a folder not made yet is made.
		if err := os.MkdirAll(o.Dir, 0o755); err != nil {
			return r, fmt.Errorf("--dir %s: %w", o.Dir, err)
		}
	}
	root, err := os.MkdirTemp(o.Dir, "keep-bench-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(root)
	n1, wN, perW, calls, peekN, startW, startE, idleW := 2000, 100, 40, 2000, 1000000, 10000, 100000, 10000
	if o.Quick {
		n1, wN, perW, calls, peekN, startW, startE, idleW = 300, 100, 6, 300, 100000, 2000, 20000, 2000
		r.Notes = append(r.Notes, "quick: smaller runs; the peek topic holds 100,000 events instead of 1,000,000; start-up uses 2,000 workflows and 20,000 pending events instead of 10,000 and 100,000; idle memory uses 2,000 workflows")
	}

	o.say("fsync rate of %s ...", root)
	if r.FsyncRate, err = fsyncRate(root, map[bool]int{true: 300, false: 2000}[o.Quick]); err != nil {
		return r, err
	}

	o.say("end to end, W=1, %d inputs ...", n1)
	e1, err := endToEnd(ctx, filepath.Join(root, "w1"), 1, n1)
	if err != nil {
		return r, fmt.Errorf("end to end W=1: %w", err)
	}
	r.W1Events, r.W1EventsPerSec, r.FsyncsPerRun, r.W1CPUMicros = n1, e1.perSec, e1.fsyncsPerRun, e1.cpuMicrosPerEvent
	r.W1WorkerCPUMicros = e1.workerMicrosPerEvent
	o.say("publish → commit latency, one event at a time ...")
	if r.LatencyP50Millis, r.LatencyP99Millis, err = latency(ctx, filepath.Join(root, "latency"), map[bool]int{true: 50, false: 200}[o.Quick]); err != nil {
		return r, fmt.Errorf("latency: %w", err)
	}
	if r.FsyncsPerRun > 0 {
		r.SerialBound = r.FsyncRate / r.FsyncsPerRun
		r.W1Ratio = r.W1EventsPerSec / r.SerialBound
	}

	o.say("end to end, W=%d, %d inputs each ...", wN, perW)
	e100, err := endToEnd(ctx, filepath.Join(root, "w100"), wN, perW)
	if err != nil {
		return r, fmt.Errorf("end to end W=%d: %w", wN, err)
	}
	r.W100Events, r.W100EventsPerSec, r.W100FsyncsPerRun, r.W100CPUMicros = wN*perW, e100.perSec, e100.fsyncsPerRun, e100.cpuMicrosPerEvent
	r.W100WorkerCPUMicros = e100.workerMicrosPerEvent
	r.W100RSSBytes = residentBytes()
	if r.W1EventsPerSec > 0 {
		r.W100OverW1 = r.W100EventsPerSec / r.W1EventsPerSec
	}
	if n := cpuBoundNote(r); n != "" {
		r.Notes = append(r.Notes, n)
	}

	if err := measureSandbox(o, &r, calls); err != nil {
		return r, err
	}

	o.say("peek on a topic of %d events ...", peekN)
	r.PeekEvents = peekN
	if r.PeekP50Millis, err = peek(ctx, filepath.Join(root, "peek"), peekN); err != nil {
		return r, fmt.Errorf("peek: %w", err)
	}

	o.say("start-up with %d workflows and %d pending events ...", startW, startE)
	r.StartupWorkflows, r.StartupEvents = startW, startE
	if r.StartupSeconds, err = startup(ctx, filepath.Join(root, "startup"), startW, startE); err != nil {
		return r, fmt.Errorf("start-up: %w", err)
	}

	o.say("memory with %d idle workflows ...", idleW)
	r.IdleWorkflows = idleW
	if r.IdleWorkflowBytes, err = idleMemory(ctx, filepath.Join(root, "idle"), idleW); err != nil {
		return r, fmt.Errorf("idle memory: %w", err)
	}
	return r, nil
}

// measureSandbox measures handler calls: a warm call, a first call of a
// version, a new VM, a host call.
func measureSandbox(o Options, r *Result, calls int) error {
	o.say("sandbox, %d handler calls ...", calls)
	var err error
	if r.HandlerCallP50Micro, r.HandlerCallP99Micro, err = sandbox(calls); err != nil {
		return err
	}
	if r.HandlerFirstP50, r.NewVMP50Micros, err = sandboxFirstCall(map[bool]int{true: 10, false: 40}[o.Quick]); err != nil {
		return err
	}
	if r.HostCallP50Micros, err = hostCall(map[bool]int{true: 20, false: 100}[o.Quick]); err != nil {
		return err
	}
	switch {
	case script.InProcess():
		r.Sandbox = "in-process"
	case script.Wasm():
		r.Sandbox = "wasm in keep's process"
	default:
		r.Sandbox = "worker processes"
	}
	return nil
}

// fsyncRate writes and fsyncs a small block n times.
func fsyncRate(dir string, n int) (float64, error) {
	f, err := os.Create(filepath.Join(dir, "fsync.probe"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 512)
	start := time.Now()
	for i := 0; i < n; i++ {
		buf[0] = byte(i)
		if _, err := f.WriteAt(buf, 0); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

type e2e struct {
	perSec, fsyncsPerRun float64
	cpuMicrosPerEvent    float64 // user + system CPU time per event: keep's process and its sandbox workers
	workerMicrosPerEvent float64 // the sandbox workers' share of it
	// roundTripsPerRun: statements sent to the server per consumer run,
	// leases and all (PostgreSQL; 0 on SQLite).
	roundTripsPerRun float64
	// statements: the SQL statements the timed part ran (SQLite; 0 on
	// PostgreSQL), the workflows' last, empty runs included.
	statements int64
}

// cpuBoundNote explains a W=1 ratio far from the serial bound: one
// workflow's runs are strictly serial, so each event costs its CPU plus its
// fsyncs, and the ratio is near fsync time ÷ (CPU + fsync time) (near: the
// CPU time includes the kernel's side of fsync).
func cpuBoundNote(r Result) string {
	if r.FsyncRate <= 0 || r.W1CPUMicros <= 0 || r.W1Ratio >= 0.5 {
		return ""
	}
	f := 1e6 / r.FsyncRate * r.FsyncsPerRun // µs of fsync per event
	return fmt.Sprintf("W=1 is CPU-bound here: %.0f µs of CPU per event (the kernel's share of fsync included) beside %.0f µs of fsync, which bounds W=1 near %.0f%% of the serial bound (docs/performance.md)",
		r.W1CPUMicros, f, 100*f/(r.W1CPUMicros+f))
}

// residentBytes reads the process's resident memory (VmRSS) on Linux: Go's
// heap plus what QuickJS and SQLite allocate outside it. 0 elsewhere.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			var kb int64
			fmt.Sscan(f[1], &kb)
			return kb << 10
		}
	}
	return 0
}

func benchScript(name, sinkURL string, n int) string {
	return fmt.Sprintf(`export default Keep.workflow({
  name: %q,
  topics: { "in": {} },
  producers: { p: { publishes: ["in"], schedule: { interval: "1d" }, handler: async (ctx, state) => {
    if (state && state.done) return state
    for (let i = 0; i < %d; i++) {
      const inputId = ctx.registerInput({ source: "system", type: "random", id: String(i), title: "Input " + i })
      await ctx.publish("in", { messageId: String(i), inputId, payload: { i } })
    }
    return { done: true }
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["in"],
    async prepare(ctx) { const [e] = await ctx.peek("in", { limit: 1 }); if (!e) return { reservations: [] }; return { reservations: [{ topic: "in", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: %q + "/sink/" + p.data.i, json: p.data }) },
  }) },
})`, name, n, sinkURL)
}

// endToEnd runs W workflows × N inputs, each input one consumer run with one
// http mutation to a local sink, and reads the figures from the ledgers.
func endToEnd(ctx context.Context, dir string, w, n int) (e2e, error) {
	return endToEndOn(ctx, dir, "", w, n)
}

// endToEndOn is endToEnd on the store storeURL names ("" for the data
// directory's SQLite file).
func endToEndOn(ctx context.Context, dir, storeURL string, w, n int) (e2e, error) {
	var res e2e
	l, err := load(ctx, dir, storeURL, w, n)
	if err != nil {
		return res, err
	}
	defer l.close()
	k := l.k
	stats0 := k.Store.Stats()
	start, cpu0 := time.Now(), cpuNow()
	if err := k.Scheduler.RunUntilIdle(ctx); err != nil {
		return res, err
	}
	elapsed, cpu := time.Since(start), cpuNow().sub(cpu0)
	if got := l.applied.Load(); got != int64(w*n) {
		return res, fmt.Errorf("the sink saw %d writes, want %d", got, w*n)
	}
	stats := k.Store.Stats()
	commits, txs := stats.Commits-stats0.Commits, stats.Transactions-stats0.Transactions
	// Each workflow ends with one empty consumer run (one transaction) that
	// finds nothing left. The runs' own transactions, times the fsyncs per
	// transaction that group commit achieved (1 with one workflow):
	if txs > 0 {
		res.fsyncsPerRun = float64(txs-int64(w)) / float64(w*n) * float64(commits) / float64(txs)
	}
	res.roundTripsPerRun = float64(stats.RoundTrips-stats0.RoundTrips) / float64(w*n)
	res.statements = stats.Statements - stats0.Statements
	res.perSec = float64(w*n) / elapsed.Seconds()
	res.cpuMicrosPerEvent = float64(cpu.total().Microseconds()) / float64(w*n)
	res.workerMicrosPerEvent = float64(cpu.workers.Microseconds()) / float64(w*n)
	return res, nil
}

// loaded is a keep with W bench workflows deployed (bench-000, …), each
// with its N events published and its consumer's runs to make.
type loaded struct {
	k       *daemon.Keep
	sink    *httptest.Server
	applied *atomic.Int64 // writes the sink saw
}

func (l *loaded) close() {
	l.k.Close()
	l.sink.Close()
}

// load deploys the workflows and runs their producers.
func load(ctx context.Context, dir, storeURL string, w, n int) (*loaded, error) {
	l := &loaded{applied: &atomic.Int64{}}
	l.sink = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		l.applied.Add(1)
		rw.WriteHeader(http.StatusCreated)
	}))
	if err := l.open(dir, storeURL); err != nil {
		l.sink.Close()
		return nil, err
	}
	if err := l.deploy(ctx, w, n); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// open opens keep on the data directory and store, allowed to write to
// the bench's sink.
func (l *loaded) open(dir, storeURL string) error {
	k, err := daemon.Open(daemon.Options{DataDir: dir, Store: storeURL, Allow: []string{l.sink.Listener.Addr().String()}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	l.k = k
	return err
}

func (l *loaded) deploy(ctx context.Context, w, n int) error {
	if err := l.install(ctx, w, n); err != nil {
		return err
	}
	return l.produce(ctx, w, n)
}

// install deploys the W bench workflows, each to publish n events.
func (l *loaded) install(ctx context.Context, w, n int) error {
	for i := 0; i < w; i++ {
		if _, err := control.DeployAndGrant(ctx, l.k.Engine, "bench.js", benchScript(fmt.Sprintf("bench-%03d", i), l.sink.URL, n), control.DeployOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// produce runs each workflow's producer until its n events are pending
// (the consumer's handler kept from running), so that the timed part is
// the consumption.
func (l *loaded) produce(ctx context.Context, w, n int) error {
	k := l.k
	for i := 0; i < w; i++ {
		name := fmt.Sprintf("bench-%03d", i)
		if err := k.Store.Update(ctx, func(tx store.Tx) error {
			h, err := tx.HandlerGet(name, "c")
			if err != nil {
				return err
			}
			h.Dirty = false
			if err := tx.HandlerPut(h); err != nil {
				return err
			}
			return nil
		}); err != nil {
			return err
		}
		for {
			did, err := k.Engine.Step(ctx, name)
			if err != nil {
				return err
			}
			var pending int
			if err := k.Store.View(ctx, func(tx store.Tx) error { pending, err = tx.CountPending(name); return err }); err != nil {
				return err
			}
			if !did || pending == n {
				break
			}
		}
	}
	return nil
}

const latencyScript = `export default Keep.workflow({
  name: "latency",
  topics: { "in": {} },
  producers: { p: { publishes: ["in"], schedule: { interval: "1d" }, handler: async (ctx, state) => {
    const n = ((state && state.n) || 0) + 1
    const inputId = ctx.registerInput({ source: "system", type: "random", id: String(n), title: "Input " + n })
    await ctx.publish("in", { messageId: String(n), inputId, payload: { i: n } })
    return { n }
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["in"],
    async prepare(ctx) { const [e] = await ctx.peek("in", { limit: 1 }); if (!e) return { reservations: [] }; return { reservations: [{ topic: "in", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/sink/" + p.data.i, json: p.data }) },
  }) },
})`

// latency publishes one event at a time and measures from the producer's
// commit (the event's creation) to the consumer run's commit.
func latency(ctx context.Context, dir string, m int) (p50, p99 float64, err error) {
	sink := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		rw.WriteHeader(http.StatusCreated)
	}))
	defer sink.Close()
	k, err := daemon.Open(daemon.Options{DataDir: dir, Allow: []string{sink.Listener.Addr().String()}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return 0, 0, err
	}
	defer k.Close()
	if _, err := control.DeployAndGrant(ctx, k.Engine, "latency.js", strings.ReplaceAll(latencyScript, "%SINK%", sink.URL), control.DeployOptions{}); err != nil {
		return 0, 0, err
	}
	var lat []float64
	for i := 0; i < m; i++ {
		if i > 0 {
			ctrl := &control.Control{Store: k.Store}
			if _, err := ctrl.Do(ctx, control.Request{Action: kt.ActRunNow, Workflow: "latency"}); err != nil {
				return 0, 0, err
			}
		}
		if err := k.Scheduler.RunUntilIdle(ctx); err != nil {
			return 0, 0, err
		}
		err := k.Store.View(ctx, func(tx store.Tx) error {
			ev, err := tx.EventGet("latency", "in", fmt.Sprint(i+1))
			if err != nil {
				return err
			}
			r, err := tx.RunGet(ev.ReservedBy)
			if err != nil {
				return err
			}
			lat = append(lat, float64(r.FinishedAt-ev.CreatedAt))
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
	}
	return percentile(lat, 0.5), percentile(lat, 0.99), nil
}

func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

const sandboxScript = `export default Keep.workflow({ name: "s", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    const r = await ctx.files.read({ path: "x" }); return { n: ((state && state.n) || 0) + 1, len: r.content.length } } } } })`

var sandboxInvocation = script.Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`{"n":1}`)},
	Tools: map[string][]string{"files": {"read"}}, Limits: script.Limits{Timeout: 10 * time.Second, MemoryLimit: 64 << 20},
	Host: func(m string, a json.RawMessage) (json.RawMessage, error) {
		if m == "files.read" {
			return json.RawMessage(`{"content":"hello"}`), nil
		}
		return nil, nil
	}}

// sandbox measures handler calls of one compiled script: after the first,
// each runs on a VM from the pool (internal/script/vmpool.go).
func sandbox(n int) (p50, p99 float64, err error) {
	p, err := script.Compile("bench.js", sandboxScript)
	if err != nil {
		return 0, 0, err
	}
	defer p.Release()
	inv := sandboxInvocation
	var ds []float64
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := p.Invoke(inv); err != nil {
			return 0, 0, err
		}
		ds = append(ds, float64(time.Since(start).Microseconds()))
	}
	return percentile(ds, 0.5), percentile(ds, 0.99), nil
}

// hostCall measures one ctx call from inside a handler: a handler making 201
// calls against one making 1, the difference per call.
func hostCall(n int) (float64, error) {
	many, err := script.Compile("bench.js", strings.Replace(sandboxScript, `const r = await ctx.files.read({ path: "x" })`,
		`let r; for (let i = 0; i < 201; i++) r = await ctx.files.read({ path: "x" })`, 1))
	if err != nil {
		return 0, err
	}
	defer many.Release()
	one, err := script.Compile("bench.js", sandboxScript)
	if err != nil {
		return 0, err
	}
	defer one.Release()
	var per []float64
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := many.Invoke(sandboxInvocation); err != nil {
			return 0, err
		}
		m := time.Since(start)
		start = time.Now()
		if _, err := one.Invoke(sandboxInvocation); err != nil {
			return 0, err
		}
		per = append(per, float64((m-time.Since(start)).Microseconds())/200)
	}
	return percentile(per, 0.5), nil
}

// bulk inserts rows through raw SQL in large transactions (setting up, not measuring).
// sandboxFirstCall measures the first call of a script version (its
// bytecode loaded into a VM from the pool, then the call), and the creation
// of a new VM (prelude and lockdown), which a call pays when no VM is idle.
func sandboxFirstCall(n int) (first, newVM float64, err error) {
	var ds, vs []float64
	for i := 0; i < n; i++ {
		p, err := script.Compile("bench.js", strings.Replace(sandboxScript, `name: "s"`, fmt.Sprintf(`name: "s%d"`, i), 1))
		if err != nil {
			return 0, 0, err
		}
		start := time.Now()
		_, err = p.Invoke(sandboxInvocation)
		ds = append(ds, float64(time.Since(start).Microseconds()))
		p.Release()
		if err != nil {
			return 0, 0, err
		}
		d, err := script.NewVMCost(sandboxInvocation.Limits)
		if err != nil {
			return 0, 0, err
		}
		vs = append(vs, float64(d.Microseconds()))
	}
	return percentile(ds, 0.5), percentile(vs, 0.5), nil
}

// seed writes n rows through store.Tx in transactions of batch rows:
// setting up, not measuring; the same calls any backend implements.
func seed(path string, n, batch int, fn func(tx store.Tx, i int) error) error {
	st, err := sqlite.Open(path)
	if err != nil {
		return err
	}
	defer st.Close()
	for i := 0; i < n; {
		if err := st.Update(context.Background(), func(tx store.Tx) error {
			for j := 0; j < batch && i < n; j, i = j+1, i+1 {
				if err := fn(tx, i); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

func peek(ctx context.Context, dir string, n int) (float64, error) {
	path := filepath.Join(dir, "keep.db")
	now := time.Now().UnixMilli()
	err := seed(path, n, 20000, func(tx store.Tx, i int) error {
		status := kt.EventConsumed
		if i >= n-100 {
			status = kt.EventPending
		}
		_, err := tx.EventPublish(&kt.Event{Workflow: "w", Topic: "t", MessageID: fmt.Sprint(i), Payload: json.RawMessage(`{}`), Status: status, CreatedAt: now, UpdatedAt: now})
		return err
	})
	if err != nil {
		return 0, err
	}
	st, err := sqlite.Open(path)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	var ds []float64
	for i := 0; i < 200; i++ {
		start := time.Now()
		if err := st.View(ctx, func(tx store.Tx) error {
			evs, err := tx.EventsPending("w", "t", 100)
			if err == nil && len(evs) != 100 {
				err = fmt.Errorf("peek found %d events", len(evs))
			}
			return err
		}); err != nil {
			return 0, err
		}
		ds = append(ds, float64(time.Since(start).Microseconds())/1000)
	}
	return percentile(ds, 0.5), nil
}

func seedWorkflows(ctx context.Context, dir string, w, events int) error {
	path := filepath.Join(dir, "keep.db")
	src := benchScript("x", "http://127.0.0.1:1", 1)
	now := time.Now().UnixMilli()
	if err := seed(path, w, 5000, func(tx store.Tx, i int) error {
		name := fmt.Sprintf("wf-%05d", i)
		v := kt.Version{Workflow: name, Major: 1, Script: strings.Replace(src, `"x"`, fmt.Sprintf("%q", name), 1), File: "bench.js", CreatedAt: now}
		if err := tx.VersionInsert(&v); err != nil {
			return err
		}
		if err := tx.WorkflowPut(kt.Workflow{Name: name, ActiveVersion: v.ID, CreatedAt: now, UpdatedAt: now}); err != nil {
			return err
		}
		if err := tx.HandlerPut(kt.Handler{Workflow: name, Name: "p", Type: kt.HandlerProducer, NextRunAt: now + 86400000, UpdatedAt: now}); err != nil {
			return err
		}
		return tx.HandlerPut(kt.Handler{Workflow: name, Name: "c", Type: kt.HandlerConsumer, UpdatedAt: now})
	}); err != nil {
		return err
	}
	if events == 0 {
		return nil
	}
	return seed(path, events, 20000, func(tx store.Tx, i int) error {
		_, err := tx.EventPublish(&kt.Event{Workflow: fmt.Sprintf("wf-%05d", i%w), Topic: "in", MessageID: fmt.Sprint(i), Payload: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now})
		return err
	})
}

// startup measures what keep serve does before it can schedule: open and
// migrate the store, recover runs, and find the due work.
func startup(ctx context.Context, dir string, w, events int) (float64, error) {
	if err := seedWorkflows(ctx, dir, w, events); err != nil {
		return 0, err
	}
	start := time.Now()
	k, err := daemon.Open(daemon.Options{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return 0, err
	}
	defer k.Close()
	if _, err := k.Recover(ctx); err != nil {
		return 0, err
	}
	if err := k.Store.View(ctx, func(tx store.Tx) error {
		_, err := tx.DueWorkflows(time.Now().UnixMilli())
		return err
	}); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}

// idleMemory measures the heap keep holds for deployed, idle workflows
// after one pass of its scheduler over them.
func idleMemory(ctx context.Context, dir string, w int) (float64, error) {
	if err := seedWorkflows(ctx, dir, w, 0); err != nil {
		return 0, err
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	k, err := daemon.Open(daemon.Options{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return 0, err
	}
	defer k.Close()
	if err := k.Scheduler.RunUntilIdle(ctx); err != nil {
		return 0, err
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	delta := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	if delta < 0 {
		delta = 0
	}
	return delta / float64(w), nil
}
