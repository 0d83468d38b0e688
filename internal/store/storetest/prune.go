package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exercisePrune covers the pruner's store side (issue 44): PruneList
// finds the rows whose bodies are kept and that ended before the horizon,
// oldest first, paged by a cursor; PruneBodies drops the bodies of the
// rows named and keeps every row and its identity; a pruned row is not
// listed again; RunIDsNewest names the newest runs of a version.
func exercisePrune(run runCase) {
	ctx := context.Background()
	run("prune drops bodies, keeps identities, pages by cursor", func(t *testing.T, s store.Store) {
		body := json.RawMessage(`{"big":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
		var evIDs []int64
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for i := 1; i <= 5; i++ {
				at := int64(i * 100)
				r := kt.Run{ID: fmt.Sprintf("r%d", i), Workflow: "w", Version: 1, Handler: "h", HandlerType: kt.HandlerConsumer, Phase: kt.PhaseCommitted,
					Status: kt.StatusCommitted, Trace: body, PrepareResult: body, MutationResult: body, CreatedAt: at, UpdatedAt: at, FinishedAt: at}
				if err := tx.RunPut(r); err != nil {
					return err
				}
				e := kt.Event{Workflow: "w", Topic: "t", MessageID: fmt.Sprintf("m%d", i), Payload: body, Status: kt.EventConsumed, Attempt: 1, CreatedAt: at, UpdatedAt: at}
				if _, err := tx.EventPublish(&e); err != nil {
					return err
				}
				evIDs = append(evIDs, e.ID)
				m := kt.Mutation{ID: fmt.Sprintf("m%d", i), Workflow: "w", RunID: r.ID, Handler: "h", Attempt: 1, Tool: "http", Method: "post", Params: body,
					IdentityKey: fmt.Sprintf("id%d", i), PayloadHash: "ph", IdempotencyKey: "ik", Status: kt.MutationApplied, Result: body, CreatedAt: at, UpdatedAt: at}
				if err := tx.MutationPut(m); err != nil {
					return err
				}
			}
			// An open run: never listed (it has not finished).
			return tx.RunPut(kt.Run{ID: "open", Workflow: "w", Version: 1, Handler: "h", HandlerType: kt.HandlerConsumer, Phase: kt.PhasePreparing,
				Status: kt.StatusFailedLogic, Trace: body, CreatedAt: 50, UpdatedAt: 50})
		}))
		// Paged by two: r1, r2 | r3 (before 350), then nothing.
		var got []string
		var after store.PruneCursor
		must(t, s.View(ctx, func(tx store.Tx) error {
			for {
				rows, err := tx.PruneList(store.PruneRuns, 350, after, 2)
				if err != nil {
					return err
				}
				if len(rows) == 0 {
					return nil
				}
				for _, r := range rows {
					got = append(got, r.ID)
					if r.Workflow != "w" || r.Version != 1 || r.Status != string(kt.StatusCommitted) || r.Bytes != int64(3*len(body)) {
						return fmt.Errorf("listed %+v, want workflow w, version 1, committed, %d bytes", r, 3*len(body))
					}
				}
				after = store.PruneCursor{At: rows[len(rows)-1].At, ID: rows[len(rows)-1].ID}
			}
		}))
		if fmt.Sprint(got) != "[r1 r2 r3]" {
			t.Fatalf("PruneList paged %v, want [r1 r2 r3] (finished before 350, oldest first, the open run never)", got)
		}
		tallies := recount(t, s)
		must(t, s.Update(ctx, func(tx store.Tx) error {
			n, b, err := tx.PruneBodies(store.PruneRuns, []string{"r1", "r2"}, 999)
			if err != nil {
				return err
			}
			if n != 2 || b != int64(6*len(body)) {
				return fmt.Errorf("PruneBodies of runs: %d rows, %d bytes; want 2, %d", n, b, 6*len(body))
			}
			if n, _, err = tx.PruneBodies(store.PruneRuns, []string{"r1"}, 999); err != nil || n != 0 {
				return fmt.Errorf("a pruned run pruned again: %d rows (%v), want 0", n, err)
			}
			ids := []string{strconv.FormatInt(evIDs[0], 10)}
			if n, b, err = tx.PruneBodies(store.PruneEvents, ids, 999); err != nil || n != 1 || b != int64(len(body)) {
				return fmt.Errorf("PruneBodies of an event: %d rows, %d bytes (%v)", n, b, err)
			}
			n, _, err = tx.PruneBodies(store.PruneMutations, []string{"m1"}, 999)
			if err != nil || n != 1 {
				return fmt.Errorf("PruneBodies of a ledger row: %d rows (%v)", n, err)
			}
			return nil
		}))
		// Pruning rewrites rows (SQLite: a DELETE and an INSERT): the
		// tallies kept by triggers still match the rows.
		if got := recount(t, s); !reflect.DeepEqual(got, tallies) {
			t.Fatalf("after pruning the tallies are %+v, before %+v", got, tallies)
		}
		must(t, s.View(ctx, func(tx store.Tx) error {
			r, err := tx.RunGet("r1")
			if err != nil {
				return err
			}
			if r.Trace != nil || r.PrepareResult != nil || r.MutationResult != nil || r.Status != kt.StatusCommitted || r.FinishedAt != 100 {
				return fmt.Errorf("pruned run r1: %+v; want no bodies, committed, finished at 100", r)
			}
			if r3, _ := tx.RunGet("r3"); string(r3.Trace) != string(body) {
				return fmt.Errorf("run r3, not pruned, lost its trace: %s", r3.Trace)
			}
			e, err := tx.EventGet("w", "t", "m1")
			if err != nil {
				return err
			}
			if string(e.Payload) != "null" || e.Status != kt.EventConsumed {
				return fmt.Errorf("pruned event: payload %s status %s; want null, consumed (its messageId kept)", e.Payload, e.Status)
			}
			m, err := tx.MutationByIdentity("id1")
			if err != nil {
				return fmt.Errorf("a pruned ledger row is not found by its identity: %w", err)
			}
			if m.Status != kt.MutationApplied || string(m.Result) != string(body) || string(m.Params) != "{}" || m.PayloadHash != "ph" || m.IdempotencyKey != "ik" {
				return fmt.Errorf("pruned ledger row %+v; want applied, params {}, its result and hashes kept", m)
			}
			// Pruned rows are not listed again; the rest still are.
			rows, err := tx.PruneList(store.PruneRuns, 1000, store.PruneCursor{}, 10)
			if err != nil {
				return err
			}
			var left []string
			for _, r := range rows {
				left = append(left, r.ID)
			}
			if fmt.Sprint(left) != "[r3 r4 r5]" {
				return fmt.Errorf("after the prune PruneList lists %v, want [r3 r4 r5]", left)
			}
			for _, k := range []store.PruneKind{store.PruneEvents, store.PruneMutations} {
				rows, err := tx.PruneList(k, 1000, store.PruneCursor{}, 10)
				if err != nil {
					return err
				}
				if len(rows) != 4 || rows[0].Status == "" {
					return fmt.Errorf("%s: %d rows listed after one was pruned, want 4 with their status", k, len(rows))
				}
			}
			newest, err := tx.RunIDsNewest("w", 1, kt.StatusCommitted, 2)
			if err != nil {
				return err
			}
			if fmt.Sprint(newest) != "[r5 r4]" {
				return fmt.Errorf("RunIDsNewest: %v, want [r5 r4]", newest)
			}
			return nil
		}))
	})
	run("prune of deliveries drops a settled request only", func(t *testing.T, s store.Store) {
		var held, settled kt.Delivery
		must(t, s.Update(ctx, func(tx store.Tx) error {
			held = kt.Delivery{Workflow: "w", Webhook: "gh", DeliveryID: "d1", Status: kt.DeliveryHeld, HeldFor: "grant", Request: json.RawMessage(`{"body":"a"}`), ReceivedAt: 10}
			settled = kt.Delivery{Workflow: "w", Webhook: "gh", DeliveryID: "d2", Status: kt.DeliveryRefused, Request: json.RawMessage(`{"body":"b"}`), ReceivedAt: 20}
			if err := tx.DeliveryAdd(&held); err != nil {
				return err
			}
			return tx.DeliveryAdd(&settled)
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			rows, err := tx.PruneList(store.PruneDeliveries, 100, store.PruneCursor{}, 10)
			if err != nil {
				return err
			}
			if len(rows) != 2 || rows[0].Status != string(kt.DeliveryHeld) || rows[1].Bytes != int64(len(`{"body":"b"}`)) {
				return fmt.Errorf("deliveries listed %+v", rows)
			}
			_, _, err = tx.PruneBodies(store.PruneDeliveries, []string{strconv.FormatInt(settled.ID, 10)}, 999)
			return err
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			d, err := tx.DeliveryHeldGet(held.ID)
			if err != nil || string(d.Request) != `{"body":"a"}` {
				return fmt.Errorf("the held delivery's request: %s (%v), want it kept", d.Request, err)
			}
			rows, err := tx.PruneList(store.PruneDeliveries, 100, store.PruneCursor{}, 10)
			if err != nil || len(rows) != 1 {
				return fmt.Errorf("after the prune %d deliveries with a request (%v), want 1 (the held one)", len(rows), err)
			}
			return nil
		}))
	})
}
