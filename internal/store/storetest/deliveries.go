package storetest

import (
	"context"
	"errors"
	"fmt"
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
			if got != first {
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
			if err != nil || len(all) != 4 || all[3] != first {
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
}
