// Package storetest is the conformance suite every store backend passes:
// Exercise(t, open) runs the same checks against SQLite today and against
// PostgreSQL when that backend lands.
//
// It may import keeptype and store.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// Exercise runs the suite. open returns a fresh, empty store.
func Exercise(t *testing.T, open func(t *testing.T) store.Store) {
	cov := &coverage{called: map[string]bool{}}
	cov.check(t)
	run := func(name string, fn func(t *testing.T, s store.Store)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, recordingStore{open(t), cov})
		})
	}
	exerciseRows(run)
	exerciseLookups(run)
	exerciseDue(run)
	exerciseTransactions(run)
	exerciseDeliveries(run)
}

// runCase runs one case of the suite on a fresh store. The exercise*
// functions below are lists of independent cases, each a run(name, fn):
// they are longer than 80 lines and read better whole, as tables of cases.
type runCase func(name string, fn func(t *testing.T, s store.Store))

// exerciseRows covers the ledgers' rows: workflows, versions, events, decisions, mutations.
func exerciseRows(run runCase) {
	ctx := context.Background()
	run("workflow and versions round-trip", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			v := kt.Version{Workflow: "w", Major: 1, Script: "s1", CreatedAt: 1}
			if err := tx.VersionInsert(&v); err != nil {
				return err
			}
			v2 := kt.Version{Workflow: "w", Major: 1, Minor: 1, Script: "s2", CreatedAt: 2}
			if err := tx.VersionInsert(&v2); err != nil {
				return err
			}
			if v.ID != 1 || v2.ID != 2 {
				return fmt.Errorf("version ids %d %d", v.ID, v2.ID)
			}
			return tx.WorkflowPut(kt.Workflow{Name: "w", ActiveVersion: 2, FilesRoot: "/srv/orders", Policy: `{"TransientRetries":0}`, CreatedAt: 1, UpdatedAt: 2})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			w, err := tx.WorkflowGet("w")
			if err != nil || w.ActiveVersion != 2 || w.FilesRoot != "/srv/orders" || w.Policy != `{"TransientRetries":0}` {
				return fmt.Errorf("workflow %+v %v", w, err)
			}
			v, err := tx.VersionGet("w", 2)
			if err != nil || v.Script != "s2" || v.Label() != "1.1" {
				return fmt.Errorf("version %+v %v", v, err)
			}
			if _, err := tx.WorkflowGet("nope"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("missing workflow: %v", err)
			}
			return nil
		}))
	})

	run("a failed update leaves nothing", func(t *testing.T, s store.Store) {
		boom := errors.New("boom")
		err := s.Update(ctx, func(tx store.Tx) error {
			if err := tx.WorkflowPut(kt.Workflow{Name: "w"}); err != nil {
				return err
			}
			ev := kt.Event{Workflow: "w", Topic: "t", MessageID: "m", Payload: json.RawMessage(`{}`)}
			if _, err := tx.EventPublish(&ev); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("update error %v", err)
		}
		must(t, s.View(ctx, func(tx store.Tx) error {
			if _, err := tx.WorkflowGet("w"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("rolled back workflow is visible: %v", err)
			}
			if _, err := tx.EventGet("w", "t", "m"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("rolled back event is visible: %v", err)
			}
			return nil
		}))
	})

	run("publish is last-write-wins and keeps status", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			ev := kt.Event{Workflow: "w", Topic: "t", MessageID: "m", Payload: json.RawMessage(`{"v":1}`), CausedBy: []string{"i1"}}
			created, err := tx.EventPublish(&ev)
			if err != nil || !created || ev.Status != kt.EventPending || ev.Attempt != 1 {
				return fmt.Errorf("first publish: %v %v %+v", created, err, ev)
			}
			ev.Status, ev.ReservedBy = kt.EventConsumed, "r1"
			if err := tx.EventUpdate(ev); err != nil {
				return err
			}
			again := kt.Event{Workflow: "w", Topic: "t", MessageID: "m", Payload: json.RawMessage(`{"v":2}`), CausedBy: []string{"i1"}, Attempt: 1}
			created, err = tx.EventPublish(&again)
			if err != nil || created || again.ID != ev.ID {
				return fmt.Errorf("republish: %v %v", created, err)
			}
			got, err := tx.EventGet("w", "t", "m")
			if err != nil || got.Status != kt.EventConsumed || string(got.Payload) != `{"v":2}` {
				return fmt.Errorf("after LWW: %+v %v", got, err)
			}
			// A newer attempt re-opens it.
			newer := kt.Event{Workflow: "w", Topic: "t", MessageID: "m", Payload: json.RawMessage(`{"v":3}`), CausedBy: []string{"i1"}, Attempt: 2}
			if _, err := tx.EventPublish(&newer); err != nil {
				return err
			}
			got, _ = tx.EventGet("w", "t", "m")
			if got.Status != kt.EventPending || got.ReservedBy != "" || got.Attempt != 2 {
				return fmt.Errorf("newer attempt did not re-open: %+v", got)
			}
			byInput, err := tx.EventsByInput("i1")
			if err != nil || len(byInput) != 1 {
				return fmt.Errorf("events by input: %d %v", len(byInput), err)
			}
			return nil
		}))
	})

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

	run("a republish keeps every cause the event had", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			ev := kt.Event{Workflow: "w", Topic: "t", MessageID: "m", Payload: json.RawMessage(`1`), CausedBy: []string{"i1"}}
			if _, err := tx.EventPublish(&ev); err != nil {
				return err
			}
			// From a run that reserved nothing: no causes of its own.
			if _, err := tx.EventPublish(&kt.Event{Workflow: "w", Topic: "t", MessageID: "m", Payload: json.RawMessage(`2`)}); err != nil {
				return err
			}
			got, err := tx.EventGet("w", "t", "m")
			if err != nil || strings.Join(got.CausedBy, ",") != "i1" {
				return fmt.Errorf("after a republish without causes: %v %v", got.CausedBy, err)
			}
			if _, err := tx.EventPublish(&kt.Event{Workflow: "w", Topic: "t", MessageID: "m", Payload: json.RawMessage(`3`), CausedBy: []string{"i0"}}); err != nil {
				return err
			}
			got, _ = tx.EventGet("w", "t", "m")
			if strings.Join(got.CausedBy, ",") != "i0,i1" {
				return fmt.Errorf("after a republish with another cause: %v", got.CausedBy)
			}
			for _, in := range []string{"i0", "i1"} {
				if evs, err := tx.EventsByInput(in); err != nil || len(evs) != 1 {
					return fmt.Errorf("events caused by %s: %d %v", in, len(evs), err)
				}
			}
			return nil
		}))
	})
}

