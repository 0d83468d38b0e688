package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
)

func leaseStore(t *testing.T) store.Store {
	st := openAt(t, pgtest.FreshSchema(t))
	t.Cleanup(func() { st.Close() })
	return st
}

// useLeases has s (as in keep serve's loop) step each of wfs once: it takes
// and keeps their leases, each used just now.
func useLeases(t *testing.T, s *Scheduler, wfs []string) {
	s.mu.Lock()
	s.runs++ // keep serve's loop runs: leases kept after a step
	s.mu.Unlock()
	for _, wf := range wfs {
		s.mu.Lock()
		s.busy[wf] = true
		s.mu.Unlock()
		f, held, err := s.lease(context.Background(), wf)
		if err != nil || !held {
			t.Fatalf("lease of %s: %v %v", wf, held, err)
		}
		s.done(f, false)
		s.mu.Lock()
		delete(s.busy, wf)
		s.mu.Unlock()
	}
}

func holders(t *testing.T, st store.Store) map[string]string {
	out := map[string]string{}
	now := time.Now().UnixMilli()
	if err := st.View(context.Background(), func(tx store.Tx) error {
		ls, err := tx.LeaseList()
		for _, l := range ls {
			if l.ExpiresAt > now {
				out[l.Workflow] = l.Node
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// Two nodes alive, node a steps 8 workflows between two renewals. At the
// moment of its last look for due work none was due (they were all just
// stepped). An attack found the share then counted as 1, and the renewal
// released 7 leases used since the previous renewal: both nodes thought
// their share 1 while 8 workflows were at work. a keeps its half.
func TestARenewalKeepsItsShareWhenNothingIsDueThatInstant(t *testing.T) {
	st := leaseStore(t)
	eng := engine.New(engine.Options{Store: st})
	a := New(Options{Engine: eng, Node: "a", LeaseTTL: time.Minute})
	b := New(Options{Engine: eng, Node: "b", LeaseTTL: time.Minute})
	ctx := context.Background()
	for _, s := range []*Scheduler{b, a} {
		if err := s.Heartbeat(ctx, kt.Node{}); err != nil {
			t.Fatal(err)
		}
	}
	var wfs []string
	for i := 0; i < 8; i++ {
		wfs = append(wfs, fmt.Sprintf("w%d", i))
	}
	useLeases(t, a, wfs)
	// keep serve's loop looks for due work (nothing due this instant).
	var wg sync.WaitGroup
	a.dispatch(ctx, &wg, make(chan struct{}, 32))
	wg.Wait()
	a.renewAll(false)
	h := holders(t, st)
	t.Logf("share %d, leases held after the renewal: %v", a.leaseShare(), h)
	if len(h) < len(wfs)/2 {
		t.Errorf("a renewal released %d of %d leases each used since the previous renewal, keeping less than its half", len(wfs)-len(h), len(wfs))
	}
}

// Renewals (share 1 of 8) race steps under WithLease: no step ever finds
// its lease released or taken while it runs.
func TestRenewalsNeverShedAStepsLease(t *testing.T) {
	st := leaseStore(t)
	eng := engine.New(engine.Options{Store: st})
	a := New(Options{Engine: eng, Node: "a", LeaseTTL: time.Minute})
	b := New(Options{Engine: eng, Node: "b", LeaseTTL: time.Minute})
	ctx := context.Background()
	for _, s := range []*Scheduler{b, a} {
		if err := s.Heartbeat(ctx, kt.Node{}); err != nil {
			t.Fatal(err)
		}
	}
	a.mu.Lock()
	a.runs++
	a.mu.Unlock()
	a.fairShare(0)
	stop := make(chan struct{})
	var rw sync.WaitGroup
	rw.Add(1)
	go func() {
		defer rw.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			a.renewAll(false)
		}
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	for i := 0; i < 8; i++ {
		wf := fmt.Sprintf("w%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 40; n++ {
				a.WithLease(ctx, wf, func(ctx context.Context) error {
					f, _ := store.FenceOf(ctx)
					for k := 0; k < 3; k++ {
						var l kt.Lease
						st.View(ctx, func(tx store.Tx) error { var err error; l, err = tx.LeaseGet(wf); return err })
						if l.Node != "a" || l.Token != f.Token || l.ExpiresAt <= time.Now().UnixMilli() {
							mu.Lock()
							bad = append(bad, fmt.Sprintf("%s: step with token %d finds %+v", wf, f.Token, l))
							mu.Unlock()
						}
						time.Sleep(time.Millisecond)
					}
					return nil
				})
			}
		}()
	}
	wg.Wait()
	close(stop)
	rw.Wait()
	if len(bad) > 0 {
		t.Errorf("%d steps found their lease gone: %v", len(bad), bad[:min(5, len(bad))])
	}
}

// Beyond its share a node sheds at a renewal: a node that held every
// workflow's lease alone keeps, once another node is alive, its part of
// the most work due at once since the previous renewal, the leases used
// longest ago going first. The share is not counted at one instant: just
// after the node stepped them all, nothing is due.
func TestARenewalShedsDownToTheShareOfTheWorkDueSinceTheLast(t *testing.T) {
	st := leaseStore(t)
	eng := engine.New(engine.Options{Store: st})
	a := New(Options{Engine: eng, Node: "a", LeaseTTL: time.Minute})
	b := New(Options{Engine: eng, Node: "b", LeaseTTL: time.Minute})
	ctx := context.Background()
	for _, s := range []*Scheduler{b, a} {
		if err := s.Heartbeat(ctx, kt.Node{}); err != nil {
			t.Fatal(err)
		}
	}
	var wfs []string
	for i := 0; i < 8; i++ {
		wfs = append(wfs, fmt.Sprintf("w%d", i))
	}
	a.fairShare(len(wfs)) // all 8 were due at one of a's looks
	useLeases(t, a, wfs)
	a.fairShare(0) // and none at its last
	a.renewAll(false)
	h := holders(t, st)
	if len(h) != 4 {
		t.Fatalf("after the renewal a holds %d leases, want its share of 8 workflows between 2 nodes, 4: %v", len(h), h)
	}
	for _, wf := range wfs[:4] { // used first: the longest idle
		if _, held := h[wf]; held {
			t.Errorf("%s, used longest ago, was kept: %v", wf, h)
		}
	}
	// b takes the four a let go; then, in steady work, renewals of either
	// node shed nothing, though nothing is due at the instant: the leases
	// of both count as the work in use (no ping-pong).
	useLeases(t, b, wfs[:4])
	for i := 0; i < 3; i++ {
		for _, s := range []*Scheduler{a, b} {
			s.mu.Lock()
			for _, h := range s.held {
				h.used = time.Now() // used since the previous renewal
			}
			s.mu.Unlock()
			s.fairShare(0)
			s.renewAll(false)
		}
		h := holders(t, st)
		n := map[string]int{}
		for _, node := range h {
			n[node]++
		}
		if n["a"] != 4 || n["b"] != 4 {
			t.Fatalf("renewal %d in steady work: leases held %v, want 4 each", i, h)
		}
	}
}

// A node that stops cleanly says so: the node left counts itself alone
// at its next heartbeat and steps all the work, instead of keeping the
// stopped node's share for it for three heartbeats (15 s); people see
// the node "stopped", not alive. When it runs again it is alive again.
func TestAStoppedNodeIsNotCountedAlive(t *testing.T) {
	st := leaseStore(t)
	eng := engine.New(engine.Options{Store: st})
	a := New(Options{Engine: eng, Node: "a", Workers: 8, LeaseTTL: time.Minute})
	b := New(Options{Engine: eng, Node: "b", Workers: 8, LeaseTTL: time.Minute})
	ctx := context.Background()
	beat := func(s *Scheduler) {
		t.Helper()
		if err := s.Heartbeat(ctx, kt.Node{}); err != nil {
			t.Fatal(err)
		}
	}
	node := func(id string) kt.Node {
		t.Helper()
		var out kt.Node
		if err := st.View(ctx, func(tx store.Tx) error {
			ns, err := tx.NodeList()
			for _, n := range ns {
				if n.ID == id {
					out = n
				}
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	beat(b)
	beat(a)
	if got := a.shareOf(8, 8); got != 4 {
		t.Fatalf("a's share of 8 workflows beside b: %d, want 4", got)
	}
	// b's loop stops (keep serve's SIGTERM): it releases its leases and
	// records its stop before Run returns.
	useLeases(t, b, []string{"w0", "w1"})
	b.mu.Lock()
	b.runs-- // useLeases counted a loop of its own
	b.mu.Unlock()
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Run(stopped); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	if n := node("b"); n.StoppedAt == 0 || n.AliveAt(now) {
		t.Fatalf("b after it stopped: %+v, alive %v; want it stopped and not alive", n, n.AliveAt(now))
	}
	if h := holders(t, st); len(h) != 0 {
		t.Fatalf("leases left after b stopped: %v", h)
	}
	beat(a)
	if got := a.shareOf(8, 8); got != 8 {
		t.Errorf("a's share of 8 workflows after b stopped: %d, want all 8 (b counted alive until it was silent for three heartbeats)", got)
	}
	// b runs again: its next heartbeat says it is alive.
	beat(b)
	if n := node("b"); n.StoppedAt != 0 || !n.AliveAt(time.Now().UnixMilli()) {
		t.Fatalf("b after it beat again: %+v; want it alive", n)
	}
	beat(a)
	if got := a.shareOf(8, 8); got != 4 {
		t.Errorf("a's share beside b running again: %d, want 4", got)
	}
}

// A scheduler that never said it was alive (keep run's RunUntilIdle on a
// shared store) leaves no node behind when it ends.
func TestAStepOnRequestLeavesNoStoppedNode(t *testing.T) {
	st := leaseStore(t)
	eng := engine.New(engine.Options{Store: st})
	s := New(Options{Engine: eng, Node: "once", LeaseTTL: time.Minute})
	if err := s.RunUntilIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := st.View(context.Background(), func(tx store.Tx) error {
		ns, err := tx.NodeList()
		if err == nil && len(ns) != 0 {
			return fmt.Errorf("nodes after a RunUntilIdle alone: %+v", ns)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
