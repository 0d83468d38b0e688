package bench

import (
	"context"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
)

// roundTripsPerConsumerRun is what one consumer run of the bench's
// workflow (peek one event, reserve it, one POST, commit) sends to
// PostgreSQL, counted by the store (Stats.RoundTrips): the step's plan
// (BEGIN, its six reads, the page peek is expected to read included,
// and the ROLLBACK, in one pipeline: store.ReadsAhead), the first commit
// in one pipeline (BEGIN, the fence check, the selection's reservation
// and the ledger row's insert as conditional writes — EventReserve,
// MutationInsert: no read — the run, the COMMIT) and the second, in one
// too (BEGIN, the fence check, the ledger row, the events and the
// handler's row written on the copies the first commit wrote —
// MutationPutFrom, EventSettle, HandlerAdvance: no read — the run's
// conditional write and the COMMIT). Prepare's selection, the page it
// peeked, is checked against the copies it read
// (runExec.checkSelection): 4 before the second commit wrote on copies,
// 5 before the first commit's checks became its writes' conditions, 6
// before the plan's ROLLBACK went with its reads, 8 before those, 21
// before reads went ahead and checks were held back (issue 25), 50
// before issue 25. A change that sends more fails here: say why in
// docs/performance.md and change the figure.
const roundTripsPerConsumerRun = 3

func TestRoundTripsPerConsumerRunOnPostgres(t *testing.T) {
	ctx := context.Background()
	const n = 4
	l, err := load(ctx, t.TempDir(), pgtest.FreshSchema(t), 1, n)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	// Steps hold the workflow's lease, as keep serve's scheduler's do:
	// every write of theirs is fenced.
	wf := "bench-000"
	if err := l.k.Store.Update(store.ForWorkflows(ctx, wf), func(tx store.Tx) error {
		return tx.LeasePut(kt.Lease{Workflow: wf, Node: "n", Token: 1, ExpiresAt: 1 << 50})
	}); err != nil {
		t.Fatal(err)
	}
	fenced := store.WithFence(ctx, store.Fence{Workflow: wf, Node: "n", Token: 1})
	for i := 1; i <= n; i++ {
		before := l.k.Store.Stats().RoundTrips
		did, err := l.k.Engine.Step(fenced, wf)
		if err != nil || !did {
			t.Fatalf("run %d: did %v, %v", i, did, err)
		}
		// The first run of a process reads the installation's id too (once).
		if got := l.k.Store.Stats().RoundTrips - before; i > 1 && got != roundTripsPerConsumerRun {
			t.Errorf("consumer run %d: %d round trips, want %d", i, got, roundTripsPerConsumerRun)
		}
	}
	if got := l.applied.Load(); got != n {
		t.Fatalf("the sink saw %d writes, want %d", got, n)
	}
	// The plan named every read it made: none ran twice.
	if got := l.k.Store.Stats().Rereads; got != 0 {
		t.Errorf("%d step plans ran again (a read they had not named), want 0", got)
	}
}

// A person's (or a program's) list of a workflow's runs, and of its
// outputs, is one round trip on PostgreSQL: the workflow's check and the
// list go together, with no snapshot of their own (a list polled while
// runs commit must not weigh on them: issue 25).
func TestAListIsOneRoundTripOnPostgres(t *testing.T) {
	ctx := context.Background()
	l, err := load(ctx, t.TempDir(), pgtest.FreshSchema(t), 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	wf := "bench-000"
	for i := 0; i < 3; i++ {
		if _, err := l.k.Engine.Step(ctx, wf); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		list func() (int, error)
	}{
		{"runs", func() (int, error) {
			rs, _, err := report.Runs(ctx, l.k.Store, wf, store.Page{Limit: 3})
			return len(rs), err
		}},
		{"outputs", func() (int, error) {
			os, _, err := report.Outputs(ctx, l.k.Store, wf, store.Page{Limit: 3})
			return len(os), err
		}},
	} {
		before := l.k.Store.Stats().RoundTrips
		n, err := c.list()
		if err != nil || n == 0 {
			t.Fatalf("%s: %d rows, %v", c.name, n, err)
		}
		if got := l.k.Store.Stats().RoundTrips - before; got != 1 {
			t.Errorf("the list of %s: %d round trips, want 1", c.name, got)
		}
	}
	if _, _, err := report.Runs(ctx, l.k.Store, "no-such", store.Page{Limit: 3}); err == nil || !strings.Contains(err.Error(), "no-such") {
		t.Fatalf("the runs of a workflow that does not exist: %v", err)
	}
}