// exerciseLookups covers the lookups the engine and the reports make.
func exerciseLookups(run runCase) {
	ctx := context.Background()
	run("pending excludes reserved and consumed, oldest first", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for i := 0; i < 5; i++ {
				ev := kt.Event{Workflow: "w", Topic: "t", MessageID: fmt.Sprint(i), Payload: json.RawMessage(`1`), CreatedAt: int64(100 + i)}
				if _, err := tx.EventPublish(&ev); err != nil {
					return err
				}
				switch i {
				case 0:
					ev.Status = kt.EventConsumed
				case 1:
					ev.ReservedBy = "r"
				}
				if err := tx.EventUpdate(ev); err != nil {
					return err
				}
			}
			evs, err := tx.EventsPending("w", "t", 2)
			if err != nil || len(evs) != 2 || evs[0].MessageID != "2" || evs[1].MessageID != "3" {
				return fmt.Errorf("pending %+v %v", evs, err)
			}
			// Bounded by bytes: stops before passing them, the first always read.
			evs, more, err := tx.EventsPendingWithin("w", "t", 10, len(evs[0].Payload)+len(evs[0].MessageID))
			if err != nil || !more || len(evs) != 1 || evs[0].MessageID != "2" {
				return fmt.Errorf("pending within one event's bytes: %+v %v %v", evs, more, err)
			}
			if evs, more, err = tx.EventsPendingWithin("w", "t", 10, 0); err != nil || !more || len(evs) != 1 {
				return fmt.Errorf("pending within 0 bytes (the first is always read): %+v %v %v", evs, more, err)
			}
			if evs, more, err = tx.EventsPendingWithin("w", "t", 2, 1<<20); err != nil || more || len(evs) != 2 {
				return fmt.Errorf("pending within room to spare: %+v %v %v", evs, more, err)
			}
			at, ok, err := tx.OldestPending("w", []string{"t", "other"})
			if err != nil || !ok || at != 102 {
				return fmt.Errorf("oldest %d %v %v", at, ok, err)
			}
			// Over several topics, the oldest of any; none when all are empty.
			older := kt.Event{Workflow: "w", Topic: "u", MessageID: "x", Payload: json.RawMessage(`1`), CreatedAt: 50}
			if _, err := tx.EventPublish(&older); err != nil {
				return err
			}
			if at, ok, err := tx.OldestPending("w", []string{"t", "other", "u"}); err != nil || !ok || at != 50 {
				return fmt.Errorf("oldest of three topics %d %v %v, want 50", at, ok, err)
			}
			if _, ok, err := tx.OldestPending("w", []string{"other", "none"}); err != nil || ok {
				return fmt.Errorf("oldest of empty topics: ok=%v %v", ok, err)
			}
			res, err := tx.EventsReservedBy("r")
			if err != nil || len(res) != 1 || res[0].MessageID != "1" {
				return fmt.Errorf("reserved %+v %v", res, err)
			}
			n, err := tx.CountPending("w")
			if err != nil || n != 5 { // 2, 3, 4 and 1 (reserved, still pending) of t, x of u
				return fmt.Errorf("count pending %d %v", n, err)
			}
			return nil
		}))
	})

	run("events listed by topic, state and page; counted per topic", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for i, st := range []kt.EventStatus{kt.EventConsumed, kt.EventPending, kt.EventPending, kt.EventSkipped, kt.EventPending} {
				topic := "t"
				if i == 4 {
					topic = "u"
				}
				ev := kt.Event{Workflow: "w", Topic: topic, MessageID: fmt.Sprint(i), Payload: json.RawMessage(`1`), CausedBy: []string{"in"}, CreatedAt: int64(i)}
				if _, err := tx.EventPublish(&ev); err != nil {
					return err
				}
				ev.Status = st
				if i == 1 {
					ev.ReservedBy = "r"
				}
				if err := tx.EventUpdate(ev); err != nil {
					return err
				}
			}
			other := kt.Event{Workflow: "other", Topic: "t", MessageID: "x", Payload: json.RawMessage(`1`)}
			_, err := tx.EventPublish(&other)
			return err
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			ids := func(f store.EventFilter) string {
				evs, err := tx.EventList("w", f)
				if err != nil {
					return err.Error()
				}
				var out []string
				for _, e := range evs {
					out = append(out, e.MessageID)
				}
				return strings.Join(out, ",")
			}
			all, _ := tx.EventList("w", store.EventFilter{})
			for _, c := range []struct {
				f    store.EventFilter
				want string
			}{
				{store.EventFilter{}, "0,1,2,3,4"},
				{store.EventFilter{Topic: "t"}, "0,1,2,3"},
				{store.EventFilter{Status: kt.EventPending}, "1,2,4"},
				{store.EventFilter{Status: kt.EventPending, Held: store.HeldReserved}, "1"},
				{store.EventFilter{Topic: "t", Status: kt.EventPending, Held: store.HeldFree}, "2"},
				{store.EventFilter{Limit: 2}, "0,1"},
				{store.EventFilter{AfterID: all[1].ID, Limit: 2}, "2,3"},
			} {
				if got := ids(c.f); got != c.want {
					return fmt.Errorf("events %+v: %s, want %s", c.f, got, c.want)
				}
			}
			if len(all) == 0 || len(all[0].CausedBy) != 1 || string(all[0].Payload) != "1" {
				return fmt.Errorf("a listed event lacks its payload or causes: %+v", all)
			}
			counts, err := tx.TopicCounts("w")
			want := []store.TopicCount{{Topic: "t", Pending: 1, Reserved: 1, Consumed: 1, Skipped: 1}, {Topic: "u", Pending: 1}}
			if err != nil || !reflect.DeepEqual(counts, want) {
				return fmt.Errorf("topic counts %+v %v, want %+v", counts, err, want)
			}
			return nil
		}))
	})

	run("runs: open run and status lookups", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if err := tx.RunPut(kt.Run{ID: "r1", Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Phase: kt.PhaseCommitted, Status: kt.StatusCommitted, CreatedAt: 1}); err != nil {
				return err
			}
			return tx.RunPut(kt.Run{ID: "r2", Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Phase: kt.PhaseMutating, Status: kt.StatusReconciliation,
				PrepareResult: json.RawMessage(`{"reservations":[]}`), CreatedAt: 2})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			r, err := tx.RunOpen("w")
			if err != nil || r.ID != "r2" || string(r.PrepareResult) != `{"reservations":[]}` {
				return fmt.Errorf("open run %+v %v", r, err)
			}
			rs, err := tx.RunList("w", 0)
			if err != nil || len(rs) != 2 || rs[0].ID != "r2" {
				return fmt.Errorf("list %v", err)
			}
			st, err := tx.RunsWithStatus(kt.StatusReconciliation)
			if err != nil || len(st) != 1 {
				return fmt.Errorf("by status %d %v", len(st), err)
			}
			return nil
		}))
		// A conditional write from a revision that is no longer the
		// stored one (a decision came in between) writes nothing.
		must(t, s.Update(ctx, func(tx store.Tx) error {
			r, _ := tx.RunGet("r2")
			stale := r
			r.Action = "skip"
			if err := tx.RunSetIfRev(r); err != nil {
				return fmt.Errorf("a write from the stored revision: %v", err)
			}
			if got, _ := tx.RunGet("r2"); got.Rev != r.Rev+1 || got.Action != "skip" {
				return fmt.Errorf("after a conditional write: rev %d (want %d), action %q", got.Rev, r.Rev+1, got.Action)
			}
			stale.Status, stale.ErrorMessage = kt.StatusCommitted, "stale"
			if err := tx.RunSetIfRev(stale); !errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("a write from an older revision: %v, want ErrConflict", err)
			}
			if err := tx.RunSetIfRev(kt.Run{ID: "nope", Status: kt.StatusCommitted}); !errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("a conditional write of a missing run: %v, want ErrConflict", err)
			}
			if got, _ := tx.RunGet("r2"); got.Status != kt.StatusReconciliation || got.ErrorMessage == "stale" || got.Action != "skip" {
				return fmt.Errorf("the refused write changed the run: %+v", got)
			}
			r, _ = tx.RunGet("r2")
			r.Status, r.ErrorMessage, r.Action = kt.StatusRetried, "", ""
			return tx.RunSetIfRev(r)
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			if _, err := tx.RunOpen("w"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("a retried run still blocks: %v", err)
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

	run("workflows and versions are listed in order", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for _, w := range []string{"b", "a"} {
				if err := tx.WorkflowPut(kt.Workflow{Name: w, Paused: w == "b", PausedReason: "by a person"}); err != nil {
					return err
				}
				for i := 0; i < 2; i++ {
					v := kt.Version{Workflow: w, Major: 1, Minor: i, Script: w, File: w + ".js"}
					if err := tx.VersionInsert(&v); err != nil {
						return err
					}
				}
			}
			return nil
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			ws, err := tx.WorkflowList()
			if err != nil || len(ws) != 2 || ws[0].Name != "a" || ws[1].Name != "b" || !ws[1].Paused || ws[1].PausedReason != "by a person" {
				return fmt.Errorf("workflows %+v %v", ws, err)
			}
			vs, err := tx.VersionList("b")
			if err != nil || len(vs) != 2 || vs[0].Label() != "1.0" || vs[1].Label() != "1.1" || vs[0].ID >= vs[1].ID || vs[1].File != "b.js" {
				return fmt.Errorf("versions %+v %v", vs, err)
			}
			if vs, err := tx.VersionList("none"); err != nil || len(vs) != 0 {
				return fmt.Errorf("versions of an unknown workflow %+v %v", vs, err)
			}
			return nil
		}))
	})

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
			if err != nil || c.RunsByStatus[string(kt.StatusCommitted)] != 2 || c.RunsByStatus[string(kt.StatusReconciliation)] != 1 ||
				c.MutationsByStatus[string(kt.MutationInFlight)] != 2 || c.MutationsByStatus[string(kt.MutationApplied)] != 1 ||
				c.ReconcileAttempts != 3 || c.PendingEvents != 1 {
				return fmt.Errorf("counts %+v %v", c, err)
			}
			return nil
		}))
	})
}

