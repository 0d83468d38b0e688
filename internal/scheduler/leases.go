package scheduler

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/keep-run/keep/internal/clock"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// Several nodes on one store (issue 14): a node steps a workflow only while
// it holds the workflow's lease, so one workflow never has two steps at
// once across nodes; every durable write of the step is conditional on the
// lease's token (store.Fenced), and an external call is not started once
// the lease ran out on this node's monotonic clock (engine: Fence.Live). A
// node that dies stops renewing: another takes the workflow over when the
// lease expires, with the next token, and recovers its open run as after a
// crash.
//
// Time (issue 44): a lease's expiry in the store, and a node's heartbeat,
// are stamped and compared by the store's clock (store.Tx.Now: PostgreSQL's
// own, which every node reads), never by a node's, which may be an hour
// ahead; the holder's own deadline (Fence.Until) is on its monotonic
// clock, counted from before the write that granted the lease, so it ends
// no later than the lease in the store whatever the wall clock does.

// A lease is kept while the node works, not taken and released per step:
// the node holds the leases of the workflows it stepped lately, renews them
// all in one transaction every third of the lease's time, and releases
// one when it has been idle since the previous renewal (or when the
// scheduler stops), so that another node can take that workflow at once.

// heldLease is a lease this node holds and when a step last used it.
type heldLease struct {
	fence store.Fence
	used  time.Time
}

// lease returns this node's lease of wf for a step: the one it holds while
// enough of it is left, else a new grant (the caller has marked wf busy, so
// the renewer does not release it meanwhile). held is false when another
// node holds it; then the scheduler leaves wf alone until that lease ends.
func (s *Scheduler) lease(ctx context.Context, wf string) (store.Fence, bool, error) {
	s.mu.Lock()
	h := s.held[wf]
	if h != nil {
		h.used = time.Now()
	}
	s.mu.Unlock()
	if h != nil && h.fence.Live(clock.MonoMs()+(s.ttl/3).Milliseconds()) {
		return h.fence, true, nil
	}
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if h == nil {
		s.makeRoom()
	}
	f, wait, held, err := s.acquire(ctx, wf)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || !held {
		delete(s.held, wf)
		if err == nil {
			// Another node works on it: do not ask again before its lease ends.
			s.backoff[wf] = time.Now().Add(min(wait, s.ttl))
		}
		return store.Fence{}, false, err
	}
	s.held[wf] = &heldLease{fence: f, used: time.Now()}
	if !s.renewing {
		s.renewing = true
		go s.renewer()
	}
	return f, true, nil
}

