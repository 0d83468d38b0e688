package storetest

import (
	"context"
	"fmt"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exerciseDecisions covers the decision log and the Maintainer's repairs.
func exerciseDecisions(run runCase) {
	ctx := context.Background()
	run("the decision log appends and lists by run", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for i, d := range []kt.Decision{
				{Workflow: "w", RunID: "r1", MutationID: "m1", Action: "didnt-happen", By: "alice", Detail: "sent again", At: 1},
				{Workflow: "w", ItemID: "i1", Action: "reprocess", By: "cli", At: 2},
				{Workflow: "w", RunID: "r1", Action: "skip", By: "bob", At: 3},
				{Workflow: "other", RunID: "r1", Action: "skip", By: "eve", At: 4},
			} {
				if err := tx.DecisionAdd(d); err != nil {
					return fmt.Errorf("decision %d: %w", i, err)
				}
			}
			all, err := tx.DecisionList("w", "")
			if err != nil || len(all) != 3 || all[0].By != "alice" || all[0].MutationID != "m1" || all[1].ItemID != "i1" || all[2].At != 3 {
				return fmt.Errorf("all decisions: %+v %v", all, err)
			}
			onRun, err := tx.DecisionList("w", "r1")
			if err != nil || len(onRun) != 2 || onRun[0].Action != "didnt-happen" || onRun[1].Action != "skip" || onRun[0].ID >= onRun[1].ID {
				return fmt.Errorf("decisions on r1: %+v %v", onRun, err)
			}
			return nil
		}))
	})
	run("repairs: attempts kept, a decision updates its status", func(t *testing.T, s store.Store) {
		a := kt.Repair{ID: "r1", Workflow: "w", RunID: "run", Attempt: 1, Status: kt.RepairRefused, FromVersion: 1, Script: "x", Explanation: "e", Reason: "bad", Tokens: 10, CreatedAt: 1, UpdatedAt: 1}
		// Recorded before the model is asked, then with its answer.
		b := kt.Repair{ID: "r2", Workflow: "w", RunID: "run", Attempt: 2, Status: kt.RepairAsking, FromVersion: 1, CreatedAt: 2, UpdatedAt: 2}
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if err := tx.RepairPut(a); err != nil {
				return err
			}
			return tx.RepairPut(b)
		}))
		b.Status, b.Script, b.Explanation, b.Tokens = kt.RepairHeld, "y", "why", 20
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.RepairPut(b) }))
		b.Status, b.ToVersion, b.DecidedBy, b.UpdatedAt = kt.RepairActivated, 7, "ann", 3
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.RepairPut(b) }))
		must(t, s.View(ctx, func(tx store.Tx) error {
			rs, err := tx.RepairList("w")
			if err != nil || len(rs) != 2 || rs[0].Status != kt.RepairRefused || rs[0].Tokens != 10 || rs[1].Status != kt.RepairActivated || rs[1].ToVersion != 7 || rs[1].DecidedBy != "ann" || rs[1].Script != "y" || rs[1].Explanation != "why" || rs[1].Tokens != 20 {
				return fmt.Errorf("repairs %+v %v", rs, err)
			}
			return nil
		}))
	})
}
