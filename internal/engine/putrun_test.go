package engine

import (
	"context"
	"errors"
	"github.com/keep-run/keep/internal/transition"
	"path/filepath"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqlite"
)

// A finished run is never written over (issue 13): a stale step that still
// holds the run as it was cannot undo a newer state.
func TestPutRunRefusesToWriteOverAFinishedRun(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	r := kt.Run{ID: "r1", Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Phase: kt.PhaseMutating, Status: kt.StatusActive}
	if err := st.Update(ctx, func(tx store.Tx) error { return transition.PutRun(tx, &r) }); err != nil {
		t.Fatal(err)
	}
	stale := r
	r.Status, r.Phase = kt.StatusCommitted, kt.PhaseCommitted
	if err := st.Update(ctx, func(tx store.Tx) error { return transition.PutRun(tx, &r) }); err != nil {
		t.Fatal(err)
	}
	stale.Status, stale.ErrorMessage = kt.StatusTransient, "a late failure"
	err = st.Update(ctx, func(tx store.Tx) error { return transition.PutRun(tx, &stale) })
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("want the write from an older revision refused, got %v", err)
	}
	// From the current revision, the run status machine still refuses.
	late := r
	late.Status, late.ErrorMessage = kt.StatusTransient, "a late failure"
	err = st.Update(ctx, func(tx store.Tx) error { return transition.PutRun(tx, &late) })
	if err == nil || kt.ClassOf(err) != kt.ClassInternal || !strings.Contains(err.Error(), `"committed" → "paused:transient"`) {
		t.Fatalf("want the forbidden move refused, got %v", err)
	}
	_ = st.View(ctx, func(tx store.Tx) error {
		got, err := tx.RunGet("r1")
		if err != nil || got.Status != kt.StatusCommitted || got.ErrorMessage != "" {
			t.Fatalf("the committed run was changed: %+v %v", got, err)
		}
		return nil
	})
}

// WhoActs is the one rule for who must move a run on.
func TestWhoActs(t *testing.T) {
	t.Parallel()
	unknown := kt.Mutation{Status: kt.MutationIndeterminate}
	checking := kt.Mutation{Status: kt.MutationNeedsReconcile}
	cases := []struct {
		name   string
		run    kt.Run
		mut    kt.Mutation
		hasMut bool
		want   Who
	}{
		{"committed", kt.Run{Status: kt.StatusCommitted}, kt.Mutation{}, false, Nobody},
		{"retried", kt.Run{Status: kt.StatusRetried}, kt.Mutation{}, false, Nobody},
		{"running", kt.Run{Status: kt.StatusActive}, kt.Mutation{}, false, Nobody},
		{"crashed", kt.Run{Status: kt.StatusCrashed}, kt.Mutation{}, false, Keep},
		{"a decision to carry out", kt.Run{Status: kt.StatusFailedLogic, Action: ActionRetry}, kt.Mutation{}, false, Keep},
		{"a timed retry", kt.Run{Status: kt.StatusTransient, NextAttemptAt: 1}, kt.Mutation{}, false, Keep},
		{"retries given up", kt.Run{Status: kt.StatusTransient}, kt.Mutation{}, false, APerson},
		{"keep still checking", kt.Run{Status: kt.StatusReconciliation}, checking, true, Keep},
		{"outcome unknown", kt.Run{Status: kt.StatusReconciliation}, unknown, true, APerson},
		{"approval", kt.Run{Status: kt.StatusApproval}, kt.Mutation{}, false, APerson},
		{"logic failure", kt.Run{Status: kt.StatusFailedLogic}, kt.Mutation{}, false, APerson},
		{"internal failure", kt.Run{Status: kt.StatusFailedInternal}, kt.Mutation{}, false, APerson},
	}
	for _, c := range cases {
		if got := WhoActs(c.run, c.mut, c.hasMut); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// Every write of a task item goes through its state machine (ch 12 §12.4).
func TestPutItemChecksTheItemMachine(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	it := kt.Input{ID: "i", Workflow: "w", Key: "email:1", Kind: "task", Status: kt.ItemProcessing, CurrentAttempt: 1}
	for _, status := range []kt.ItemStatus{kt.ItemProcessing, kt.ItemDone} {
		it.Status = status
		if err := st.Update(ctx, func(tx store.Tx) error { return transition.PutItem(tx, it) }); err != nil {
			t.Fatalf("%s: %v", status, err)
		}
	}
	it.Status = kt.ItemFailed
	if err := st.Update(ctx, func(tx store.Tx) error { return transition.PutItem(tx, it) }); err == nil || !strings.Contains(err.Error(), `"done" → "failed"`) {
		t.Fatalf("done → failed: %v", err)
	}
	it.Status = kt.ItemProcessing // reprocess
	if err := st.Update(ctx, func(tx store.Tx) error { return transition.PutItem(tx, it) }); err != nil {
		t.Fatalf("done → processing: %v", err)
	}
}
