package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/store/storetest"
)

func freshSchema(t *testing.T) string { return pgtest.FreshSchema(t) }

func TestStoreConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store {
		s, err := Open(context.Background(), freshSchema(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// A database written by a newer keep (a migration this one does not know)
// is refused, with what to do; nothing is changed.
func TestANewerSchemaIsRefused(t *testing.T) {
	u := freshSchema(t)
	s, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := sql.Open("pgx", u)
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO schema_migrations(name, applied_at) VALUES('999_from_the_future.sql', 1)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(context.Background(), u); err == nil || !strings.Contains(err.Error(), "999_from_the_future.sql") || !strings.Contains(err.Error(), "newer keep") {
		t.Fatalf("opening a newer schema: %v", err)
	}
}

func TestRebind(t *testing.T) {
	for in, want := range map[string]string{
		`SELECT a FROM t WHERE x=? AND y=?`:           `SELECT a FROM t WHERE x=$1 AND y=$2`,
		`SELECT 1 WHERE s='?' AND r<>'' AND z=?`:      `SELECT 1 WHERE s='?' AND r<>'' AND z=$1`,
		`INSERT INTO e(a,b) VALUES(?,?) RETURNING id`: `INSERT INTO e(a,b) VALUES($1,$2) RETURNING id`,
	} {
		if got := rebind(in); got != want {
			t.Errorf("rebind(%q) = %q, want %q", in, got, want)
		}
	}
}

// A commit by one node wakes the others (LISTEN/NOTIFY).
func TestACommitWakesTheOtherNodes(t *testing.T) {
	u := freshSchema(t)
	a, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	woke := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Listen(ctx, func() { woke <- struct{}{} })
	// Until b listens, commits are missed: commit until one arrives.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := a.Update(context.Background(), func(tx store.Tx) error {
			return tx.WorkflowPut(kt.Workflow{Name: "w", CreatedAt: 1, UpdatedAt: 1})
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-woke:
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no node was woken by a commit within 30 s")
		}
	}
}

// Steps of different workflows write at once: no lock serializes them. Two
// writers of one workflow are serialized, and the second sees what the
// first committed. Waiting is observed in pg_stat_activity (the test's own
// connections, by application_name), never timed.
func TestWritersAreSerializedPerWorkflow(t *testing.T) {
	app := "keep_lock_test_" + strings.ReplaceAll(t.Name(), "/", "_")
	u := freshSchema(t) + "&application_name=" + app
	s, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	waiting := func() int {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	ctx := context.Background()
	fence := map[string]context.Context{}
	for _, wf := range []string{"w1", "w2"} {
		if err := s.Update(ctx, func(tx store.Tx) error {
			return tx.LeasePut(kt.Lease{Workflow: wf, Node: "n", Token: 1, ExpiresAt: 1 << 50})
		}); err != nil {
			t.Fatal(err)
		}
		fence[wf] = store.WithFence(ctx, store.Fence{Workflow: wf, Node: "n", Token: 1})
	}
	put := func(tx store.Tx, wf, name string) error {
		return tx.HandlerPut(kt.Handler{Workflow: wf, Name: name, Type: kt.HandlerProducer})
	}
	inside, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.Update(fence["w1"], func(tx store.Tx) error {
			// The locks go with the first statement that needs an answer.
			if _, err := tx.HandlerList("w1"); err != nil {
				return err
			}
			if err := put(tx, "w1", "a"); err != nil {
				return err
			}
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	// w1's transaction is open: a step of w2 commits meanwhile, and so do
	// a renewal of w2's lease and a node's heartbeat.
	withoutWaiting := func(what string, ctx context.Context, fn func(store.Tx) error) {
		c := make(chan error, 1)
		go func() { c <- s.Update(ctx, fn) }()
		for {
			select {
			case err := <-c:
				if err != nil {
					t.Fatal(err)
				}
				return
			default:
				if waiting() > 0 {
					close(release)
					t.Fatalf("%s waits for a lock held by a step of w1", what)
				}
			}
		}
	}
	withoutWaiting("a step of w2", fence["w2"], func(tx store.Tx) error { return put(tx, "w2", "b") })
	withoutWaiting("a renewal of w2's lease", store.ForWorkflows(ctx, "w2"), func(tx store.Tx) error {
		return tx.LeasePut(kt.Lease{Workflow: "w2", Node: "n", Token: 1, ExpiresAt: 1 << 51})
	})
	withoutWaiting("a heartbeat", store.ForWorkflows(ctx), func(tx store.Tx) error {
		return tx.NodePut(kt.Node{ID: "n", SeenAt: 1})
	})
	// A second writer of w1 waits for the first, then sees its write.
	second := make(chan error, 1)
	go func() {
		second <- s.Update(fence["w1"], func(tx store.Tx) error {
			hs, err := tx.HandlerList("w1")
			if err != nil {
				return err
			}
			if len(hs) != 1 || hs[0].Name != "a" {
				return fmt.Errorf("the second writer of w1 sees %+v, not the first's handler", hs)
			}
			return put(tx, "w1", "c")
		})
	}()
	untilWaiting := func(c chan error, what string) {
		for waiting() == 0 {
			select {
			case err := <-c:
				t.Fatalf("%s: %v", what, err)
			default:
			}
		}
	}
	untilWaiting(second, "the second writer of w1 did not wait for the first")
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	// A write without a lease (a person's action) waits for every step.
	inside, release = make(chan struct{}), make(chan struct{})
	go func() {
		first <- s.Update(fence["w2"], func(tx store.Tx) error {
			if _, err := tx.HandlerList("w2"); err != nil {
				return err
			}
			close(inside)
			<-release
			return put(tx, "w2", "d")
		})
	}()
	<-inside
	go func() { second <- s.Update(ctx, func(tx store.Tx) error { return put(tx, "w1", "e") }) }()
	untilWaiting(second, "a write without a lease did not wait for a step")
	close(release)
	for _, c := range []chan error{first, second} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
}

// Writes are held back and sent together (runner.Defer): a read in the same
// transaction sees them, and one that fails fails the whole transaction,
// naming the writes sent with it; nothing of it is stored.
func TestHeldBackWrites(t *testing.T) {
	s, err := Open(context.Background(), freshSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	before := s.Stats().RoundTrips
	if err := s.Update(ctx, func(tx store.Tx) error {
		for _, n := range []string{"a", "b", "c"} {
			if err := tx.HandlerPut(kt.Handler{Workflow: "w", Name: n, Type: kt.HandlerProducer, State: []byte(`{"q":"it's"}`)}); err != nil {
				return err
			}
		}
		hs, err := tx.HandlerList("w")
		if err != nil || len(hs) != 3 || string(hs[0].State) != `{"q": "it's"}` && string(hs[0].State) != `{"q":"it's"}` {
			return fmt.Errorf("the transaction's own writes, read back: %+v %v", hs, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The BEGIN, the writers' lock, the three writes and the read in one
	// pipeline; the commit.
	if n := s.Stats().RoundTrips - before; n != 2 {
		t.Errorf("%d round trips, want 2", n)
	}
	// A read-only transaction: its BEGIN goes with its first read, then
	// the rollback; one that reads nothing sends nothing.
	before = s.Stats().RoundTrips
	if err := s.View(ctx, func(tx store.Tx) error { _, err := tx.HandlerGet("w", "a"); return err }); err != nil {
		t.Fatal(err)
	}
	if err := s.View(ctx, func(tx store.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := s.Stats().RoundTrips - before; n != 2 {
		t.Errorf("two views, one reading one row and one nothing: %d round trips, want 2", n)
	}
	m := kt.Mutation{ID: "m1", Workflow: "w", IdentityKey: "same", Status: kt.MutationInFlight}
	err = s.Update(ctx, func(tx store.Tx) error {
		if err := tx.HandlerPut(kt.Handler{Workflow: "w", Name: "d", Type: kt.HandlerProducer}); err != nil {
			return err
		}
		if err := tx.MutationPut(m); err != nil {
			return err
		}
		m2 := m
		m2.ID = "m2" // the same identity: refused by the unique key
		return tx.MutationPut(m2)
	})
	if err == nil || !strings.Contains(err.Error(), "save mutation m2") || !strings.Contains(err.Error(), "identity_key") {
		t.Fatalf("a failing held-back write: %v", err)
	}
	if err := s.View(ctx, func(tx store.Tx) error {
		hs, err := tx.HandlerList("w")
		if err != nil || len(hs) != 3 {
			return fmt.Errorf("handlers after the failed transaction: %+v %v", hs, err)
		}
		if _, err := tx.MutationGet("m1"); !errors.Is(err, kt.ErrNotFound) {
			return fmt.Errorf("m1 after the failed transaction: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A transaction whose process stops between two statements (paused, a
// frozen VM) does not hold the writers' lock for ever: PostgreSQL ends it
// (idle_in_transaction_session_timeout, here shortened through the URL),
// its Update fails and writes nothing, and the other writers go on.
func TestAStoppedTransactionReleasesItsLocks(t *testing.T) {
	s, err := Open(context.Background(), freshSchema(t)+"&"+idleParam+"=300")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	inside, release := make(chan struct{}), make(chan struct{})
	stopped := make(chan error, 1)
	go func() {
		stopped <- s.Update(ctx, func(tx store.Tx) error {
			if err := tx.WorkflowPut(kt.Workflow{Name: "stopped", CreatedAt: 1, UpdatedAt: 1}); err != nil {
				return err
			}
			if _, err := tx.WorkflowGet("stopped"); err != nil { // sent: the lock and the write are held
				return err
			}
			close(inside)
			<-release // the process "stops" here, between two statements
			return nil
		})
	}()
	<-inside
	// Waits for the writers' lock until PostgreSQL ends the stopped one.
	if err := s.Update(ctx, func(tx store.Tx) error {
		return tx.WorkflowPut(kt.Workflow{Name: "other", CreatedAt: 1, UpdatedAt: 1})
	}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-stopped; err == nil {
		t.Fatal("the stopped transaction committed after PostgreSQL ended it")
	}
	if err := s.View(ctx, func(tx store.Tx) error {
		if _, err := tx.WorkflowGet("stopped"); !errors.Is(err, kt.ErrNotFound) {
			return fmt.Errorf("the stopped transaction's write: %v", err)
		}
		_, err := tx.WorkflowGet("other")
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, failing the test with what after 30 s
// (a bound for a loaded machine, never a measurement).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// listening opens a store on u that listens, counting its wake-ups in woke,
// until the test ends.
func listening(t *testing.T, u string, woke *atomic.Int64) *Store {
	t.Helper()
	s, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); s.Close() })
	go s.Listen(ctx, func() { woke.Add(1) })
	waitFor(t, "the store listens", func() bool { return s.listenerPID.Load() != 0 })
	return s
}

// A node alone on its schema sends no notice: nobody but itself would hear
// it, and its own commits wake it already.
func TestALoneNodeSendsNoNotice(t *testing.T) {
	var woke atomic.Int64
	s := listening(t, freshSchema(t), &woke)
	for i := 0; i < 20; i++ {
		if err := s.Update(context.Background(), func(tx store.Tx) error {
			return tx.WorkflowPut(kt.Workflow{Name: "w", CreatedAt: 1, UpdatedAt: int64(i + 1)})
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the commits are announced", func() bool { n := s.Notices(); return n.Sent+n.Spared > 0 })
	if n := s.Notices(); n.Sent != 0 || woke.Load() != 0 {
		t.Fatalf("a lone node sent %d notices and was woken %d times by them (%+v); want none", n.Sent, woke.Load(), n)
	}
}

// A node's listener drops the notices it sent itself (its own commits wake
// it already: waking again would be a pass over the store for nothing),
// wakes its scheduler for every other one, from another node or an older
// keep (no kind, no payload), and only its pages for another node's
// steps. Notices are heard in the order they were committed, so when the
// last is heard, every wake-up has been made.
func TestANodeIsNotWokenByItsOwnNotices(t *testing.T) {
	u := freshSchema(t)
	s, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); s.Close() })
	var changed, stepped atomic.Int64
	go s.ListenByKind(ctx, func() { changed.Add(1) }, func() { stepped.Add(1) })
	waitFor(t, "the store listens", func() bool { return s.listenerPID.Load() != 0 })
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	payloads := []string{s.self + ":w", s.self + ":s", "another:w", s.self, "another:s", "", "another"}
	for _, payload := range payloads {
		if _, err := db.Exec(`SELECT pg_notify($1, $2)`, s.channelName, payload); err != nil {
			t.Fatal(err)
		}
	}
	// Open's own commit may have been announced (to a listener it took for
	// another): counted in Sent, and heard too.
	waitFor(t, "Open's commit is announced", func() bool { n := s.Notices(); return n.Sent+n.Spared > 0 })
	waitFor(t, "the notices are heard", func() bool { n := s.Notices(); return n.Heard >= int64(len(payloads))+n.Sent })
	if changed.Load() != 3 || stepped.Load() != 1 {
		t.Fatalf("woken %d times (want 3: another's, an older keep's twice) and told of steps %d times (want 1: another's), by 3 notices of its own and 4 of others", changed.Load(), stepped.Load())
	}
}

// A step's commit (fenced: its node holds the workflow's lease and steps
// on) tells the other nodes' pages, not their schedulers; any other commit
// (here a lease's) wakes their schedulers.
func TestAStepsCommitWakesOnlyTheOtherNodesPages(t *testing.T) {
	u := freshSchema(t)
	a, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	announced := func(n int64) bool { got := a.Notices(); return got.Sent+got.Spared >= n }
	// a's commits that are not steps (Open's, the lease's) are announced
	// before b listens, each on its own: b hears a's steps alone.
	waitFor(t, "a's Open is announced", func() bool { return announced(1) })
	if err := a.Update(context.Background(), func(tx store.Tx) error {
		return tx.LeasePut(kt.Lease{Workflow: "w", Node: "n", Token: 1, ExpiresAt: 1 << 50})
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a's lease is announced", func() bool { return announced(2) })
	fenced := store.WithFence(context.Background(), store.Fence{Workflow: "w", Node: "n", Token: 1})
	b, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); b.Close() })
	var changed, stepped atomic.Int64
	go b.ListenByKind(ctx, func() { changed.Add(1) }, func() { stepped.Add(1) })
	waitFor(t, "b listens", func() bool { return b.listenerPID.Load() != 0 })
	i := 0
	waitFor(t, "a step's commit reaches b", func() bool {
		i++
		if err := a.Update(fenced, func(tx store.Tx) error {
			return tx.HandlerPut(kt.Handler{Workflow: "w", Name: fmt.Sprint("h", i), Type: kt.HandlerProducer})
		}); err != nil {
			t.Fatal(err)
		}
		return stepped.Load() > 0
	})
	if changed.Load() != 0 {
		t.Fatalf("b's scheduler was woken %d times by a's steps", changed.Load())
	}
	if err := a.Update(store.ForWorkflows(context.Background(), "w"), func(tx store.Tx) error {
		return tx.LeasePut(kt.Lease{Workflow: "w", Node: "n", Token: 1, ExpiresAt: 1 << 51})
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a's lease commit wakes b", func() bool { return changed.Load() > 0 })
}

// A pool that closes connections it needs again a moment later makes
// PostgreSQL start a backend for each (a fork, its caches, plpgsql) and
// keep prepare its statements again: as many steps at once as the pool
// holds, twice, open the connections once and close none.
func TestTheConnectionsAreKept(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, freshSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all := make(chan struct{})
	for round := 0; round < 2; round++ {
		var inside atomic.Int64
		errs := make(chan error, maxConns)
		for i := 0; i < maxConns; i++ {
			go func() {
				errs <- s.View(ctx, func(tx store.Tx) error {
					if _, err := tx.WorkflowGet(fmt.Sprintf("wf-%d", i)); err != nil && !errors.Is(err, kt.ErrNotFound) {
						return err
					}
					// Every transaction holds its connection until all are open.
					if inside.Add(1) == maxConns {
						close(all)
					}
					<-all
					return nil
				})
			}()
		}
		for i := 0; i < maxConns; i++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		all = make(chan struct{})
	}
	st := s.db.Stats()
	if st.MaxIdleClosed != 0 || st.MaxIdleTimeClosed != 0 || st.MaxLifetimeClosed != 0 {
		t.Fatalf("the pool closed connections it needed again: %+v", st)
	}
}
