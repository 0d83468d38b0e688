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

// exerciseMutations covers the mutation ledger.
func exerciseMutations(run runCase) {
	ctx := context.Background()
	run("a mutation keeps when it was sent and first not found", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			m := kt.Mutation{ID: "ms", Workflow: "w", RunID: "r", Tool: "http", Method: "request", Params: json.RawMessage(`{}`),
				IdentityKey: "ks", IdempotencyKey: "keep-ks", Status: kt.MutationInFlight, SentAt: 10}
			if err := tx.MutationPut(m); err != nil {
				return err
			}
			m.Status, m.NotFoundAt, m.IdentityKey = kt.MutationNeedsReconcile, 20, "ks2"
			if err := tx.MutationPut(m); err != nil {
				return err
			}
			got, err := tx.MutationGet("ms")
			if err != nil || got.SentAt != 10 || got.NotFoundAt != 20 || got.IdentityKey != "ks2" {
				return fmt.Errorf("after update: %+v %v", got, err)
			}
			return nil
		}))
	})
	run("mutation ledger: identity is unique", func(t *testing.T, s store.Store) {
		m := kt.Mutation{ID: "m1", Workflow: "w", RunID: "r1", Tool: "http", Method: "request", Params: json.RawMessage(`{}`),
			IdentityKey: "k1", PayloadHash: "p", IdempotencyKey: "keep-k1", Status: kt.MutationInFlight, ItemKeys: []string{"i1"}}
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.MutationPut(m) }))
		dup := m
		dup.ID = "m2"
		if err := s.Update(ctx, func(tx store.Tx) error { return tx.MutationPut(dup) }); err == nil {
			t.Fatal("two ledger rows with one identity key were accepted")
		}
		must(t, s.Update(ctx, func(tx store.Tx) error {
			got, err := tx.MutationByIdentity("k1")
			if err != nil || got.ID != "m1" || len(got.ItemKeys) != 1 {
				return fmt.Errorf("by identity %+v %v", got, err)
			}
			got.Status, got.Result = kt.MutationApplied, json.RawMessage(`{"ok":true}`)
			if err := tx.MutationPut(got); err != nil {
				return err
			}
			byRun, err := tx.MutationByRun("r1")
			if err != nil || byRun.Status != kt.MutationApplied || string(byRun.Result) != `{"ok":true}` {
				return fmt.Errorf("by run %+v %v", byRun, err)
			}
			return nil
		}))
	})
	run("a new ledger row is inserted only under a new identity", func(t *testing.T, s store.Store) {
		m := kt.Mutation{ID: "n1", Workflow: "w", RunID: "r1", Tool: "http", Method: "request", Params: json.RawMessage(`{"a":1}`),
			IdentityKey: "kn", PayloadHash: "p", IdempotencyKey: "keep-kn", Status: kt.MutationInFlight, ItemKeys: []string{"i1"}, SentAt: 3}
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.MutationInsert(m) }))
		dup := m
		dup.ID, dup.RunID, dup.Params = "n2", "r2", json.RawMessage(`{"a":2}`)
		refused(t, s, "a second row under one identity", store.ErrIdentityTaken, func(tx store.Tx) error { return tx.MutationInsert(dup) })
		must(t, s.View(ctx, func(tx store.Tx) error {
			got, err := tx.MutationByIdentity("kn")
			if err != nil || got.ID != "n1" || got.RunID != "r1" || string(got.Params) != `{"a":1}` || got.SentAt != 3 || len(got.ItemKeys) != 1 {
				return fmt.Errorf("the first row: %+v %v", got, err)
			}
			if _, err := tx.MutationGet("n2"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("the refused row was stored: %v", err)
			}
			return nil
		}))
	})
	run("a ledger row is overwritten only from the status its writer holds", func(t *testing.T, s store.Store) {
		m := kt.Mutation{ID: "f1", Workflow: "w", RunID: "r1", Tool: "http", Method: "request", Params: json.RawMessage(`{"a":1}`),
			IdentityKey: "kf", PayloadHash: "p", IdempotencyKey: "keep-kf", Status: kt.MutationInFlight, ItemKeys: []string{"i1"}, SentAt: 3, CreatedAt: 2}
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.MutationInsert(m) }))
		refused := func(what string, m kt.Mutation, from kt.MutationStatus) {
			t.Helper()
			refused(t, s, what, store.ErrStale, func(tx store.Tx) error { return tx.MutationPutFrom(m, from) })
		}
		applied := m
		applied.Status, applied.Result, applied.UpdatedAt, applied.ResolvedBy = kt.MutationApplied, json.RawMessage(`{"id":7}`), 9, "reconcile"
		refused("from a status the row does not have", applied, kt.MutationNeedsReconcile)
		missing := applied
		missing.ID = "nope"
		refused("a missing row", missing, kt.MutationInFlight)
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.MutationPutFrom(applied, kt.MutationInFlight) }))
		refused("from the status it had before", applied, kt.MutationInFlight)
		must(t, s.View(ctx, func(tx store.Tx) error {
			got, err := tx.MutationGet("f1")
			if err != nil || got.Status != kt.MutationApplied || string(got.Result) != `{"id":7}` || got.UpdatedAt != 9 || got.ResolvedBy != "reconcile" ||
				got.SentAt != 3 || got.CreatedAt != 2 || got.IdentityKey != "kf" || len(got.ItemKeys) != 1 {
				return fmt.Errorf("after the write: %+v %v", got, err)
			}
			return nil
		}))
	})
	run("mutations listed by workflow and by status, and the counts", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for i, st := range []kt.MutationStatus{kt.MutationApplied, kt.MutationInFlight, kt.MutationInFlight} {
				wf := "w"
				if i == 2 {
					wf = "other"
				}
				m := kt.Mutation{ID: fmt.Sprintf("m%d", i), Workflow: wf, RunID: fmt.Sprintf("r%d", i), Tool: "http", Method: "request", Params: json.RawMessage(`{}`),
					IdentityKey: fmt.Sprintf("k%d", i), IdempotencyKey: fmt.Sprintf("keep-k%d", i), Status: st, ReconcileAttempts: i, CreatedAt: int64(i + 1)}
				if err := tx.MutationPut(m); err != nil {
					return err
				}
			}
			for i, st := range []kt.Status{kt.StatusCommitted, kt.StatusCommitted, kt.StatusReconciliation} {
				if err := tx.RunPut(kt.Run{ID: fmt.Sprintf("r%d", i), Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Phase: kt.PhaseMutating, Status: st}); err != nil {
					return err
				}
			}
			_, err := tx.EventPublish(&kt.Event{Workflow: "w", Topic: "t", MessageID: "m", Payload: json.RawMessage(`1`)})
			return err
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			ms, err := tx.MutationList("w")
			if err != nil || len(ms) != 2 || ms[0].ID != "m0" || ms[1].ID != "m1" {
				return fmt.Errorf("mutations of w %+v %v", ms, err)
			}
			inFlight, err := tx.MutationsWithStatus(kt.MutationInFlight)
			if err != nil || len(inFlight) != 2 || inFlight[0].ID != "m1" || inFlight[1].ID != "m2" {
				return fmt.Errorf("in_flight mutations %+v %v", inFlight, err)
			}
			c, err := tx.Counts()
			want := store.Counts{Runs: []store.Tally{{Workflow: "w", Status: string(kt.StatusCommitted), N: 2}, {Workflow: "w", Status: string(kt.StatusReconciliation), N: 1}},
				Mutations:     []store.Tally{{Workflow: "other", Status: string(kt.MutationInFlight), N: 1}, {Workflow: "w", Status: string(kt.MutationApplied), N: 1}, {Workflow: "w", Status: string(kt.MutationInFlight), N: 1}},
				PendingEvents: 1}
			if err != nil || !reflect.DeepEqual(c, want) {
				return fmt.Errorf("counts %+v %v", c, err)
			}
			return nil
		}))
	})
}
