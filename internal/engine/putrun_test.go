package engine

import (
	"context"
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
	if err := st.Update(ctx, func(tx store.Tx) error { return putRun(tx, r) }); err != nil {
		t.Fatal(err)
	}
	stale := r
	r.Status, r.Phase = kt.StatusCommitted, kt.PhaseCommitted
	if err := st.Update(ctx, func(tx store.Tx) error { return putRun(tx, r) }); err != nil {
		t.Fatal(err)
	}
	stale.Status, stale.ErrorMessage = kt.StatusTransient, "a late failure"
	err = st.Update(ctx, func(tx store.Tx) error { return putRun(tx, stale) })
	if err == nil || kt.ClassOf(err) != kt.ClassInternal || !strings.Contains(err.Error(), `"committed" → "paused:transient"`) {
		t.Fatalf("want the stale write refused, got %v", err)
	}
	_ = st.View(ctx, func(tx store.Tx) error {
		got, err := tx.RunGet("r1")
		if err != nil || got.Status != kt.StatusCommitted || got.ErrorMessage != "" {
			t.Fatalf("the committed run was changed: %+v %v", got, err)
		}
		return nil
	})
}
