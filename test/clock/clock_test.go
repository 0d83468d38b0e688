// Package clock tests that a step of keep's wall clock (NTP, a resumed
// virtual machine) neither sends a write twice nor makes a check wait for
// the step (issue 44: time that cannot jump). keep is built with the
// build tag keeptestclock, whose binary steps its wall clock by the
// duration in the file KEEP_TEST_CLOCK_FILE names (internal/clock); the
// monotonic clock does not move, as in a real step.
package clock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/backend"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testsink"
)

var keepBin string

func TestMain(m *testing.M) {
	testbin.MainTags(m, &keepBin, "keeptestclock")
}

// The write times out after 1 s (8 s with two nodes); keep believes a "not found" only 10 s
// after it sent the write (reconcile_settle); the sink applies it 4 s after
// it came in.
const (
	script = `export default Keep.workflow({ name: "orders", topics: { "o": {} },
  producers: { p: { publishes: ["o"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const id = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "Order 1" });
    await ctx.publish("o", { messageId: "1", inputId: id, payload: {} }); } } },
  consumers: { c: Keep.consumer({ subscribe: ["o"],
    async prepare(ctx) { const [e] = await ctx.peek("o"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "o", ids: [e.messageId] }], data: {} }; },
    async mutate(ctx) { await ctx.http.request({ method: "POST", url: "%SINK%/write/1", json: { n: 1 }, timeoutMs: %TIMEOUT%,
      reconcile: { url: "%SINK%/writes/{idempotencyKey}" } }); },
  }) } });`
	policy  = "[policy]\nreconcile_settle = \"10s\"\nreconcile_backoff = \"20ms\"\ntransient_backoff = \"20ms\"\n"
	applyIn = 4 * time.Second
)

// rig is one test's keep: its files, its store, its clock's file.
type rig struct {
	t     *testing.T
	dir   string
	store string // "" for the data directory's SQLite
}

// newRig deploys the workflow, its write timing out after callTimeout.
func newRig(t *testing.T, sink *testsink.Sink, storeURL string, callTimeout time.Duration) *rig {
	r := &rig{t: t, dir: t.TempDir(), store: storeURL}
	if err := os.WriteFile(filepath.Join(r.dir, "keep.toml"), []byte(policy+sink.AllowTOML()), 0o644); err != nil {
		t.Fatal(err)
	}
	wf := filepath.Join(r.dir, "wf.js")
	if err := os.WriteFile(wf, []byte(strings.NewReplacer("%SINK%", sink.URL, "%TIMEOUT%", fmt.Sprint(callTimeout.Milliseconds())).Replace(script)), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"deploy", "--grant", "--data", filepath.Join(r.dir, "a"), wf}
	if storeURL != "" {
		args = append(args[:len(args)-1], "--store", storeURL, wf)
	}
	if out, err := exec.Command(keepBin, args...).CombinedOutput(); err != nil {
		t.Fatalf("deploy: %v\n%s", err, out)
	}
	return r
}

// clockFile is node's clock file, holding its step (none yet).
func (r *rig) clockFile(node string) string {
	p := filepath.Join(r.dir, node+".clock")
	r.step(p, 0)
	return p
}

// step sets the step of the clock whose file is p.
func (r *rig) step(p string, d time.Duration) {
	if err := os.WriteFile(p+".new", []byte(d.String()), 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(p+".new", p); err != nil { // whole, never half written
		r.t.Fatal(err)
	}
}

// logs is what a keep process printed.
type logs struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logs) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logs) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// serve starts keep serve as node (its own data directory) with its clock
// stepped by the file clock says.
func (r *rig) serve(node, clock string) *logs {
	l, _ := r.start(node, clock)
	return l
}

// start is serve, with the process.
func (r *rig) start(node, clock string) (*logs, *exec.Cmd) {
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(r.dir, node), "--config", filepath.Join(r.dir, "keep.toml")}
	if r.store != "" {
		args = append(args, "--store", r.store)
	}
	cmd := exec.Command(keepBin, args...)
	cmd.Env = append(os.Environ(), "KEEP_TEST_CLOCK_FILE="+clock)
	l := &logs{}
	cmd.Stdout, cmd.Stderr = l, l
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() })
	return l, cmd
}

// ledger is what the store holds of the write and its run.
type ledger struct {
	muts  []kt.Mutation
	open  *kt.Run
	lease kt.Lease
	nodes []kt.Node
}

func (r *rig) read() ledger {
	r.t.Helper()
	st := r.open()
	defer st.Close()
	l, err := readFrom(st)
	if err != nil {
		r.t.Fatal(err)
	}
	return l
}

