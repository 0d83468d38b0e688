package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exerciseDeliveries covers webhook deliveries (issue 26): recorded,
// found by id when accepted, one accepted per id, listed newest first,
// counted, and pruned without touching accepted ones.
func exerciseDeliveries(run runCase) {
	ctx := context.Background()
	add := func(tx store.Tx, wf, hook, id string, st kt.DeliveryStatus, at int64) (kt.Delivery, error) {
		d := kt.Delivery{Workflow: wf, Webhook: hook, DeliveryID: id, Status: st, Reason: "why " + id, Inputs: 1, Events: 2, ReceivedAt: at}
		return d, tx.DeliveryAdd(&d)
	}
	run("deliveries round-trip, one accepted per id", func(t *testing.T, s store.Store) {
		var first kt.Delivery
		must(t, s.Update(ctx, func(tx store.Tx) error {
			var err error
			if first, err = add(tx, "w", "gh", "d1", kt.DeliveryAccepted, 10); err != nil {
				return err
			}
			for i, st := range []kt.DeliveryStatus{kt.DeliveryDuplicate, kt.DeliveryRefused, kt.DeliveryFailed} {
				if _, err := add(tx, "w", "gh", "d1", st, int64(11+i)); err != nil {
					return err
				}
			}
			_, err = add(tx, "other", "gh", "d1", kt.DeliveryAccepted, 20)
			return err
		}))
		if first.ID == 0 {
			t.Fatal("DeliveryAdd did not fill the id")
		}
		// A second accepted delivery of the same id is refused, and the
		// transaction that tried writes nothing.
		err := s.Update(ctx, func(tx store.Tx) error {
			_, err := add(tx, "w", "gh", "d1", kt.DeliveryAccepted, 30)
			return err
		})
		if err == nil {
			t.Fatal("a second accepted delivery of d1 was stored")
		}
		must(t, s.View(ctx, func(tx store.Tx) error {
			got, err := tx.DeliveryAccepted("w", "gh", "d1")
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(got, first) {
				return fmt.Errorf("accepted delivery %+v, want %+v", got, first)
			}
			if _, err := tx.DeliveryAccepted("w", "gh", "d2"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("an unknown delivery: %v, want not found", err)
			}
			if _, err := tx.DeliveryAccepted("w", "gitlab", "d1"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("another webhook's delivery: %v, want not found", err)
			}
			list, err := tx.DeliveryList("w", 2)
			if err != nil {
				return err
			}
			if len(list) != 2 || list[0].Status != kt.DeliveryFailed || list[1].Status != kt.DeliveryRefused || list[0].Reason != "why d1" || list[0].Events != 2 {
				return fmt.Errorf("newest two deliveries: %+v", list)
			}
			all, err := tx.DeliveryList("w", 0)
			if err != nil || len(all) != 4 || !reflect.DeepEqual(all[3], first) {
				return fmt.Errorf("all deliveries of w: %+v, %v", all, err)
			}
			counts, err := tx.DeliveryCounts("w")
			if err != nil {
				return err
			}
			if fmt.Sprint(counts) != "[{gh accepted 1} {gh duplicate 1} {gh failed 1} {gh refused 1}]" {
				return fmt.Errorf("counts %v", counts)
			}
			return nil
		}))
	})
	run("deliveries pruned: the newest of a status kept, accepted ones never", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if _, err := add(tx, "w", "gh", "f", kt.DeliveryFailed, 0); err != nil {
				return err
			}
			for i := 0; i < 6; i++ {
				st := kt.DeliveryRefused
				if i%3 == 0 {
					st = kt.DeliveryAccepted
				}
				if _, err := add(tx, "w", "gh", fmt.Sprint("d", i), st, int64(i)); err != nil {
					return err
				}
			}
			if _, err := add(tx, "w", "other", "x", kt.DeliveryRefused, 1); err != nil {
				return err
			}
			if err := tx.DeliveryPrune("w", "gh", kt.DeliveryAccepted, 0); err == nil {
				return fmt.Errorf("accepted deliveries pruned without an error")
			}
			return tx.DeliveryPrune("w", "gh", kt.DeliveryRefused, 2)
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			all, err := tx.DeliveryList("w", 0)
			if err != nil {
				return err
			}
			var ids []string
			for _, d := range all {
				ids = append(ids, d.Webhook+":"+d.DeliveryID)
			}
			// Refused d1, d2, d4, d5: d4 and d5 stay; accepted d0, d3 stay;
			// the failed f, older than every refused one, stays.
			if fmt.Sprint(ids) != "[other:x gh:d5 gh:d4 gh:d3 gh:d0 gh:f]" {
				return fmt.Errorf("after pruning to 2: %v", ids)
			}
			return nil
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.DeliveryPrune("w", "none", kt.DeliveryRefused, 2) }))
	})
	run("held deliveries: kept with their requests, oldest first, counted, settled once", func(t *testing.T, s store.Store) {
		req := json.RawMessage(`{"method":"POST","body":"eyJhIjoxfQ=="}`)
		var held []kt.Delivery
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for i, hook := range []string{"gh", "gh", "stripe"} {
				d := kt.Delivery{Workflow: "w", Webhook: hook, DeliveryID: fmt.Sprint("h", i), Status: kt.DeliveryHeld, Reason: "waits", HeldFor: kt.HeldForSecret + ":S", Request: req, ReceivedAt: int64(i)}
				if err := tx.DeliveryAdd(&d); err != nil {
					return err
				}
				held = append(held, d)
			}
			if _, err := add(tx, "w", "gh", "a", kt.DeliveryAccepted, 5); err != nil {
				return err
			}
			d := kt.Delivery{Workflow: "other", Webhook: "gh", DeliveryID: "o", Status: kt.DeliveryHeld, HeldFor: kt.HeldForDeploy + ":gh", Request: req}
			return tx.DeliveryAdd(&d)
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			// Listed without their requests; each read with it by its id.
			all, err := tx.DeliveryHeld("w", "", 0)
			if err != nil || len(all) != 3 {
				return fmt.Errorf("held deliveries of w: %+v %v, want %+v", all, err, held)
			}
			for i := range all {
				want := held[i]
				want.Request = nil
				if !reflect.DeepEqual(all[i], want) {
					return fmt.Errorf("held delivery %d listed as %+v, want %+v", i, all[i], want)
				}
				got, err := tx.DeliveryHeldGet(all[i].ID)
				if err != nil || !reflect.DeepEqual(got, held[i]) {
					return fmt.Errorf("held delivery %d read as %+v %v, want %+v", all[i].ID, got, err, held[i])
				}
			}
			gh, err := tx.DeliveryHeld("w", "gh", 1)
			if err != nil || len(gh) != 1 || gh[0].DeliveryID != "h0" || gh[0].Request != nil {
				return fmt.Errorf("the oldest held delivery of gh: %+v %v", gh, err)
			}
			if n, b, err := tx.DeliveryHeldCount("w", "gh"); err != nil || n != 2 || b != int64(2*len(req)) {
				return fmt.Errorf("held of gh: %d (%d bytes) %v, want 2 (%d bytes)", n, b, err, 2*len(req))
			}
			if n, b, err := tx.DeliveryHeldCount("w", ""); err != nil || n != 3 || b != int64(3*len(req)) {
				return fmt.Errorf("held of w: %d (%d bytes) %v, want 3", n, b, err)
			}
			if _, err := tx.DeliveryHeldGet(held[2].ID + 1000); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("an unknown held delivery: %v, want not found", err)
			}
			wfs, err := tx.DeliveryHeldWorkflows()
			if err != nil || fmt.Sprint(wfs) != "[other w]" {
				return fmt.Errorf("workflows holding deliveries: %v %v", wfs, err)
			}
			return nil
		}))
		// Settled: accepted, with what its handler did; held again, with
		// what it waits for now.
		taken := held[0]
		taken.Status, taken.Reason, taken.Inputs, taken.Events = kt.DeliveryAccepted, "1 input registered", 1, 1
		again := held[1]
		again.HeldFor, again.Reason = kt.HeldForGrant+":source:http", "waits for a grant"
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if err := tx.DeliverySettle(&taken); err != nil {
				return err
			}
			return tx.DeliverySettle(&again)
		}))
		// A second taker of the same delivery fails, and its transaction
		// writes nothing.
		late := held[0]
		late.Status = kt.DeliveryRefused
		refused(t, s, "a second settle of a held delivery", store.ErrStale, func(tx store.Tx) error {
			if _, err := add(tx, "w", "gh", "late", kt.DeliveryRefused, 9); err != nil {
				return err
			}
			return tx.DeliverySettle(&late)
		})
		must(t, s.View(ctx, func(tx store.Tx) error {
			got, err := tx.DeliveryAccepted("w", "gh", "h0")
			if err != nil || got.Inputs != 1 || got.HeldFor != "" || got.Request != nil || got.ReceivedAt != 0 || got.ID != held[0].ID {
				return fmt.Errorf("the taken delivery: %+v %v", got, err)
			}
			all, err := tx.DeliveryHeld("w", "", 0)
			if err != nil || len(all) != 2 || all[0].HeldFor != again.HeldFor || all[0].Reason != again.Reason {
				return fmt.Errorf("held after settling: %+v %v", all, err)
			}
			if got, err := tx.DeliveryHeldGet(all[0].ID); err != nil || string(got.Request) != string(req) {
				return fmt.Errorf("held again, its request: %+v %v", got, err)
			}
			if _, err := tx.DeliveryHeldGet(held[0].ID); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("a taken delivery read as held: %v", err)
			}
			list, err := tx.DeliveryList("w", 0)
			if err != nil || len(list) != 4 {
				return fmt.Errorf("deliveries of w: %+v %v (the late taker's record stored?)", list, err)
			}
			return nil
		}))
		// Held again with its request given (what keep learned of it since):
		// that request is kept in place of the one received.
		learned := json.RawMessage(`{"method":"POST","body":"eyJhIjoxfQ==","Verified":true}`)
		again2 := held[2]
		again2.HeldFor, again2.Reason, again2.Request = kt.HeldForGrant+":source:http", "verified, waits for a grant", learned
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.DeliverySettle(&again2) }))
		must(t, s.View(ctx, func(tx store.Tx) error {
			if got, err := tx.DeliveryHeldGet(held[2].ID); err != nil || string(got.Request) != string(learned) || got.HeldFor != again2.HeldFor {
				return fmt.Errorf("held again with a request given: %+v %v", got, err)
			}
			return nil
		}))
	})
	run("intake: today's deliveries by status, the held ones, each webhook's last, the API's posts", func(t *testing.T, s store.Store) {
		const day = int64(1000)
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for _, d := range []struct {
				wf, hook, id string
				st           kt.DeliveryStatus
				at           int64
			}{
				{"w", "gh", "old", kt.DeliveryAccepted, day - 1}, {"w", "gh", "old-held", kt.DeliveryHeld, day - 2},
				{"w", "gh", "a", kt.DeliveryAccepted, day}, {"w", "gh", "b", kt.DeliveryAccepted, day + 5}, {"w", "gh", "b", kt.DeliveryDuplicate, day + 6},
				{"w", "gh", "c", kt.DeliveryRefused, day + 7}, {"w", "gh", "d", kt.DeliveryHeld, day + 8},
				{"w", "stripe", "e", kt.DeliveryFailed, day + 3}, {"w", "quiet", "f", kt.DeliveryAccepted, day - 100},
				{"other", "gh", "x", kt.DeliveryAccepted, day + 9},
			} {
				if _, err := add(tx, d.wf, d.hook, d.id, d.st, d.at); err != nil {
					return err
				}
			}
			for i, in := range []kt.Input{
				{Workflow: "w", Source: "api", Type: "order", CreatedAt: day + 1}, {Workflow: "w", Source: "api", Type: "order", CreatedAt: day + 2},
				{Workflow: "w", Source: "api", Type: "order", CreatedAt: day - 1}, {Workflow: "w", Source: "api", Type: "refund", CreatedAt: day + 3},
				{Workflow: "w", Source: "gmail", Type: "order", CreatedAt: day + 4}, {Workflow: "other", Source: "api", Type: "order", CreatedAt: day + 5},
			} {
				in.ID, in.Kind, in.Key, in.Title, in.UpdatedAt = fmt.Sprint("in", i), kt.KindInput, fmt.Sprint(in.Source, ":", in.Type, ":", i), "t", in.CreatedAt
				if err := tx.InputPut(in); err != nil {
					return err
				}
			}
			return nil
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			got, err := tx.Intake("w", []string{"gh", "stripe", "quiet", "never"}, "api", day)
			if err != nil {
				return err
			}
			want := store.IntakeTally{
				Deliveries: []store.DeliveryTally{{Webhook: "gh", Status: kt.DeliveryAccepted, N: 2}, {Webhook: "gh", Status: kt.DeliveryDuplicate, N: 1}, {Webhook: "gh", Status: kt.DeliveryHeld, N: 1}, {Webhook: "gh", Status: kt.DeliveryRefused, N: 1}, {Webhook: "stripe", Status: kt.DeliveryFailed, N: 1}},
				Held:       []store.DeliveryTally{{Webhook: "gh", Status: kt.DeliveryHeld, N: 2}},
				Last:       map[string]int64{"gh": day + 8, "stripe": day + 3, "quiet": day - 100},
				Posts:      []store.PostTally{{Topic: "order", N: 2}, {Topic: "refund", N: 1}},
			}
			if !reflect.DeepEqual(got, want) {
				return fmt.Errorf("intake\n got %+v\nwant %+v", got, want)
			}
			return nil
		}))
	})
}
