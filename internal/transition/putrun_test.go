package transition

import (
	"context"
	"errors"
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
	if err := st.Update(ctx, func(tx store.Tx) error { return PutRun(tx, &r) }); err != nil {
		t.Fatal(err)
	}
	stale := r
	r.Status, r.Phase = kt.StatusCommitted, kt.PhaseCommitted
	if err := st.Update(ctx, func(tx store.Tx) error { return PutRun(tx, &r) }); err != nil {
		t.Fatal(err)
	}
	stale.Status, stale.ErrorMessage = kt.StatusTransient, "a late failure"
	err = st.Update(ctx, func(tx store.Tx) error { return PutRun(tx, &stale) })
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("want the write from an older revision refused, got %v", err)
	}
	// From the current revision, the run status machine still refuses.
	late := r
	late.Status, late.ErrorMessage = kt.StatusTransient, "a late failure"
	err = st.Update(ctx, func(tx store.Tx) error { return PutRun(tx, &late) })
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
		if err := st.Update(ctx, func(tx store.Tx) error { return PutItem(tx, it) }); err != nil {
			t.Fatalf("%s: %v", status, err)
		}
	}
	it.Status = kt.ItemFailed
	if err := st.Update(ctx, func(tx store.Tx) error { return PutItem(tx, it) }); err == nil || !strings.Contains(err.Error(), `"done" → "failed"`) {
		t.Fatalf("done → failed: %v", err)
	}
	it.Status = kt.ItemProcessing // reprocess
	if err := st.Update(ctx, func(tx store.Tx) error { return PutItem(tx, it) }); err != nil {
		t.Fatalf("done → processing: %v", err)
	}
}
