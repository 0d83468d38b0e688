package storetest

import (
	"context"
	"fmt"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exerciseInputs covers inputs.
func exerciseInputs(run runCase) {
	ctx := context.Background()
	run("inputs are unique per workflow and key", func(t *testing.T, s store.Store) {
		in := kt.Input{ID: "i1", Workflow: "w", Key: "system:schedule:1", Kind: kt.KindInput, Title: "t", CurrentAttempt: 1}
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.InputPut(in) }))
		other := in
		other.ID = "i2"
		if err := s.Update(ctx, func(tx store.Tx) error { return tx.InputPut(other) }); err == nil {
			t.Fatal("a second input with the same key was accepted")
		}
		must(t, s.View(ctx, func(tx store.Tx) error {
			got, err := tx.InputGetByKey("w", "system:schedule:1")
			if err != nil || got.ID != "i1" {
				return fmt.Errorf("by key %+v %v", got, err)
			}
			return nil
		}))
	})
}
