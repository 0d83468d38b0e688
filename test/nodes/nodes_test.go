// Package nodes tests several keep serve processes sharing one PostgreSQL
// database (issue 14): a paused node writes nothing once it wakes, a dead
// node's workflows are taken over.
package nodes

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/backend"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testsink"
)

var keepBin string

func TestMain(m *testing.M) {
	testbin.Main(m, &keepBin)
}

const script = `export default Keep.workflow({ name: "orders", topics: { "o": {} },
  producers: { p: { publishes: ["o"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const id = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "Order 1" });
    await ctx.publish("o", { messageId: "1", inputId: id, payload: {} }); } } },
  consumers: { c: Keep.consumer({ subscribe: ["o"],
    async prepare(ctx) { const [e] = await ctx.peek("o"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "o", ids: [e.messageId] }], data: {} }; },
    async mutate(ctx) { await ctx.http.request({ method: "POST", url: "%SINK%/write/1", json: { n: 1 }, timeoutMs: 500,
      reconcile: { url: "%SINK%/writes/{idempotencyKey}" } }); },
  }) } });`

type rig struct {
	t     *testing.T
	dir   string
	store string
}

func (r *rig) serve(name string, env ...string) *exec.Cmd {
	cmd := exec.Command(keepBin, "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(r.dir, name), "--store", r.store, "--config", filepath.Join(r.dir, "keep.toml"))
	cmd.Env = append(os.Environ(), env...)
	logf, _ := os.OpenFile(filepath.Join(r.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT); cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// deployOrders deploys script (its writes to sink) with a 1 s lease.
func (r *rig) deployOrders(sink *testsink.Sink) {
	os.WriteFile(filepath.Join(r.dir, "keep.toml"), []byte(sink.AllowTOML()+"[policy]\nlease_ttl = \"1s\"\nreconcile_backoff = \"20ms\"\nreconcile_settle = \"600ms\"\n"), 0o644)
	wf := filepath.Join(r.dir, "wf.js")
	os.WriteFile(wf, []byte(strings.ReplaceAll(script, "%SINK%", sink.URL)), 0o644)
	if out, err := exec.Command(keepBin, "deploy", "--grant", "--data", filepath.Join(r.dir, "deploy"), "--store", r.store, wf).CombinedOutput(); err != nil {
		r.t.Fatalf("deploy: %v %s", err, out)
	}
}

// openOrders opens the store at storeURL (closed when the test ends) and
// says whether the orders workflow's one input is done.
func openOrders(t *testing.T, storeURL string) (store.Store, func() bool) {
	loc, _ := backend.Parse(storeURL, "")
	st, err := loc.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, func() bool {
		ins, err := report.AllInputs(context.Background(), st, "orders")
		return err == nil && len(ins) == 1 && ins[0].Status == "done"
	}
}

// stopped says the process is stopped (state T in /proc).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "T"
}

// A node paused (SIGSTOP) right after it recorded a write in_flight, for
// longer than its lease: another node takes the workflow over and settles
// the write (reconcile, then sends it once); when the paused node wakes
// (SIGCONT) it sends nothing and writes nothing — its lease ran out by its
// own clock and its token is stale.
func TestAPausedNodeWritesNothingAfterItWakes(t *testing.T) {
	r := &rig{t: t, dir: t.TempDir(), store: pgtest.FreshSchema(t)}
	sink := testsink.New()
	defer sink.Close()
	r.deployOrders(sink)
	a := r.serve("a", "KEEP_TEST_STOP_AT=after-inflight")
	testbin.WaitFor(t, "node a to stop itself with the write in_flight", func() bool { return stopped(a.Process.Pid) })
	if n := sink.Requests(); n != 0 {
		t.Fatalf("the sink got %d requests before the pause", n)
	}
	r.serve("b")
	testbin.WaitFor(t, "node b to take over and send the write once", func() bool { return len(sink.Writes()) == 1 })
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Give the woken node every chance to do damage.
	time.Sleep(3 * time.Second)
	if n := len(sink.Writes()); n != 1 {
		t.Fatalf("%d writes at the sink after the paused node woke, want 1", n)
	}
	if n := sink.Requests(); n != 1 {
		t.Fatalf("%d write requests at the sink: the woken node sent its stale write", n)
	}
	loc, _ := backend.Parse(r.store, "")
	st, err := loc.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ins, err := report.AllInputs(context.Background(), st, "orders")
	if err != nil || len(ins) != 1 || ins[0].Status != "done" {
		t.Fatalf("the input after the takeover: %+v %v", ins, err)
	}
	logs, _ := os.ReadFile(filepath.Join(r.dir, "a.log"))
	if !strings.Contains(string(logs), "stop point after-inflight") {
		t.Fatalf("node a never paused:\n%s", logs)
	}
}

// proxy stands between a node and PostgreSQL, so a test can cut the node
// off (every connection closed, new ones refused) and let it back.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cut    bool
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				c.Close()
				p.mu.Unlock()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				p.mu.Unlock()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

// setCut cuts every connection and refuses new ones (true), or lets new
// ones through again (false).
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// A node cut from PostgreSQL in the middle of a write (its connections
// closed after it recorded the write in_flight) cannot record what came
// of it; another node takes the workflow over after the lease and settles
// the write through reconcile; when the cut node gets its connection back
// it writes nothing over the new owner's work: one write at the sink, the
// input done.
func TestANodeCutFromPostgresDoesNotWriteTwice(t *testing.T) {
	r := &rig{t: t, dir: t.TempDir(), store: pgtest.FreshSchema(t)}
	u, err := url.Parse(r.store)
	if err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = px.ln.Addr().String()
	sink := testsink.New()
	defer sink.Close()
	r.deployOrders(sink)
	direct := r.store
	r.store = viaProxy.String()
	a := r.serve("a", "KEEP_TEST_STOP_AT=after-inflight")
	r.store = direct
	testbin.WaitFor(t, "node a to record the write in_flight", func() bool { return stopped(a.Process.Pid) })
	px.setCut(true)
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r.serve("b")
	_, done := openOrders(t, direct)
	testbin.WaitFor(t, "node b to settle the write", done)
	px.setCut(false) // node a is back
	time.Sleep(3 * time.Second)
	if n := len(sink.Writes()); n != 1 {
		t.Fatalf("%d writes at the sink, want 1", n)
	}
	if !done() {
		t.Fatal("the input is not done any more after the cut node came back")
	}
}

// Two nodes share the work: neither holds more than its fair share of the
// workflows' leases at once (8 due workflows, 2 nodes: at most 4 each),
// and both take some.
func TestNodesShareTheWork(t *testing.T) {
	r := &rig{t: t, dir: t.TempDir(), store: pgtest.FreshSchema(t)}
	// A lease is kept while it is used between two renewals (every third
	// of lease_ttl, 2 s here): a workflow stepped every second keeps its
	// lease for ever, unless its holder hands it over.
	os.WriteFile(filepath.Join(r.dir, "keep.toml"), []byte("[policy]\nlease_ttl = \"6s\"\n"), 0o644)
	const workflows = 8
	for i := 0; i < workflows; i++ {
		// A producer that works for a while on every run, and runs often.
		src := fmt.Sprintf(`export default Keep.workflow({ name: "busy-%d", topics: { "t": {} },
  producers: { p: { publishes: ["t"], schedule: { interval: "1s" }, handler: async (ctx, s) => {
    const until = ctx.now() + 50; while (ctx.now() < until) {}
    return { n: ((s && s.n) || 0) + 1 } } } } })`, i)
		f := filepath.Join(r.dir, fmt.Sprintf("busy-%d.js", i))
		os.WriteFile(f, []byte(src), 0o644)
		if out, err := exec.Command(keepBin, "deploy", "--grant", "--data", filepath.Join(r.dir, "deploy"), "--store", r.store, f).CombinedOutput(); err != nil {
			t.Fatalf("deploy: %v %s", err, out)
		}
	}
	loc, _ := backend.Parse(r.store, "")
	st, err := loc.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	holds := func() map[string]int {
		ns, err := report.Nodes(context.Background(), st, time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, n := range ns {
			if n.Alive {
				out[n.ID] = len(n.Holds)
			}
		}
		return out
	}
	// Node a alone takes more than half of the workflows; when b joins, a
	// hands its excess over although it keeps stepping what it holds.
	r.serve("a")
	testbin.WaitFor(t, "node a, alone, to hold more than half of the leases", func() bool {
		for _, n := range holds() {
			if n > workflows/2 {
				return true
			}
		}
		return false
	})
	nodeB := r.serve("b")
	// The share holds once the nodes know each other: each counts the
	// nodes alive at its heartbeat (every 5 s) and sheds what it holds
	// beyond its share at its next renewal of leases. So: both rows seen,
	// then a heartbeat of each after that (which counted both), then the
	// share reached; from then on it must hold.
	testbin.WaitFor(t, "both nodes to be seen", func() bool { return len(holds()) == 2 })
	bothSeen := time.Now()
	testbin.WaitFor(t, "a heartbeat of each node that counted both", func() bool {
		ns, err := report.Nodes(context.Background(), st, time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			seen, err := time.Parse(time.RFC3339Nano, n.SeenAt)
			if err != nil {
				t.Fatal(err)
			}
			if !seen.After(bothSeen) {
				return false
			}
		}
		return len(ns) == 2
	})
	testbin.WaitFor(t, "both nodes to hold a share of the leases", func() bool {
		h := holds()
		if len(h) != 2 {
			return false
		}
		for _, n := range h {
			if n == 0 || n > workflows/2 {
				return false
			}
		}
		return true
	})
	most := map[string]int{}
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		ns, err := report.Nodes(context.Background(), st, time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			most[n.ID] = max(most[n.ID], len(n.Holds))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(most) != 2 {
		t.Fatalf("nodes seen: %v", most)
	}
	for id, n := range most {
		if n > workflows/2 {
			t.Errorf("node %s held %d leases at once, more than its share of %d", id, n, workflows/2)
		}
		if n == 0 {
			t.Errorf("node %s took no work: %v", id, most)
		}
	}
	// b stops (SIGTERM): it releases its leases and says it stopped, so
	// people see it stopped (not alive) at once, and a, alone again, takes
	// the work back at its next heartbeat and renewal.
	if err := nodeB.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := nodeB.Wait(); err != nil {
		t.Fatalf("node b after SIGTERM: %v", err)
	}
	ns, err := report.Nodes(context.Background(), st, time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	gone := 0
	for _, n := range ns {
		if n.StoppedAt != "" {
			gone++
			if n.Alive || len(n.Holds) != 0 {
				t.Errorf("the stopped node %s: alive %v, holds %v", n.ID, n.Alive, n.Holds)
			}
		}
	}
	if gone != 1 {
		t.Fatalf("nodes after b stopped: %+v; want one of them stopped", ns)
	}
	testbin.WaitFor(t, "node a, alone again, to hold more than half of the leases", func() bool {
		for _, n := range holds() {
			if n > workflows/2 {
				return true
			}
		}
		return false
	})
}

// A node paused (SIGSTOP) after its write reached the sink, before the
// commit that records the write's answer — between two transactions
// (after-call), or inside that commit's transaction with its reads sent
// and its workflow's lock taken (inside-commit: PostgreSQL ends that
// transaction, idle_in_transaction_session_timeout) — for longer than its
// lease. Another node takes the workflow over, finds the write applied
// (the reconcile probe) and settles the input. When the paused node wakes
// (SIGCONT) its held-back commit (the fence check, keep_fence, goes with
// it) stores nothing: one write at the sink, one write request, the input
// done, and the runs as the other node left them.
func TestANodePausedAfterItsWriteStoresNothingWhenItWakes(t *testing.T) {
	for _, at := range []string{"after-call", "inside-commit"} {
		t.Run(at, func(t *testing.T) {
			r := &rig{t: t, dir: t.TempDir(), store: pgtest.FreshSchema(t) + "&idle_in_transaction_session_timeout=1000"}
			sink := testsink.New()
			defer sink.Close()
			r.deployOrders(sink)
			a := r.serve("a", "KEEP_TEST_STOP_AT="+at)
			testbin.WaitFor(t, "node a to stop itself after its write", func() bool { return stopped(a.Process.Pid) })
			if n := len(sink.Writes()); n != 1 {
				t.Fatalf("%d writes at the sink before the pause, want 1", n)
			}
			r.serve("b")
			st, done := openOrders(t, r.store)
			testbin.WaitFor(t, "node b to take over and settle the write", done)
			runsNow := func() string {
				runs, _, err := report.Runs(context.Background(), st, "orders", store.Page{Limit: 50})
				if err != nil {
					t.Fatal(err)
				}
				var b strings.Builder
				for _, run := range runs {
					fmt.Fprintf(&b, "%s %s %s %s %v\n", run.ID, run.Handler, run.Phase, run.Status, run.Error)
				}
				return b.String()
			}
			settled := runsNow()
			if err := a.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			alog := filepath.Join(r.dir, "a.log")
			testbin.WaitFor(t, "node a to go on after the pause", func() bool {
				b, _ := os.ReadFile(alog)
				return strings.Contains(string(b), "continued after the test stop point")
			}, fileText(alog))
			// Then stop it (its step ends first): nothing of it can land later.
			if err := a.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { a.Process.Wait(); close(exited) }()
			testbin.WaitFor(t, "node a to exit", func() bool {
				select {
				case <-exited:
					return true
				default:
					return false
				}
			}, fileText(alog))
			if n := len(sink.Writes()); n != 1 {
				t.Fatalf("%d writes at the sink after the paused node woke, want 1", n)
			}
			if n := sink.Requests(); n != 1 {
				t.Fatalf("%d write requests at the sink, want 1", n)
			}
			if !done() {
				t.Fatal("the input is not done any more after the paused node woke")
			}
			if now := runsNow(); now != settled {
				logs, _ := os.ReadFile(alog)
				t.Fatalf("the runs changed after the paused node woke:\n%s\nwere:\n%s\nnode a said:\n%s", now, settled, logs)
			}
		})
	}
}

// fileText is a file's text, read when shown (testbin.WaitFor's said).
type fileText string

func (f fileText) String() string { b, _ := os.ReadFile(string(f)); return string(b) }
