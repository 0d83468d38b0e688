package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exerciseNodes covers leases, nodes and the installation id.
func exerciseNodes(run runCase) {
	ctx := context.Background()
	run("the store's clock: read in a transaction, it does not go back", func(t *testing.T, s store.Store) {
		var first, second int64
		read := func(into *int64) {
			must(t, s.View(ctx, func(tx store.Tx) error {
				var err error
				*into, _, err = tx.Now()
				return err
			}))
		}
		read(&first)
		read(&second)
		// Within a day of this process's clock: a database whose clock is
		// that far off is not one nodes can share leases on.
		if d := time.Duration(first-time.Now().UnixMilli()) * time.Millisecond; d.Abs() > 24*time.Hour {
			t.Fatalf("the store's clock reads %d, %s from this machine's", first, d)
		}
		if second < first {
			t.Fatalf("the store's clock went back: %d then %d", first, second)
		}
	})
	run("leases: a stale token writes nothing (fencing); nodes are listed", func(t *testing.T, s store.Store) {
		grant := func(node string, now int64) kt.Lease {
			var l kt.Lease
			must(t, s.Update(ctx, func(tx store.Tx) error {
				cur, err := tx.LeaseGet("w")
				var prev *kt.Lease
				if err == nil {
					prev = &cur
				} else if !errors.Is(err, kt.ErrNotFound) {
					return err
				}
				var ok bool
				if l, ok = kt.GrantLease(prev, "w", node, now, now+100); !ok {
					return fmt.Errorf("%s was refused the lease at %d: %+v", node, now, cur)
				}
				return tx.LeasePut(l)
			}))
			return l
		}
		a := grant("a", 0)
		put := func(f store.Fence, name string) error {
			return s.Update(store.WithFence(ctx, f), func(tx store.Tx) error {
				return tx.HandlerPut(kt.Handler{Workflow: "w", Name: name, Type: kt.HandlerProducer})
			})
		}
		fa := store.Fence{Workflow: "w", Node: "a", Token: a.Token}
		if err := put(fa, "by-a"); err != nil {
			t.Fatalf("a write with the current lease: %v", err)
		}
		b := grant("b", 200) // a's lease expired at 100: b takes over
		if b.Token != a.Token+1 {
			t.Fatalf("takeover token %d, want %d", b.Token, a.Token+1)
		}
		if err := put(fa, "stale"); !errors.Is(err, store.ErrFenced) || !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a write with a stale lease: %v, want ErrFenced", err)
		}
		if err := put(store.Fence{Workflow: "w", Node: "b", Token: b.Token}, "by-b"); err != nil {
			t.Fatalf("the new owner's write: %v", err)
		}
		if err := put(store.Fence{Workflow: "other", Node: "a", Token: 1}, "no-lease"); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("a write fenced by a lease that does not exist: %v", err)
		}
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.NodePut(kt.Node{ID: "b", Addr: "10.0.0.2:8347", StartedAt: 1, SeenAt: 5})
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.NodePut(kt.Node{ID: "b", Addr: "10.0.0.2:8347", StartedAt: 9, SeenAt: 7})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			hs, err := tx.HandlerList("w")
			if err != nil || len(hs) != 2 || hs[0].Name != "by-a" || hs[1].Name != "by-b" {
				return fmt.Errorf("handlers after fencing: %+v %v", hs, err)
			}
			ls, err := tx.LeaseList()
			if err != nil || len(ls) != 1 || ls[0].Node != "b" || ls[0].Token != b.Token {
				return fmt.Errorf("leases %+v %v", ls, err)
			}
			ns, err := tx.NodeList()
			if err != nil || len(ns) != 1 || ns[0].SeenAt != 7 || ns[0].StartedAt != 1 || ns[0].StoppedAt != 0 {
				return fmt.Errorf("nodes %+v %v (a node keeps its start time)", ns, err)
			}
			return nil
		}))
		// A node forgotten is no longer listed, unless it was seen since it
		// was read; forgetting it again, or one that never was, is nothing.
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if err := tx.NodePut(kt.Node{ID: "c", StartedAt: 1, SeenAt: 2}); err != nil {
				return err
			}
			if err := tx.NodeForget(kt.Node{ID: "b", SeenAt: 5}); err != nil { // b was seen at 7 since
				return err
			}
			if err := tx.NodeForget(kt.Node{ID: "c", SeenAt: 2}); err != nil {
				return err
			}
			if err := tx.NodeForget(kt.Node{ID: "c", SeenAt: 2}); err != nil {
				return err
			}
			return tx.NodeForget(kt.Node{ID: "never"})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			ns, err := tx.NodeList()
			if err != nil || len(ns) != 1 || ns[0].ID != "b" {
				return fmt.Errorf("nodes after c was forgotten: %+v %v", ns, err)
			}
			return nil
		}))
		// A node's stop is recorded, and taken back by its next heartbeat.
		for _, stopped := range []int64{8, 0} {
			must(t, s.Update(ctx, func(tx store.Tx) error {
				return tx.NodePut(kt.Node{ID: "b", Addr: "10.0.0.2:8347", StartedAt: 9, SeenAt: 8, StoppedAt: stopped})
			}))
			must(t, s.View(ctx, func(tx store.Tx) error {
				ns, err := tx.NodeList()
				if err != nil || len(ns) != 1 || ns[0].StoppedAt != stopped {
					return fmt.Errorf("nodes after a put with StoppedAt %d: %+v %v", stopped, ns, err)
				}
				return nil
			}))
		}
	})
	run("the installation id: made with the store, the same on every read, replaced only by InstallationSet", func(t *testing.T, s store.Store) {
		var first string
		must(t, s.View(ctx, func(tx store.Tx) error {
			var err error
			if first, err = tx.InstallationID(); err != nil || len(first) < 16 {
				return fmt.Errorf("a new store's installation id %q: %v", first, err)
			}
			return nil
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if again, err := tx.InstallationID(); err != nil || again != first {
				return fmt.Errorf("the id changed: %q then %q (%v)", first, again, err)
			}
			if err := tx.InstallationSet(""); err == nil {
				return fmt.Errorf("an empty installation id was accepted")
			}
			return tx.InstallationSet("from-another-store")
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			if id, err := tx.InstallationID(); err != nil || id != "from-another-store" {
				return fmt.Errorf("after InstallationSet: %q %v", id, err)
			}
			return nil
		}))
	})
}