// exerciseDue covers due work.
func exerciseDue(run runCase) {
	ctx := context.Background()
	run("a closed store refuses transactions", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.WorkflowPut(kt.Workflow{Name: "w"}) }))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Update(ctx, func(tx store.Tx) error { return tx.WorkflowPut(kt.Workflow{Name: "x"}) }); err == nil {
			t.Fatal("an update after Close succeeded")
		}
		if err := s.View(ctx, func(tx store.Tx) error { _, err := tx.WorkflowGet("w"); return err }); err == nil {
			t.Fatal("a view after Close succeeded")
		}
	})

	run("due workflows", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for _, w := range []string{"a", "b", "c", "d"} {
				if err := tx.WorkflowPut(kt.Workflow{Name: w}); err != nil {
					return err
				}
			}
			if err := tx.HandlerPut(kt.Handler{Workflow: "a", Name: "p", Type: kt.HandlerProducer, NextRunAt: 50}); err != nil {
				return err
			}
			if err := tx.HandlerPut(kt.Handler{Workflow: "b", Name: "p", Type: kt.HandlerProducer, NextRunAt: 500}); err != nil {
				return err
			}
			if err := tx.HandlerPut(kt.Handler{Workflow: "c", Name: "c", Type: kt.HandlerConsumer, Dirty: true}); err != nil {
				return err
			}
			// d is dirty but blocked by a failed run: not due.
			if err := tx.HandlerPut(kt.Handler{Workflow: "d", Name: "c", Type: kt.HandlerConsumer, Dirty: true}); err != nil {
				return err
			}
			return tx.RunPut(kt.Run{ID: "x", Workflow: "d", Phase: kt.PhasePreparing, Status: kt.StatusFailedLogic})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			due, err := tx.DueWorkflows(100)
			if err != nil || fmt.Sprint(due) != "[a c]" {
				return fmt.Errorf("due %v %v", due, err)
			}
			return nil
		}))
	})
}

