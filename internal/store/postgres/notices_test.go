package postgres

import (
	"context"
	"sync/atomic"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// A node that starts listening after another node found itself alone (its
// answer cached for askOthersEvery) is still told of that node's commits
// once the cache runs out, and the first node never wakes itself; a
// commit of the later node wakes the first at once (it was listening when
// the later one asked).
func TestALaterNodeIsWokenAndWakesTheFirst(t *testing.T) {
	u := freshSchema(t)
	a, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wokeA, wokeB atomic.Int64
	go a.Listen(ctx, func() { wokeA.Add(1) })
	waitFor(t, "A listens", func() bool { return a.listenerPID.Load() != 0 })
	put := func(s *Store, i int) {
		t.Helper()
		if err := s.Update(context.Background(), func(tx store.Tx) error {
			return tx.WorkflowPut(kt.Workflow{Name: "w", CreatedAt: 1, UpdatedAt: int64(i)})
		}); err != nil {
			t.Fatal(err)
		}
	}
	put(a, 1)
	waitFor(t, "A is spared its notice (alone)", func() bool { return a.Notices().Spared > 0 })
	b, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	go b.Listen(ctx, func() { wokeB.Add(1) })
	waitFor(t, "B listens", func() bool { return b.listenerPID.Load() != 0 })
	i := 2
	waitFor(t, "a commit of A wakes B", func() bool { put(a, i); i++; return wokeB.Load() > 0 })
	before := wokeA.Load()
	put(b, 1000)
	waitFor(t, "B's commit wakes A", func() bool { return wokeA.Load() > before })
	n := a.Notices()
	waitFor(t, "A hears its own notices", func() bool { return a.Notices().Heard >= n.Sent })
	t.Logf("A: %+v woken %d; B: %+v woken %d", a.Notices(), wokeA.Load(), b.Notices(), wokeB.Load())
}