// makeRoom keeps this node within its fair share of leases when it is one
// of several: before it takes one more, it releases the idle ones it holds
// beyond the share, the longest idle first, so the other nodes can take
// those workflows. The caller holds leaseMu.
func (s *Scheduler) makeRoom() {
	s.mu.Lock()
	share := s.leaseShare()
	var idle []*heldLease
	if share > 0 && len(s.held) >= share {
		idle = s.longestIdle(slices.Collect(maps.Values(s.held)), len(s.held)-share+1)
		for _, h := range idle {
			delete(s.held, h.fence.Workflow)
		}
	}
	s.mu.Unlock()
	if len(idle) == 0 {
		return
	}
	var wfs []string
	for _, h := range idle {
		wfs = append(wfs, h.fence.Workflow)
	}
	if err := s.store.Update(store.ForWorkflows(context.Background(), wfs...), func(tx store.Tx) error {
		for _, h := range idle {
			if err := releaseIn(tx, h.fence); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		s.log.Warn("leases not released (they expire by themselves)", "leases", len(idle), "error", err)
	}
}

// acquire takes wf's lease (or renews this node's). When another node
// holds it, wait is how long that lease has left, by the store's clock.
func (s *Scheduler) acquire(ctx context.Context, wf string) (f store.Fence, wait time.Duration, held bool, err error) {
	start := clock.MonoMs()
	var l kt.Lease
	var now int64
	err = s.store.Update(store.ForWorkflows(ctx, wf), func(tx store.Tx) error {
		var err error
		if now, _, err = tx.Now(); err != nil {
			return err
		}
		cur, err := tx.LeaseGet(wf)
		var prev *kt.Lease
		switch {
		case err == nil:
			prev = &cur
		case !errors.Is(err, kt.ErrNotFound):
			return err
		}
		if l, held = kt.GrantLease(prev, wf, s.node, now, now+s.ttl.Milliseconds()); !held {
			return nil
		}
		return tx.LeasePut(l)
	})
	if err != nil || !held {
		return store.Fence{}, time.Duration(l.ExpiresAt-now) * time.Millisecond, false, err
	}
	f = store.Fence{Workflow: wf, Node: s.node, Token: l.Token, Until: &atomic.Int64{}}
	// The local deadline counts from before the write: conservative.
	f.Until.Store(start + s.ttl.Milliseconds())
	return f, 0, true, nil
}

// renewer renews the held leases every third of their time until none is
// held.
func (s *Scheduler) renewer() {
	t := time.NewTicker(s.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.renewKick:
		}
		s.renewAll(false)
		s.mu.Lock()
		if len(s.held) == 0 {
			s.renewing = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

// renewAll renews, in one transaction, the leases still in use (a step
// under way, or one since the previous renewal) and releases the others
// (all of them when all is set).
func (s *Scheduler) renewAll(all bool) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	start := time.Now()
	mono := clock.MonoMs()
	if !all {
		s.countLiveLeases()
	}
	var keep, drop []*heldLease
	s.mu.Lock()
	for wf, h := range s.held {
		if !s.busy[wf] && (all || start.Sub(h.used) > s.ttl/3) {
			drop = append(drop, h)
			delete(s.held, wf)
			continue
		}
		keep = append(keep, h)
	}
	if !all {
		keep, drop = s.overShare(keep, drop)
		// The next period's share counts the work due from now on (a
		// dispatch under way has counted its own).
		s.dueSeen.Store(0)
	}
	s.mu.Unlock()
	if len(keep)+len(drop) == 0 {
		return
	}
	lost, err := s.renewIn(keep, drop)
	if err != nil {
		// Not renewed: each lease still ends on this node's clock, and a
		// release not made lets the lease expire by itself.
		s.log.Warn("leases not renewed", "leases", len(keep), "released", len(drop), "error", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range keep {
		if !lost[h] {
			h.fence.Until.Store(mono + s.ttl.Milliseconds())
			continue
		}
		s.log.Warn("lease lost", "workflow", h.fence.Workflow)
		h.fence.Until.Store(0) // no external call may start now
		if s.held[h.fence.Workflow] == h {
			delete(s.held, h.fence.Workflow)
		}
	}
}

// renewIn renews the leases of keep and releases those of drop, in one
// transaction; lost are those of keep another node holds now.
func (s *Scheduler) renewIn(keep, drop []*heldLease) (lost map[*heldLease]bool, err error) {
	lost = map[*heldLease]bool{}
	var wfs []string
	for _, h := range append(append([]*heldLease(nil), keep...), drop...) {
		wfs = append(wfs, h.fence.Workflow)
	}
	err = s.store.Update(store.ForWorkflows(context.Background(), wfs...), func(tx store.Tx) error {
		clear(lost)
		now, _, err := tx.Now()
		if err != nil {
			return err
		}
		until := now + s.ttl.Milliseconds()
		for _, h := range keep {
			cur, err := tx.LeaseGet(h.fence.Workflow)
			if err != nil {
				return err
			}
			l, ok := kt.RenewLease(cur, s.node, h.fence.Token, until)
			if !ok {
				lost[h] = true
				continue
			}
			if err := tx.LeasePut(l); err != nil {
				return err
			}
		}
		for _, h := range drop {
			if err := releaseIn(tx, h.fence); err != nil {
				return err
			}
		}
		return nil
	})
	return lost, err
}

// countLiveLeases counts the leases any node holds now (leasesLive), when
// this node is one of several: the work in use among them, by which a
// renewal sheds what this node holds beyond its share. Unread, the last
// count stands.
func (s *Scheduler) countLiveLeases() {
	if s.alive.Load() <= 1 {
		return
	}
	live := 0
	if err := s.store.View(store.NoSnapshot(context.Background()), func(tx store.Tx) error {
		now, _, err := tx.Now()
		if err != nil {
			return err
		}
		ls, err := tx.LeaseList()
		for _, l := range ls {
			if l.ExpiresAt > now {
				live++
			}
		}
		return err
	}); err != nil {
		s.log.Warn("leases not counted", "error", err)
		return
	}
	s.leasesLive.Store(int64(live))
}

// overShare moves from keep to drop the idle leases held beyond this
// node's fair share, the longest idle first. A node that was alone took
// every workflow's lease; when another node joins, makeRoom alone would
// not hand any over while this node keeps stepping the workflows it holds
// (it takes no new lease), so every renewal sheds the excess. The caller
// holds mu.
func (s *Scheduler) overShare(keep, drop []*heldLease) ([]*heldLease, []*heldLease) {
	share := s.leaseShare()
	if share <= 0 || len(keep) <= share {
		return keep, drop
	}
	idle := s.longestIdle(keep, len(keep)-share)
	for _, h := range idle {
		delete(s.held, h.fence.Workflow)
	}
	keep = slices.DeleteFunc(keep, func(h *heldLease) bool { return slices.Contains(idle, h) })
	return keep, append(drop, idle...)
}

// longestIdle returns up to n of hs that no step uses now, the longest
// idle first. The caller holds mu.
func (s *Scheduler) longestIdle(hs []*heldLease, n int) []*heldLease {
	var idle []*heldLease
	for _, h := range hs {
		if !s.busy[h.fence.Workflow] {
			idle = append(idle, h)
		}
	}
	slices.SortFunc(idle, func(a, b *heldLease) int { return a.used.Compare(b.used) })
	return idle[:min(len(idle), n)]
}

// releaseIn ends the lease now, keeping its token (the next holder gets
// the one after), if the store still shows it as f.
func releaseIn(tx store.Tx, f store.Fence) error {
	cur, err := tx.LeaseGet(f.Workflow)
	if err != nil || cur.Node != f.Node || cur.Token != f.Token {
		return err
	}
	cur.ExpiresAt = 0
	return tx.LeasePut(cur)
}

// done says a step of wf with lease f ended. lost: its write was fenced,
// the lease is another node's. Outside Run and RunUntilIdle (one
// workflow stepped on request, a repair) the lease is released at once.
func (s *Scheduler) done(f store.Fence, lost bool) {
	s.mu.Lock()
	h := s.held[f.Workflow]
	if h != nil && h.fence.Token == f.Token {
		h.used = time.Now()
		if lost {
			delete(s.held, f.Workflow)
			h = nil
		}
	}
	running := s.runs > 0
	s.mu.Unlock()
	if h == nil || running {
		return
	}
	s.releaseOne(f.Workflow)
}

// releaseOne releases this node's lease of wf now.
func (s *Scheduler) releaseOne(wf string) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	s.mu.Lock()
	h := s.held[wf]
	delete(s.held, wf)
	s.mu.Unlock()
	if h == nil {
		return
	}
	if err := s.store.Update(store.ForWorkflows(context.Background(), wf), func(tx store.Tx) error { return releaseIn(tx, h.fence) }); err != nil {
		s.log.Warn("lease not released (it expires by itself)", "workflow", wf, "error", err)
	}
}

// running marks a Run or RunUntilIdle under way; the returned function
// ends it, releasing every lease when the last one ends.
func (s *Scheduler) running() (end func()) {
	s.mu.Lock()
	s.runs++
	s.stopOwed = false
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.runs--
		last := s.runs == 0
		s.mu.Unlock()
		if last && s.node != "" {
			s.renewAll(true)
			s.markStopped()
			select {
			case s.renewKick <- struct{}{}:
			default:
			}
		}
	}
}

// markStopped records that this node stopped stepping, its leases
// released: the other nodes count it gone at their next heartbeat (and
// take its share of the work) instead of three heartbeats later. A node
// that runs again says it is alive at its next heartbeat. Not recorded
// (a store that fails now), the node is counted gone when its heartbeats
// stop, as after a crash.
//
// A lease still held when the loop ends (a repair under WithLease, which
// runs beside the loop) postpones it to that lease's release
// (stopIfOwed): a node shown stopped holds nothing. stopMu orders it with
// Heartbeat, and runs is checked under it: a Run started again meanwhile
// has said, or will say, it is alive after this, never before.
func (s *Scheduler) markStopped() {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	s.mu.Lock()
	if s.runs > 0 || len(s.held) > 0 || len(s.busy) > 0 {
		s.stopOwed = s.runs == 0
		s.mu.Unlock()
		return
	}
	s.stopOwed = false
	s.mu.Unlock()
	if !s.announced.Swap(false) {
		return // never said it was alive (RunUntilIdle alone): nothing to take back
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
	defer cancel()
	if err := s.store.Update(store.ForWorkflows(ctx), func(tx store.Tx) error {
		now, _, err := tx.Now()
		if err != nil {
			return err
		}
		started := s.started.Load()
		if started == 0 {
			started = now
		}
		return tx.NodePut(kt.Node{ID: s.node, Addr: s.NodeAddr(), StartedAt: started, SeenAt: now, StoppedAt: now})
	}); err != nil {
		s.log.Warn("node stop not recorded", "error", err)
	}
}

// stopIfOwed records the stop the loop's end postponed (markStopped), once
// the last lease is released and nothing is busy (release).
func (s *Scheduler) stopIfOwed() {
	s.mu.Lock()
	owed := s.stopOwed
	s.mu.Unlock()
	if owed {
		s.markStopped()
	}
}

// Heartbeat records this node as alive, for `keep status` and the page,
// and counts the nodes alive now, for the fair share.
func (s *Scheduler) Heartbeat(ctx context.Context, n kt.Node) error {
	if s.node == "" {
		return nil
	}
	n.ID = s.node
	var (
		alive  int
		forget []kt.Node
		now    int64
	)
	s.stopMu.Lock() // not beside markStopped's write (it would undo this one)
	defer s.stopMu.Unlock()
	// Its own row of nodes only: no workflow's lock.
	err := s.store.Update(store.ForWorkflows(ctx), func(tx store.Tx) error {
		// Stamped and judged by the store's clock: a node whose own clock is
		// an hour ahead neither looks alive an hour after it died nor
		// counts the others gone.
		sent := clock.Mono()
		var shared bool
		var err error
		if now, shared, err = tx.Now(); err != nil {
			return err
		}
		if shared {
			clock.Follow(time.UnixMilli(now), sent, clock.Mono())
		}
		n.SeenAt = now
		if err := tx.NodePut(n); err != nil {
			return err
		}
		ns, err := tx.NodeList()
		if err != nil {
			return err
		}
		alive, forget = 0, nil
		for _, o := range ns {
			switch {
			case o.AliveAt(now):
				alive++
			case o.ForgottenAt(now):
				forget = append(forget, o)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.alive.Store(int64(max(alive, 1)))
	s.announced.Store(true)
	if len(forget) > 0 {
		s.forget(ctx, forget, now)
	}
	return nil
}

// FollowStoreClock makes the store's clock keep's reference
// (clock.Follow) when every node reads the same one (PostgreSQL): a
// node's stamps (due times, a call's send time) are then on the clock the
// others judge them by. Each heartbeat reads it again.
func FollowStoreClock(ctx context.Context, st store.Store) error {
	return st.View(store.NoSnapshot(ctx), func(tx store.Tx) error {
		sent := clock.Mono()
		now, shared, err := tx.Now()
		if err == nil && shared {
			clock.Follow(time.UnixMilli(now), sent, clock.Mono())
		}
		return err
	})
}

// forget deletes the rows of the nodes gone long ago (keeptype.Node.ForgottenAt),
// in a transaction of its own, after the heartbeat's: it then holds no
// node's row while it waits for another's (two heartbeats forgetting each
// other would deadlock), and deletes in the list's order. A node that
// still holds a live lease stays listed (its loop ended, a repair under
// way keeps it), as does one seen since it was read (NodeForget).
func (s *Scheduler) forget(ctx context.Context, ns []kt.Node, now int64) {
	err := s.store.Update(store.ForWorkflows(ctx), func(tx store.Tx) error {
		ls, err := tx.LeaseList()
		if err != nil {
			return err
		}
		holding := map[string]bool{}
		for _, l := range ls {
			if l.ExpiresAt > now {
				holding[l.Node] = true
			}
		}
		for _, n := range ns {
			if holding[n.ID] {
				continue
			}
			if err := tx.NodeForget(n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		s.log.Warn("nodes gone long ago not forgotten (the next heartbeat tries again)", "error", err)
	}
}

// fairShare is how many workflows this node steps at once, and holds the
// leases of: all of them alone, else its part of what is due among the
// nodes alive (rounded up), so that the others take the rest.
func (s *Scheduler) fairShare(due int) int {
	for {
		seen := s.dueSeen.Load()
		if int64(due) <= seen || s.dueSeen.CompareAndSwap(seen, int64(due)) {
			break
		}
	}
	return s.shareOf(due, s.workers)
}

// shareOf is this node's part of due workflows among the nodes alive,
// rounded up, at most most; most when it is alone.
func (s *Scheduler) shareOf(due, most int) int {
	n := int(s.alive.Load())
	if s.node == "" || n <= 1 {
		return most
	}
	return min(s.workers, max(1, (due+n-1)/n))
}

// leaseShare is how many leases this node keeps when it is one of
// several: its part of the work in use among the nodes, counted as the
// leases any node holds (at this renewal) or the most workflows due at
// once since the last, whichever is more (a workflow stepped once a second is due
// for a moment only: a count at one instant, often none just after the
// node stepped them all, shed leases still in use). 0 is no bound: it is
// alone, or there is no work.
func (s *Scheduler) leaseShare() int {
	work := int(max(s.dueSeen.Load(), s.leasesLive.Load()))
	if work <= 0 {
		return 0
	}
	return s.shareOf(work, 0)
}

// WithLease runs fn while this node holds wf's lease (renewed as long as
// fn runs; fn's context is fenced by it, so no write of fn lands once
// another node took the workflow over), and while this node steps it
// nowhere else. held is false when the workflow is busy here or another
// node holds it: fn did not run. The Maintainer repairs under it, so one
// failed run is repaired by one node at a time (issue 22).
func (s *Scheduler) WithLease(ctx context.Context, wf string, fn func(context.Context) error) (held bool, err error) {
	s.mu.Lock()
	if s.busy[wf] {
		s.mu.Unlock()
		return false, nil
	}
	s.busy[wf] = true
	s.mu.Unlock()
	defer s.release(wf)
	if s.node != "" {
		fence, ok, err := s.lease(ctx, wf)
		if err != nil || !ok {
			return false, err
		}
		ctx = store.WithFence(ctx, fence)
		err = fn(ctx)
		s.done(fence, errors.Is(err, store.ErrFenced))
		return true, err
	}
	return true, fn(ctx)
}