// open opens the rig's store.
func (r *rig) open() store.Store {
	r.t.Helper()
	loc, err := backend.Parse(r.store, filepath.Join(r.dir, "a"))
	if err != nil {
		r.t.Fatal(err)
	}
	st, err := loc.Open()
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

func readFrom(st store.Store) (ledger, error) {
	var l ledger
	err := st.View(context.Background(), func(tx store.Tx) error {
		var err error
		if l.muts, err = tx.MutationList("orders"); err != nil {
			return err
		}
		if run, err := tx.RunOpen("orders"); err == nil {
			l.open = &run
		} else if !errors.Is(err, kt.ErrNotFound) {
			return err
		}
		if l.lease, err = tx.LeaseGet("orders"); err != nil && !errors.Is(err, kt.ErrNotFound) {
			return err
		}
		l.nodes, err = tx.NodeList()
		return err
	})
	return l, err
}

// applied says the write is applied in the ledger and its run done.
func (l ledger) applied() bool {
	return len(l.muts) == 1 && l.muts[0].Status == kt.MutationApplied && l.open == nil
}

// waiting says the run waits for the check that follows a first "not
// found" (the status a person reads: "checks once more in …").
func (l ledger) waiting() bool {
	return l.open != nil && l.open.Status == kt.StatusReconciliation && strings.Contains(l.open.ErrorMessage, "checks once more in")
}

// One process's wall clock steps an hour forward right after it sent the
// write (the finding: keep believed a second "not found" 0.43 s
// later, the call's timeout "having passed", and sent the write again
// though the service applied the first at +4 s). The settle window is on
// the monotonic clock: keep checks again 10 s after the send, finds the
// write, and the service gets it once.
func TestAClockStepForwardDoesNotSendTheWriteTwice(t *testing.T) {
	sink := testsink.New()
	defer sink.Close()
	sink.Queue(testsink.ApplyAfter(applyIn))
	r := newRig(t, sink, "", time.Second)
	clock := r.clockFile("a")
	sink.OnWrite = func() { r.step(clock, time.Hour) }
	said := r.serve("a", clock)
	testbin.WaitFor(t, "the write to be settled", func() bool { return r.read().applied() }, said)
	if n := sink.Requests(); n != 1 {
		t.Fatalf("the sink got the write %d times, want once (keep sent it again after its clock stepped)\n%s", n, said)
	}
	l := r.read()
	if len(sink.Writes()) != 1 || l.muts[0].ResolvedBy != kt.ResolvedByReconciliation {
		t.Fatalf("writes %d, the row %+v", len(sink.Writes()), l.muts[0])
	}
	// The step took: keep stamped the outcome by its stepped clock.
	if ahead := time.Until(time.UnixMilli(l.muts[0].UpdatedAt)); ahead < 30*time.Minute {
		t.Fatalf("keep's clock did not step (the outcome is stamped %s from now): the test tested nothing", ahead)
	}
}

// One process's wall clock steps an hour back while a write waits for its
// second check ("checks once more in 9s"): the check comes when it said,
// not an hour later (the issue: it waited an hour while the status said
// "checks once more in 10.993s"), and finds the write.
func TestAClockStepBackDoesNotMakeACheckWaitAnHour(t *testing.T) {
	sink := testsink.New()
	defer sink.Close()
	sink.Queue(testsink.ApplyAfter(applyIn))
	r := newRig(t, sink, "", time.Second)
	clock := r.clockFile("a")
	said := r.serve("a", clock)
	testbin.WaitFor(t, "the run to wait for its second check", func() bool { return r.read().waiting() }, said)
	before := r.read()
	r.step(clock, -time.Hour)
	testbin.WaitFor(t, "the second check to find the write (not an hour later)", func() bool { return r.read().applied() }, said)
	if n := sink.Requests(); n != 1 {
		t.Fatalf("the sink got the write %d times, want once\n%s", n, said)
	}
	// What the status said was the truth: the check was due about the
	// settle time after the send (not an hour), and keep's time did not
	// go back with the wall clock.
	m := before.muts[0]
	if wait := time.Duration(m.NextReconcileAt-m.SentAt) * time.Millisecond; wait > time.Minute {
		t.Fatalf("the check was due %s after the send, said %q", wait, before.open.ErrorMessage)
	}
	after := r.read().muts[0]
	if back := time.Duration(m.UpdatedAt-after.UpdatedAt) * time.Millisecond; back > 0 {
		t.Fatalf("keep's time went back %s with the wall clock", back)
	}
	// And the person reading keep's log learns why its times are ahead.
	if !strings.Contains(said.String(), "the clock stepped back") {
		t.Fatalf("keep did not say its clock stepped back:\n%s", said)
	}
}

// Two keep serve nodes on one PostgreSQL database, the second one's wall
// clock an hour ahead (the issue: it took the first's live lease at once,
// judging the lease's expiry by its own clock, and sent the write again
// 12 s later). Leases are stamped and judged by PostgreSQL's clock: the
// node ahead leaves the workflow to the first while that one renews its
// lease, and the write is sent once.
func TestANodeAnHourAheadTakesNoLiveLease(t *testing.T) {
	twoNodes(t, 0, time.Hour)
}

// The node that holds the lease has its wall clock stepped an hour back
// right after it sent the write: it renews the lease by the database's
// clock, not by its own (an expiry an hour in the past, which the other
// node took at once), and the write is sent once.
func TestANodeWhoseClockStepsBackDuringItsLeaseKeepsIt(t *testing.T) {
	twoNodes(t, -time.Hour, 0)
}

// twoNodes starts node a, which sends the write (its clock stepped by
// stepA right after), then node b with its clock stepped by stepB, and
// checks that the write is sent once and that no node took the other's
// live lease.
func twoNodes(t *testing.T, stepA, stepB time.Duration) {
	sink := testsink.New()
	defer sink.Close()
	sink.Queue(testsink.ApplyAfter(applyIn))
	// The call lasts 8 s (the service applies the write at 4 s and never
	// answers), the leases 6 s, renewed every 2 s: node a renews its lease
	// while its call is under way, and node b, which found the lease held
	// when it came up, asks again at its end, 6 s in, the call still under
	// way: when taking it would cut node a's step.
	r := newRig(t, sink, pgtest.FreshSchema(t), 8*time.Second)
	if err := os.WriteFile(filepath.Join(r.dir, "keep.toml"), []byte(policy+"lease_ttl = \"6s\"\n"+sink.AllowTOML()), 0o644); err != nil {
		t.Fatal(err)
	}
	clockA, clockB := r.clockFile("a"), r.clockFile("b")
	r.step(clockB, stepB)
	sent := make(chan struct{})
	var once sync.Once
	sink.OnWrite = func() {
		once.Do(func() {
			r.step(clockA, stepA)
			close(sent)
		})
	}
	saidA := r.serve("a", clockA)
	select {
	case <-sent:
	case <-time.After(testbin.Patience()):
		t.Fatalf("node a never sent the write\n%s", saidA)
	}
	saidB := r.serve("b", clockB)
	// Node b must be up while the write waits. Node a holds its lease
	// from the step's start until the write is settled (its call outlasts
	// the service's apply, so the first check finds it): a lease of
	// another token by then was taken from node a while it held it.
	st := r.open()
	defer st.Close()
	var (
		last  ledger
		bSeen bool
	)
	testbin.WaitFor(t, "the write to be settled", func() bool {
		l, err := readFrom(st)
		if err != nil {
			return false
		}
		last = l
		if !l.applied() && len(l.nodes) == 2 {
			bSeen = true
		}
		return l.applied()
	}, saidA)
	if last.lease.Token != 1 {
		t.Fatalf("the lease was taken from node a while it held it (token %d when the write was settled)\nnode a:\n%s\nnode b:\n%s", last.lease.Token, saidA, saidB)
	}
	if n := sink.Requests(); n != 1 {
		t.Fatalf("the sink got the write %d times, want once\nnode a:\n%s\nnode b:\n%s", n, saidA, saidB)
	}
	// A lease taken while its holder renews it is one the holder finds
	// lost at its next renewal: it says so.
	for name, said := range map[string]*logs{"a": saidA, "b": saidB} {
		if strings.Contains(said.String(), "lease lost") {
			t.Fatalf("node %s's live lease was taken:\nnode a:\n%s\nnode b:\n%s", name, saidA, saidB)
		}
	}
	if !bSeen {
		t.Fatalf("node b never came up before the write was settled (%d nodes): the test tested nothing\n%s", len(last.nodes), saidB)
	}
}

// keep is killed right after it sent the write, and its wall clock steps
// an hour forward before it starts again: the restarted process has no
// monotonic reading of the send, and the row's stored send time says the
// settle time passed an hour ago. It believes a "not found" only a settle
// time after the first one it saw itself, finds the write, and the
// service gets it once.
func TestARestartAcrossAClockStepDoesNotSendTheWriteTwice(t *testing.T) {
	sink := testsink.New()
	defer sink.Close()
	sink.Queue(testsink.ApplyAfter(applyIn))
	r := newRig(t, sink, "", time.Second)
	clock := r.clockFile("a")
	killed := make(chan struct{})
	var cmd *exec.Cmd
	var once sync.Once
	sink.OnWrite = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			close(killed)
		})
	}
	var first *logs
	first, cmd = r.start("a", clock)
	select {
	case <-killed:
	case <-time.After(testbin.Patience()):
		t.Fatalf("keep never sent the write\n%s", first)
	}
	_ = cmd.Wait()
	r.step(clock, time.Hour)
	if l := r.read(); len(l.muts) != 1 || l.muts[0].Status != kt.MutationInFlight {
		t.Fatalf("after the kill the row is %+v, want it in_flight", l.muts)
	}
	said := r.serve("a", clock)
	testbin.WaitFor(t, "the write to be settled after the restart", func() bool { return r.read().applied() }, said)
	if n := sink.Requests(); n != 1 {
		t.Fatalf("the sink got the write %d times, want once (the restarted keep believed a stale \"not found\")\n%s", n, said)
	}
}
