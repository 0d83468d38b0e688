package scheduler

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// Several nodes on one store (issue 14): a node steps a workflow only while
// it holds the workflow's lease, so one workflow never has two steps at
// once across nodes; every durable write of the step is conditional on the
// lease's token (store.Fenced), and an external call is not started once
// the lease ran out by this node's clock (engine: Fence.Live). A node that
// dies stops renewing: another takes the workflow over when the lease
// expires, with the next token, and recovers its open run as after a crash.

// acquire takes wf's lease (or renews this node's), for a step.
func (s *Scheduler) acquire(ctx context.Context, wf string) (store.Fence, bool, error) {
	start := time.Now()
	until := start.Add(s.ttl)
	var l kt.Lease
	held := false
	err := s.store.Update(ctx, func(tx store.Tx) error {
		cur, err := tx.LeaseGet(wf)
		var prev *kt.Lease
		switch {
		case err == nil:
			prev = &cur
		case !errors.Is(err, kt.ErrNotFound):
			return err
		}
		if l, held = kt.GrantLease(prev, wf, s.node, start.UnixMilli(), until.UnixMilli()); !held {
			return nil
		}
		return tx.LeasePut(l)
	})
	if err != nil || !held {
		return store.Fence{}, false, err
	}
	f := store.Fence{Workflow: wf, Node: s.node, Token: l.Token, Until: &atomic.Int64{}}
	// The local deadline counts from before the write: conservative.
	f.Until.Store(until.UnixMilli())
	return f, true, nil
}

// keepRenewing renews the lease every third of its time while the step
// goes on; the returned function stops it and releases the lease, so that
// any node can take the workflow's next work at once.
func (s *Scheduler) keepRenewing(f store.Fence) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(s.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if !s.renew(f) {
				f.Until.Store(0) // lost: no external call may start now
				return
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		s.releaseLease(f)
	}
}

// renew extends the lease while the store still shows this node's token.
func (s *Scheduler) renew(f store.Fence) bool {
	start := time.Now()
	until := start.Add(s.ttl)
	ok := false
	err := s.store.Update(context.Background(), func(tx store.Tx) error {
		cur, err := tx.LeaseGet(f.Workflow)
		if err != nil {
			return err
		}
		var l kt.Lease
		if l, ok = kt.RenewLease(cur, s.node, f.Token, until.UnixMilli()); !ok {
			return nil
		}
		return tx.LeasePut(l)
	})
	if err != nil || !ok {
		s.log.Warn("lease not renewed", "workflow", f.Workflow, "error", err)
		return false
	}
	f.Until.Store(until.UnixMilli())
	return true
}

// releaseLease ends the lease now, keeping its token (the next holder gets
// the one after).
func (s *Scheduler) releaseLease(f store.Fence) {
	err := s.store.Update(context.Background(), func(tx store.Tx) error {
		cur, err := tx.LeaseGet(f.Workflow)
		if err != nil || cur.Node != s.node || cur.Token != f.Token {
			return err
		}
		cur.ExpiresAt = 0
		return tx.LeasePut(cur)
	})
	if err != nil {
		s.log.Warn("lease not released (it expires by itself)", "workflow", f.Workflow, "error", err)
	}
}

// Heartbeat records this node as alive, for `keep status` and the page,
// and counts the nodes alive now, for the fair share.
func (s *Scheduler) Heartbeat(ctx context.Context, n kt.Node) error {
	if s.node == "" {
		return nil
	}
	now := time.Now().UnixMilli()
	n.ID, n.SeenAt = s.node, now
	alive := 0
	err := s.store.Update(ctx, func(tx store.Tx) error {
		if err := tx.NodePut(n); err != nil {
			return err
		}
		ns, err := tx.NodeList()
		for _, o := range ns {
			if now-o.SeenAt < aliveWithin.Milliseconds() {
				alive++
			}
		}
		return err
	})
	if err == nil {
		s.alive.Store(int64(max(alive, 1)))
	}
	return err
}

// aliveWithin is how recently a node must have been seen to count as alive.
const aliveWithin = 3 * heartbeatEvery

// fairShare is how many workflows this node steps at once: all of them
// alone, else its part of what is due among the nodes alive (rounded up),
// so that the others take the rest.
func (s *Scheduler) fairShare(due int) int {
	n := s.alive.Load()
	if s.node == "" || n <= 1 {
		return s.workers
	}
	return min(s.workers, max(1, (due+int(n)-1)/int(n)))
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
		fence, ok, err := s.acquire(ctx, wf)
		if err != nil || !ok {
			return false, err
		}
		defer s.keepRenewing(fence)()
		ctx = store.WithFence(ctx, fence)
	}
	return true, fn(ctx)
}
