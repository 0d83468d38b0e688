package scheduler

// A node that stops cleanly records nodes.stopped_at (markStopped): the
// cases a helper's attack on 21a679b found, kept as tests.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/backend"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
)

// openAt opens the store at url; the caller closes it.
func openAt(t *testing.T, url string) store.Store {
	t.Helper()
	loc, err := backend.Parse(url, "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := loc.Open()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitUntil polls cond (a state, not a duration) with a generous bound.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func nodeRow(t *testing.T, st store.Store, id string) (kt.Node, bool) {
	t.Helper()
	var out kt.Node
	found := false
	if err := st.View(context.Background(), func(tx store.Tx) error {
		ns, err := tx.NodeList()
		for _, n := range ns {
			if n.ID == id {
				out, found = n, true
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out, found
}

// A lease held outside the loop when Run ends (the Maintainer's repair
// under WithLease, which keep serve runs beside Run) keeps the node from
// being recorded stopped until the repair releases it: a node shown
// "(stopped)" holds nothing (the attack found it recorded stopped with
// the repair's lease, renewed for a full ttl by renewAll(true)).
func TestAStopWaitsForTheLastLeaseHeldBesideTheLoop(t *testing.T) {
	st := leaseStore(t)
	eng := engine.New(engine.Options{Store: st})
	a := New(Options{Engine: eng, Node: "a", LeaseTTL: time.Minute, Poll: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	waitUntil(t, "a's heartbeat recorded", func() bool { return a.announced.Load() })

	entered, leave := make(chan struct{}), make(chan struct{})
	repaired := make(chan error, 1)
	go func() {
		_, err := a.WithLease(context.Background(), "w-repair", func(context.Context) error {
			close(entered)
			<-leave
			return nil
		})
		repaired <- err
	}()
	<-entered
	cancel() // SIGTERM: the loop ends while the repair holds its lease
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	n, _ := nodeRow(t, st, "a")
	h := holders(t, st)
	close(leave)
	if err := <-repaired; err != nil {
		t.Fatal(err)
	}
	if n.StoppedAt != 0 && h["w-repair"] == "a" {
		t.Errorf("node a recorded stopped (%+v, alive %v) while it holds the lease of w-repair (leases %v): a stopped node is said to have released every lease", n, n.AliveAt(time.Now().UnixMilli()), h)
	}
	// After the repair, done() releases it (runs == 0) and records the
	// stop the loop's end owed.
	if h := holders(t, st); len(h) != 0 {
		t.Errorf("leases after the repair ended: %v", h)
	}
	if n, _ := nodeRow(t, st, "a"); n.StoppedAt == 0 {
		t.Errorf("node a after its loop and its repair ended: %+v, want it recorded stopped", n)
	}
}

// The same, as keep serve ends: Run returns, the process closes its
// store, and the repair's release after it fails. The lease stays until
// it expires, and the node is not shown stopped meanwhile: it is counted
// gone when its heartbeats stop, as after a crash.
func TestANodeWhoseLeaseOutlivesItsStoreIsNotShownStopped(t *testing.T) {
	u := pgtest.FreshSchema(t)
	open := func() store.Store { return openAt(t, u) }
	reader := open()
	defer reader.Close()
	st := open()
	a := New(Options{Engine: engine.New(engine.Options{Store: st}), Node: "a", LeaseTTL: time.Minute, Poll: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	waitUntil(t, "a's heartbeat recorded", func() bool { return a.announced.Load() })
	entered, leave := make(chan struct{}), make(chan struct{})
	repaired := make(chan struct{})
	go func() {
		defer close(repaired)
		a.WithLease(ctx, "w-repair", func(context.Context) error {
			close(entered)
			<-leave
			return nil
		})
	}()
	<-entered
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	st.Close() // keep serve's done(): k.Close()
	close(leave)
	<-repaired
	n, _ := nodeRow(t, reader, "a")
	var l kt.Lease
	if err := reader.View(context.Background(), func(tx store.Tx) error {
		var err error
		l, err = tx.LeaseGet("w-repair")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	if n.StoppedAt != 0 && l.Node == "a" && l.ExpiresAt > now {
		t.Errorf("node a is recorded stopped (%+v) and its process is gone, yet it holds w-repair's lease for %d ms more (%+v)", n, l.ExpiresAt-now, l)
	}
}

// holdStore passes everything to st, except that the first Update whose
// function records a node stopped is held (rolled back, then run again
// once go is closed): a stop being recorded, frozen at that moment.
type holdStore struct {
	store.Store
	mu       sync.Mutex
	armed    bool
	stopping chan struct{}
	proceed  chan struct{}
}

var errHold = errors.New("held by the test")

type holdTx struct {
	store.Tx
	h *holdStore
}

func (t holdTx) NodePut(n kt.Node) error {
	t.h.mu.Lock()
	hold := t.h.armed && n.StoppedAt != 0
	if hold {
		t.h.armed = false
	}
	t.h.mu.Unlock()
	if hold {
		return errHold
	}
	return t.Tx.NodePut(n)
}

func (h *holdStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	err := h.Store.Update(ctx, func(tx store.Tx) error { return fn(holdTx{tx, h}) })
	if errors.Is(err, errHold) {
		close(h.stopping)
		<-h.proceed
		return h.Store.Update(ctx, fn)
	}
	return err
}

// Run again (same scheduler) while the last Run's end records the stop:
// the new Run's heartbeat comes after the stop's write (stopMu), so the
// node that runs is shown alive. The attack had the stop's write land
// after the heartbeat: the node stepped while its row said stopped, and
// the others took its share until its next heartbeat (5 s).
func TestARunStartedWhileTheLastRecordsItsStopStaysAlive(t *testing.T) {
	base := leaseStore(t)
	hs := &holdStore{Store: base, stopping: make(chan struct{}), proceed: make(chan struct{})}
	eng := engine.New(engine.Options{Store: hs})
	a := New(Options{Engine: eng, Node: "a", LeaseTTL: time.Minute, Poll: 10 * time.Millisecond})
	b := New(Options{Engine: engine.New(engine.Options{Store: base}), Node: "b", Workers: 8, LeaseTTL: time.Minute})

	ctx1, cancel1 := context.WithCancel(context.Background())
	ran1 := make(chan error, 1)
	go func() { ran1 <- a.Run(ctx1) }()
	waitUntil(t, "a's first heartbeat", func() bool { return a.announced.Load() })
	hs.mu.Lock()
	hs.armed = true
	hs.mu.Unlock()
	cancel1()
	<-hs.stopping // the first Run's end is recording the stop (announced already swapped to false)

	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	ran2 := make(chan error, 1)
	go func() { ran2 <- a.Run(ctx2) }()
	waitUntil(t, "the second Run to start", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.runs == 1
	})
	// Give the second Run's heartbeat the chance to come first, as it did
	// before stopMu (it waits for the stop's write now). Not a bound the
	// test depends on: a slower heartbeat only makes the race not happen.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && !a.announced.Load(); {
		time.Sleep(5 * time.Millisecond)
	}
	close(hs.proceed)
	if err := <-ran1; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the second Run's heartbeat", func() bool { return a.announced.Load() })

	n, _ := nodeRow(t, base, "a")
	if err := b.Heartbeat(context.Background(), kt.Node{}); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	runs := a.runs
	a.mu.Unlock()
	if runs == 1 && n.StoppedAt != 0 {
		t.Errorf("a runs (Run under way: %d) but its row says stopped: %+v; b counts %d node(s) alive and takes a share of %d of 8 (want 4)", runs, n, b.alive.Load(), b.shareOf(8, 8))
	}
	if !a.announced.Load() {
		t.Errorf("a runs but announced is false: its next stop records nothing")
	}
	cancel2()
	if err := <-ran2; err != nil {
		t.Fatal(err)
	}
}

// The migration on a database of the older schema (a node row written
// before it) and a second open, on both stores.
func TestTheStoppedColumnIsAddedToAnOlderDatabase(t *testing.T) {
	check := func(t *testing.T, open func() store.Store, raw *sql.DB, ts string) {
		st := open()
		st.Close()
		// Back to the schema before 21a679b, with a node of then.
		for _, q := range []string{
			`ALTER TABLE nodes DROP COLUMN stopped_at`,
			`DELETE FROM schema_migrations WHERE name LIKE '%node_stopped.sql'`,
			`INSERT INTO nodes(id, addr, started_at, seen_at) VALUES('old', 'x:1', 1, 2)`,
		} {
			if _, err := raw.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		for i := range 2 {
			st := open()
			n, ok := nodeRow(t, st, "old")
			if i == 0 && (!ok || n.StoppedAt != 0 || n.SeenAt != 2) {
				t.Errorf("%s: the old node after the migration: %+v %v", ts, n, ok)
			}
			if i == 1 && n.StoppedAt != 3 {
				t.Errorf("%s: the stop after a second open: %+v %v", ts, n, ok)
			}
			if err := st.Update(context.Background(), func(tx store.Tx) error {
				return tx.NodePut(kt.Node{ID: "old", SeenAt: 3, StoppedAt: 3})
			}); err != nil {
				t.Fatal(err)
			}
			if n, _ := nodeRow(t, st, "old"); n.StoppedAt != 3 {
				t.Errorf("%s: stop not kept: %+v", ts, n)
			}
			st.Close()
		}
	}
	t.Run("postgres", func(t *testing.T) {
		u := pgtest.FreshSchema(t)
		open := func() store.Store { return openAt(t, u) }
		raw, err := sql.Open("pgx", u)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		raw.SetMaxOpenConns(1)
		check(t, open, raw, "postgres")
	})
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "keep.db")
		open := func() store.Store { return openAt(t, "sqlite://"+path) }
		st := open()
		st.Close()
		raw, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		check(t, open, raw, "sqlite")
	})
}

// A heartbeat forgets the nodes stopped or silent for longer than
// keeptype.NodeForgetAfter (each process is a node of its own: without
// it every restart stayed listed in keep status and on the page), and
// keeps listing those stopped or gone more recently.
func TestAHeartbeatForgetsNodesLongGone(t *testing.T) {
	st := leaseStore(t)
	now := time.Now().UnixMilli()
	hour := kt.NodeForgetAfter.Milliseconds()
	old := []kt.Node{
		{ID: "stopped-long-ago", StartedAt: 1, SeenAt: now - hour - 1000, StoppedAt: now - hour - 1000},
		{ID: "silent-long-ago", StartedAt: 1, SeenAt: now - hour - 1000},
		{ID: "stopped-lately", StartedAt: 1, SeenAt: now - 60_000, StoppedAt: now - 60_000},
		{ID: "silent-lately", StartedAt: 1, SeenAt: now - 60_000},
	}
	if err := st.Update(context.Background(), func(tx store.Tx) error {
		for _, n := range old {
			if err := tx.NodePut(n); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	a := New(Options{Engine: engine.New(engine.Options{Store: st}), Node: "a", LeaseTTL: time.Minute})
	if err := a.Heartbeat(context.Background(), kt.Node{}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	if err := st.View(context.Background(), func(tx store.Tx) error {
		ns, err := tx.NodeList()
		for _, n := range ns {
			ids = append(ids, n.ID)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(ids), "[a silent-lately stopped-lately]"; got != want {
		t.Fatalf("nodes after a heartbeat: %s, want %s", got, want)
	}
	if got := a.alive.Load(); got != 1 {
		t.Fatalf("nodes counted alive: %d, want 1", got)
	}
}
