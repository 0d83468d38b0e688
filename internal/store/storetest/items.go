package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exerciseItems covers items and their attempts.
func exerciseItems(run runCase) {
	ctx := context.Background()
	run("items and their attempts", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for i, key := range []string{"email:b", "email:a"} {
				it := kt.Input{ID: "it" + key, Workflow: "w", Key: key, Kind: kt.KindTask, Title: "Email " + key, Status: kt.ItemProcessing,
					CurrentAttempt: 1, CreatedBy: "r1", LastRun: "r1", LastVersion: 3, CreatedAt: int64(10 + i), UpdatedAt: int64(10 + i)}
				if err := tx.InputPut(it); err != nil {
					return err
				}
			}
			it, err := tx.InputGet("itemail:a")
			if err != nil {
				return err
			}
			it.Status, it.CurrentAttempt, it.LastRun = kt.ItemDone, 2, "r2"
			if err := tx.InputPut(it); err != nil {
				return err
			}
			for _, a := range []kt.ItemAttempt{{ItemID: "itemail:a", Attempt: 2, Status: kt.ItemProcessing, Version: 3}, {ItemID: "itemail:a", Attempt: 1, Status: kt.ItemDone, Version: 2}} {
				if err := tx.ItemAttemptPut(a); err != nil {
					return err
				}
			}
			// An attempt is updated in place.
			return tx.ItemAttemptPut(kt.ItemAttempt{ItemID: "itemail:a", Attempt: 2, Status: kt.ItemDone, Version: 3, UpdatedAt: 5})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			it, err := tx.InputGet("itemail:a")
			if err != nil || it.Status != kt.ItemDone || it.CurrentAttempt != 2 || it.LastRun != "r2" || it.LastVersion != 3 || it.Kind != kt.KindTask {
				return fmt.Errorf("item %+v %v", it, err)
			}
			if _, err := tx.InputGet("nope"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("missing item: %v", err)
			}
			ins, err := tx.InputList("w")
			if err != nil || len(ins) != 2 || ins[0].Key != "email:b" || ins[1].Key != "email:a" {
				return fmt.Errorf("items in creation order: %+v %v", ins, err)
			}
			as, err := tx.ItemAttemptList("itemail:a")
			if err != nil || len(as) != 2 || as[0].Attempt != 1 || as[1].Attempt != 2 || as[1].Status != kt.ItemDone || as[0].Version != 2 {
				return fmt.Errorf("attempts %+v %v", as, err)
			}
			return nil
		}))
	})
}
