package scheduler

// A heartbeat forgets the nodes stopped or silent for longer than
// keeptype.NodeForgetAfter, never one that came back or still holds a
// lease: the cases a helper's attack on a148ee6 found, kept as tests.
// PostgreSQL only (the nodes of a shared store).

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
)

// named is url with an application_name of its own, so that the test can
// see in pg_stat_activity when that store's transaction waits for a lock.
func named(url string) (string, string) {
	var b [4]byte
	rand.Read(b[:])
	name := "forget_attack_" + hex.EncodeToString(b[:])
	return url + "&application_name=" + name, name
}

// A node silent for over an hour (a paused VM, a process stopped with
// SIGSTOP) comes back: its heartbeat (upsert of its row, then the list)
// is in flight when another node's heartbeat reads the nodes. The other
// node read b's row as it was (seen over an hour ago); its DELETE waits
// for b's transaction and must then leave the row b has just refreshed
// (NodeForget deletes only the row as read: the attack found it deleted
// by id alone).
func TestAHeartbeatDoesNotForgetARowRefreshedSinceItWasRead(t *testing.T) {
	u := pgtest.FreshSchema(t)
	ua, appA := named(u)
	sa := openAt(t, ua)
	defer sa.Close()
	sb := openAt(t, u)
	defer sb.Close()
	raw, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	now := time.Now().UnixMilli()
	hour := kt.NodeForgetAfter.Milliseconds()
	if err := sb.Update(context.Background(), func(tx store.Tx) error {
		return tx.NodePut(kt.Node{ID: "b", StartedAt: now - 2*hour, SeenAt: now - hour - 10_000})
	}); err != nil {
		t.Fatal(err)
	}

	// b's heartbeat, as Heartbeat makes it (its row, then the list), held
	// open before its commit.
	listed, commit := make(chan struct{}), make(chan struct{})
	bDone := make(chan error, 1)
	go func() {
		bDone <- sb.Update(store.ForWorkflows(context.Background()), func(tx store.Tx) error {
			if err := tx.NodePut(kt.Node{ID: "b", StartedAt: now - 2*hour, SeenAt: time.Now().UnixMilli()}); err != nil {
				return err
			}
			if _, err := tx.NodeList(); err != nil {
				return err
			}
			close(listed)
			<-commit
			return nil
		})
	}()
	<-listed

	a := New(Options{Engine: engine.New(engine.Options{Store: sa}), Node: "a", LeaseTTL: time.Minute})
	aDone := make(chan error, 1)
	go func() { aDone <- a.Heartbeat(context.Background(), kt.Node{}) }()
	waitUntil(t, "a's heartbeat to wait for b's row", func() bool {
		var n int
		if err := raw.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name=$1 AND wait_event_type='Lock'`, appA).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	close(commit)
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	n, ok := nodeRow(t, sb, "b")
	if !ok {
		t.Errorf("b's row is gone right after b's heartbeat committed: a's heartbeat deleted it by id, on what it had read before (b seen over an hour ago); keep status and the page miss b, and the other nodes count it gone, until its next heartbeat")
	} else if time.Now().UnixMilli()-n.SeenAt > hour {
		t.Errorf("b's row: %+v", n)
	}
}

// A node whose loop ended while a repair holds a lease beside it
// (98c1a35: its stop is owed until that release, it no longer
// heartbeats, and its renewer keeps the lease alive). If that lasts past
// NodeForgetAfter (here: b's last heartbeat moved an hour back, as a
// clock an hour ahead on a would see it), a's heartbeat keeps b listed
// while b holds a live lease, so report.Nodes (keep status, the page,
// GET /api/v1/nodes) says who holds the workflow; and b's stop keeps its
// start time. The attack found b forgotten, and its stop then wrote a
// new row started at the stop's time.
func TestANodeHoldingALiveLeaseIsNotForgotten(t *testing.T) {
	u := pgtest.FreshSchema(t)
	st := openAt(t, u)
	defer st.Close()
	raw, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	b := New(Options{Engine: engine.New(engine.Options{Store: st}), Node: "b", LeaseTTL: time.Minute, Poll: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- b.Run(ctx) }()
	waitUntil(t, "b's heartbeat recorded", func() bool { return b.announced.Load() })
	entered, leave := make(chan struct{}), make(chan struct{})
	repaired := make(chan error, 1)
	go func() {
		_, err := b.WithLease(context.Background(), "w-repair", func(context.Context) error {
			close(entered)
			<-leave
			return nil
		})
		repaired <- err
	}()
	<-entered
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	orig, ok := nodeRow(t, st, "b")
	if !ok || orig.StoppedAt != 0 {
		t.Fatalf("b's row with its stop owed: %+v %v", orig, ok)
	}
	// An hour passes (b's repair goes on; its renewer renews the lease).
	if _, err := raw.Exec(`UPDATE nodes SET seen_at = seen_at - $1 WHERE id = 'b'`, kt.NodeForgetAfter.Milliseconds()+10_000); err != nil {
		t.Fatal(err)
	}
	a := New(Options{Engine: engine.New(engine.Options{Store: st}), Node: "a", LeaseTTL: time.Minute})
	if err := a.Heartbeat(context.Background(), kt.Node{}); err != nil {
		t.Fatal(err)
	}
	if h := holders(t, st); h["w-repair"] != "b" {
		t.Fatalf("leases: %v, want w-repair held by b", h)
	}
	ns, err := report.Nodes(context.Background(), st, time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, n := range ns {
		for _, w := range n.Holds {
			listed = listed || w == "w-repair"
		}
	}
	if !listed {
		t.Errorf("b holds the live lease of w-repair, and report.Nodes lists %+v: the holder is forgotten (ForgottenAt does not ask whether the node still holds a lease)", ns)
	}
	close(leave)
	if err := <-repaired; err != nil {
		t.Fatal(err)
	}
	n, ok := nodeRow(t, st, "b")
	if !ok || n.StoppedAt == 0 {
		t.Fatalf("b after its repair: %+v %v, want it recorded stopped", n, ok)
	}
	if n.StartedAt != orig.StartedAt {
		t.Errorf("b's stop, recorded after its row was forgotten, made a new row started at %s (the stop), not at b's start %s", time.UnixMilli(n.StartedAt).Format("15:04:05.000"), time.UnixMilli(orig.StartedAt).Format("15:04:05.000"))
	}
}
