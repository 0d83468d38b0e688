package postgres

import (
	"context"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// The tally triggers (migrations 024 and 028) cost PostgreSQL a third of
// a consumer run's CPU (docs/performance.md, "PostgreSQL's share per
// run"). A row updated without a change to what the tallies count starts
// no PL/pgSQL at all: the trigger's WHEN compares the counted columns
// before PostgreSQL calls keep_tally_row, which migration 024's trigger
// called for every update naming those columns. Counted by PostgreSQL's
// own statistics of function calls (track_functions).
func TestAnUpdateThatChangesNothingCountedCallsNoTrigger(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, freshSchema(t)+"&track_functions=pl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.db.SetMaxOpenConns(1) // the connection whose counters are read
	calls := func() int64 {
		t.Helper()
		// A backend sends its counters when it next goes idle; one
		// statement after the forced flush sees them.
		if _, err := s.db.ExecContext(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := s.db.QueryRowContext(ctx, `SELECT pg_stat_clear_snapshot(), coalesce((SELECT calls FROM pg_stat_user_functions WHERE schemaname = current_schema() AND funcname = 'keep_tally_row'), 0)`).Scan(new(any), &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	run := kt.Run{ID: "r", Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Phase: kt.PhasePreparing, Status: kt.StatusActive, CreatedAt: 1}
	update := func(change func(*kt.Run)) int64 {
		t.Helper()
		before := calls()
		if err := s.Update(ctx, func(tx store.Tx) error {
			r, err := tx.RunGet(run.ID)
			if err != nil {
				return err
			}
			change(&r)
			return tx.RunSetIfRev(r)
		}); err != nil {
			t.Fatal(err)
		}
		return calls() - before
	}
	before := calls()
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.RunPut(run) }); err != nil {
		t.Fatal(err)
	}
	if n := calls() - before; n != 1 {
		t.Fatalf("a run's insert called keep_tally_row %d times, want 1 (are function calls counted?)", n)
	}
	if n := update(func(r *kt.Run) { r.Phase = kt.PhaseMutating }); n != 0 {
		t.Errorf("a run's update that changed its phase, not its status, called keep_tally_row %d times, want 0", n)
	}
	if n := update(func(r *kt.Run) { r.Status = kt.StatusCommitted; r.Phase = kt.PhaseCommitted }); n != 1 {
		t.Errorf("a run's update that changed its status called keep_tally_row %d times, want 1", n)
	}
	var counted []store.Tally
	if err := s.View(ctx, func(tx store.Tx) error {
		c, err := tx.Counts()
		counted = c.Runs
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := []store.Tally{{Workflow: "w", Status: string(kt.StatusCommitted), N: 1}}; len(counted) != 1 || counted[0] != want[0] {
		t.Errorf("the runs counted: %+v, want %+v", counted, want)
	}
}