// exerciseTransactions covers transactions: serialized, isolated, cancelled.
func exerciseTransactions(run runCase) {
	ctx := context.Background()
	run("due workflows: every reason, and every reason not to", func(t *testing.T, s store.Store) {
		const now = 1000
		type setup struct {
			wf      kt.Workflow
			version int64 // the open run's version
			run     *kt.Run
			mut     *kt.Mutation
			handler *kt.Handler
		}
		open := func(st kt.Status) *kt.Run {
			return &kt.Run{Workflow: "?", Handler: "c", HandlerType: kt.HandlerConsumer, Phase: kt.PhaseMutating, Status: st}
		}
		cases := map[string]struct {
			due bool
			s   setup
		}{
			"a person's decision":              {true, setup{run: func() *kt.Run { r := open(kt.StatusFailedLogic); r.Action = "retry"; return r }()}},
			"a crashed run":                    {true, setup{run: open(kt.StatusCrashed)}},
			"an active run left behind":        {true, setup{run: open(kt.StatusActive)}},
			"a transient retry that is due":    {true, setup{run: func() *kt.Run { r := open(kt.StatusTransient); r.NextAttemptAt = now; return r }()}},
			"a transient retry not due yet":    {false, setup{run: func() *kt.Run { r := open(kt.StatusTransient); r.NextAttemptAt = now + 1; return r }()}},
			"transient retries given up":       {false, setup{run: open(kt.StatusTransient)}},
			"a logic failure, a newer version": {true, setup{wf: kt.Workflow{ActiveVersion: 2}, version: 1, run: open(kt.StatusFailedLogic)}},
			"a logic failure, same version":    {false, setup{wf: kt.Workflow{ActiveVersion: 1}, version: 1, run: open(kt.StatusFailedLogic)}},
			"a reconcile attempt that is due": {true, setup{run: open(kt.StatusReconciliation),
				mut: &kt.Mutation{Status: kt.MutationNeedsReconcile, NextReconcileAt: now}}},
			"a reconcile attempt not due yet": {false, setup{run: open(kt.StatusReconciliation),
				mut: &kt.Mutation{Status: kt.MutationNeedsReconcile, NextReconcileAt: now + 1}}},
			"an indeterminate write":  {false, setup{run: open(kt.StatusReconciliation), mut: &kt.Mutation{Status: kt.MutationIndeterminate}}},
			"waiting for approval":    {false, setup{run: open(kt.StatusApproval)}},
			"a dirty consumer":        {true, setup{handler: &kt.Handler{Type: kt.HandlerConsumer, Dirty: true}}},
			"a woken consumer":        {true, setup{handler: &kt.Handler{Type: kt.HandlerConsumer, WakeAt: now}}},
			"a consumer woken later":  {false, setup{handler: &kt.Handler{Type: kt.HandlerConsumer, WakeAt: now + 1}}},
			"a queued producer":       {true, setup{handler: &kt.Handler{Type: kt.HandlerProducer, Queued: true}}},
			"a producer due now":      {true, setup{handler: &kt.Handler{Type: kt.HandlerProducer, NextRunAt: now}}},
			"an unscheduled producer": {false, setup{handler: &kt.Handler{Type: kt.HandlerProducer}}},
			"dirty, but a run blocks": {false, setup{handler: &kt.Handler{Type: kt.HandlerConsumer, Dirty: true}, run: open(kt.StatusApproval)}},
			"dirty, but paused":       {false, setup{wf: kt.Workflow{Paused: true}, handler: &kt.Handler{Type: kt.HandlerConsumer, Dirty: true}}},
			"a decision, but paused":  {false, setup{wf: kt.Workflow{Paused: true}, run: func() *kt.Run { r := open(kt.StatusFailedLogic); r.Action = "retry"; return r }()}},
		}
		want := []string{}
		i := 0
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for name, c := range cases {
				i++
				w := c.s.wf
				w.Name = name
				if err := tx.WorkflowPut(w); err != nil {
					return err
				}
				if c.due {
					want = append(want, name)
				}
				if h := c.s.handler; h != nil {
					h.Workflow, h.Name = name, "h"
					if err := tx.HandlerPut(*h); err != nil {
						return err
					}
				}
				if r := c.s.run; r != nil {
					r.ID, r.Workflow, r.Version = fmt.Sprintf("run%d", i), name, c.s.version
					if err := tx.RunPut(*r); err != nil {
						return err
					}
					if m := c.s.mut; m != nil {
						m.ID, m.Workflow, m.RunID, m.Tool, m.Method, m.Params = fmt.Sprintf("m%d", i), name, r.ID, "http", "request", json.RawMessage(`{}`)
						m.IdentityKey, m.IdempotencyKey = fmt.Sprintf("k%d", i), fmt.Sprintf("keep-k%d", i)
						if err := tx.MutationPut(*m); err != nil {
							return err
						}
					}
				}
			}
			return nil
		}))
		sort.Strings(want)
		must(t, s.View(ctx, func(tx store.Tx) error {
			due, err := tx.DueWorkflows(now)
			if err != nil {
				return err
			}
			if strings.Join(due, "|") != strings.Join(want, "|") {
				return fmt.Errorf("due workflows:\n got %q\nwant %q", due, want)
			}
			return nil
		}))
	})

	run("concurrent updates are serialized", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.HandlerPut(kt.Handler{Workflow: "w", Name: "n", Type: kt.HandlerProducer, State: json.RawMessage(`0`)})
		}))
		var wg sync.WaitGroup
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = s.Update(ctx, func(tx store.Tx) error {
					h, err := tx.HandlerGet("w", "n")
					if err != nil {
						return err
					}
					var n int
					_ = json.Unmarshal(h.State, &n)
					h.State = json.RawMessage(fmt.Sprint(n + 1))
					return tx.HandlerPut(h)
				})
			}()
		}
		wg.Wait()
		must(t, s.View(ctx, func(tx store.Tx) error {
			h, err := tx.HandlerGet("w", "n")
			if err != nil || string(h.State) != "20" {
				return fmt.Errorf("lost updates: state %s %v", h.State, err)
			}
			return nil
		}))
		if st := s.Stats(); st.Transactions < 21 || st.Commits < 1 || st.Commits > st.Transactions {
			t.Fatalf("commits counted: %+v (want 21 transactions in at most as many commits)", st)
		}
	})

	run("a failing or panicking update leaves the others of its commit alone", func(t *testing.T, s store.Store) {
		var wg sync.WaitGroup
		errs := make([]error, 30)
		panics := make([]any, 30)
		for i := 0; i < 30; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { panics[i] = recover() }()
				errs[i] = s.Update(ctx, func(tx store.Tx) error {
					if err := tx.HandlerPut(kt.Handler{Workflow: "g", Name: fmt.Sprint(i), Type: kt.HandlerProducer, State: json.RawMessage(`1`)}); err != nil {
						return err
					}
					switch i % 3 {
					case 1:
						return fmt.Errorf("refused %d", i)
					case 2:
						panic(fmt.Sprintf("panic %d", i))
					}
					return nil
				})
			}()
		}
		wg.Wait()
		for i := 0; i < 30; i++ {
			switch i % 3 {
			case 0:
				if errs[i] != nil || panics[i] != nil {
					t.Errorf("update %d: %v %v", i, errs[i], panics[i])
				}
			case 1:
				if errs[i] == nil || errs[i].Error() != fmt.Sprintf("refused %d", i) {
					t.Errorf("update %d returned %v, want its own error", i, errs[i])
				}
			case 2:
				if panics[i] != fmt.Sprintf("panic %d", i) {
					t.Errorf("update %d: panic %v reached its caller, want its own", i, panics[i])
				}
			}
		}
		must(t, s.View(ctx, func(tx store.Tx) error {
			hs, err := tx.HandlerList("g")
			if err != nil {
				return err
			}
			got := map[string]bool{}
			for _, h := range hs {
				got[h.Name] = true
			}
			for i := 0; i < 30; i++ {
				if want := i%3 == 0; got[fmt.Sprint(i)] != want {
					return fmt.Errorf("handler %d stored=%v, want %v (a failed update's writes must be rolled back, the others kept)", i, got[fmt.Sprint(i)], want)
				}
			}
			return nil
		}))
	})

	run("leases: a stale token writes nothing (fencing); nodes are listed", func(t *testing.T, s store.Store) {
		grant := func(node string, now int64) kt.Lease {
			var l kt.Lease
			must(t, s.Update(ctx, func(tx store.Tx) error {
				cur, err := tx.LeaseGet("w")
				var prev *kt.Lease
				if err == nil {
					prev = &cur
				} else if !errors.Is(err, kt.ErrNotFound) {
					return err
				}
				var ok bool
				if l, ok = kt.GrantLease(prev, "w", node, now, now+100); !ok {
					return fmt.Errorf("%s was refused the lease at %d: %+v", node, now, cur)
				}
				return tx.LeasePut(l)
			}))
			return l
		}
		a := grant("a", 0)
		put := func(f store.Fence, name string) error {
			return s.Update(store.WithFence(ctx, f), func(tx store.Tx) error {
				return tx.HandlerPut(kt.Handler{Workflow: "w", Name: name, Type: kt.HandlerProducer})
			})
		}
		fa := store.Fence{Workflow: "w", Node: "a", Token: a.Token}
		if err := put(fa, "by-a"); err != nil {
			t.Fatalf("a write with the current lease: %v", err)
		}
		b := grant("b", 200) // a's lease expired at 100: b takes over
		if b.Token != a.Token+1 {
			t.Fatalf("takeover token %d, want %d", b.Token, a.Token+1)
		}
		if err := put(fa, "stale"); !errors.Is(err, store.ErrFenced) || !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a write with a stale lease: %v, want ErrFenced", err)
		}
		if err := put(store.Fence{Workflow: "w", Node: "b", Token: b.Token}, "by-b"); err != nil {
			t.Fatalf("the new owner's write: %v", err)
		}
		if err := put(store.Fence{Workflow: "other", Node: "a", Token: 1}, "no-lease"); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("a write fenced by a lease that does not exist: %v", err)
		}
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.NodePut(kt.Node{ID: "b", Addr: "10.0.0.2:8347", StartedAt: 1, SeenAt: 5})
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.NodePut(kt.Node{ID: "b", Addr: "10.0.0.2:8347", StartedAt: 9, SeenAt: 7})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			hs, err := tx.HandlerList("w")
			if err != nil || len(hs) != 2 || hs[0].Name != "by-a" || hs[1].Name != "by-b" {
				return fmt.Errorf("handlers after fencing: %+v %v", hs, err)
			}
			ls, err := tx.LeaseList()
			if err != nil || len(ls) != 1 || ls[0].Node != "b" || ls[0].Token != b.Token {
				return fmt.Errorf("leases %+v %v", ls, err)
			}
			ns, err := tx.NodeList()
			if err != nil || len(ns) != 1 || ns[0].SeenAt != 7 || ns[0].StartedAt != 1 {
				return fmt.Errorf("nodes %+v %v (a node keeps its start time)", ns, err)
			}
			return nil
		}))
	})

	run("the installation id: made with the store, the same on every read, replaced only by InstallationSet", func(t *testing.T, s store.Store) {
		var first string
		must(t, s.View(ctx, func(tx store.Tx) error {
			var err error
			if first, err = tx.InstallationID(); err != nil || len(first) < 16 {
				return fmt.Errorf("a new store's installation id %q: %v", first, err)
			}
			return nil
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if again, err := tx.InstallationID(); err != nil || again != first {
				return fmt.Errorf("the id changed: %q then %q (%v)", first, again, err)
			}
			if err := tx.InstallationSet(""); err == nil {
				return fmt.Errorf("an empty installation id was accepted")
			}
			return tx.InstallationSet("from-another-store")
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			if id, err := tx.InstallationID(); err != nil || id != "from-another-store" {
				return fmt.Errorf("after InstallationSet: %q %v", id, err)
			}
			return nil
		}))
	})

	run("secrets: put replaces and keeps the creation time, list by name, delete", func(t *testing.T, s store.Store) {
		sealed := []byte{0, 1, 2, 255, 'x'}
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if err := tx.SecretPut(kt.Secret{Name: "sig", Sealed: []byte("old"), CreatedAt: 1, UpdatedAt: 1}); err != nil {
				return err
			}
			if err := tx.SecretPut(kt.Secret{Name: "sig", Sealed: sealed, CreatedAt: 9, UpdatedAt: 9}); err != nil {
				return err
			}
			return tx.SecretPut(kt.Secret{Name: "api", Sealed: []byte("a"), CreatedAt: 2, UpdatedAt: 2})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			x, err := tx.SecretGet("sig")
			if err != nil || string(x.Sealed) != string(sealed) || x.CreatedAt != 1 || x.UpdatedAt != 9 {
				return fmt.Errorf("sig after a second put: %+v %v", x, err)
			}
			xs, err := tx.SecretList()
			if err != nil || len(xs) != 2 || xs[0].Name != "api" || xs[1].Name != "sig" {
				return fmt.Errorf("secrets %+v %v", xs, err)
			}
			return nil
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.SecretDelete("api") }))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if err := tx.SecretDelete("api"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("deleting a secret twice: %v", err)
			}
			return nil
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			if _, err := tx.SecretGet("api"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("a deleted secret: %v", err)
			}
			return nil
		}))
	})

	run("connections: put replaces, list, delete", func(t *testing.T, s store.Store) {
		must(t, s.View(ctx, func(tx store.Tx) error {
			if _, err := tx.ConnectionGet("google"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("a connection that was never made: %v", err)
			}
			return nil
		}))
		sealed := []byte{0, 1, 2, 255, 'x'} // binary, as sealed credentials are
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.ConnectionPut(kt.Connection{Provider: "google", Account: "a@x", Scopes: []string{"s1", "s2"}, Sealed: sealed, CreatedAt: 1, UpdatedAt: 1})
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.ConnectionPut(kt.Connection{Provider: "google", Account: "a@x", Scopes: []string{"s3"}, Sealed: []byte("new"), Broken: "revoked", CreatedAt: 5, UpdatedAt: 5})
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.ConnectionPut(kt.Connection{Provider: "slack", Sealed: []byte("t"), CreatedAt: 2, UpdatedAt: 2})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			c, err := tx.ConnectionGet("google")
			if err != nil || string(c.Sealed) != "new" || len(c.Scopes) != 1 || c.Scopes[0] != "s3" || c.Broken != "revoked" || c.CreatedAt != 1 || c.UpdatedAt != 5 {
				return fmt.Errorf("google after a second put: %+v %v (it keeps its creation time)", c, err)
			}
			cs, err := tx.ConnectionList()
			if err != nil || len(cs) != 2 || cs[0].Provider != "google" || cs[1].Provider != "slack" || cs[1].Scopes != nil {
				return fmt.Errorf("connections %+v %v", cs, err)
			}
			return nil
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.ConnectionDelete("slack") }))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.ConnectionPut(kt.Connection{Provider: "bin", Sealed: sealed, CreatedAt: 2, UpdatedAt: 2})
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			if _, err := tx.ConnectionGet("slack"); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("a deleted connection: %v", err)
			}
			c, err := tx.ConnectionGet("bin")
			if err != nil || string(c.Sealed) != string(sealed) {
				return fmt.Errorf("binary sealed bytes came back as %v %v", c.Sealed, err)
			}
			return nil
		}))
	})

	run("notices: sent once per key and channel", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.NoticePut("run-1", "webhook", 5) }))
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.NoticePut("run-1", "webhook", 9) })) // a second record keeps the first time
		must(t, s.View(ctx, func(tx store.Tx) error {
			if at, err := tx.NoticeSent("run-1", "webhook"); err != nil || at != 5 {
				return fmt.Errorf("run-1 webhook: %d %v", at, err)
			}
			if at, err := tx.NoticeSent("run-1", "email"); err != nil || at != 0 {
				return fmt.Errorf("run-1 email, never sent: %d %v", at, err)
			}
			if l, err := tx.NoticeList(); err != nil || len(l) != 1 || l[0] != (store.Notice{Key: "run-1", Channel: "webhook", SentAt: 5}) {
				return fmt.Errorf("the list of notices: %+v %v", l, err)
			}
			return nil
		}))
	})

	run("grants: added once, listed by workflow", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for _, g := range []kt.Grant{{Workflow: "w", Item: "gmail.send", GrantedBy: "ann", GrantedAt: 1}, {Workflow: "w", Item: "gmail.send", GrantedBy: "bob", GrantedAt: 2},
				{Workflow: "w", Item: "source:gmail", GrantedBy: "ann", GrantedAt: 1}, {Workflow: "v", Item: "*", GrantedBy: "ann", GrantedAt: 1}} {
				if err := tx.GrantAdd(g); err != nil {
					return err
				}
			}
			return nil
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			gs, err := tx.GrantList("w")
			if err != nil || len(gs) != 2 || gs[0].Item != "gmail.send" || gs[0].GrantedBy != "ann" || gs[1].Item != "source:gmail" {
				return fmt.Errorf("grants of w: %+v %v", gs, err)
			}
			gs, err = tx.GrantList("nobody")
			if err != nil || len(gs) != 0 {
				return fmt.Errorf("grants of a workflow without any: %+v %v", gs, err)
			}
			return nil
		}))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if ok, err := tx.GrantRemove("w", "gmail.send"); !ok || err != nil {
				return fmt.Errorf("revoke a grant: %v %v", ok, err)
			}
			if ok, err := tx.GrantRemove("w", "gmail.send"); ok || err != nil {
				return fmt.Errorf("revoke it again: %v %v, want false", ok, err)
			}
			gs, err := tx.GrantList("w")
			if err != nil || len(gs) != 1 || gs[0].Item != "source:gmail" {
				return fmt.Errorf("grants of w after the revoke: %+v %v", gs, err)
			}
			if gs, err := tx.GrantList("v"); err != nil || len(gs) != 1 {
				return fmt.Errorf("another workflow's grants after the revoke: %+v %v", gs, err)
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

	run("a cancelled context does not run the update", func(t *testing.T, s store.Store) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		ran := false
		if err := s.Update(cctx, func(tx store.Tx) error { ran = true; return nil }); err == nil || ran {
			t.Fatalf("update with a cancelled context: err %v, ran %v", err, ran)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
