package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exerciseEvents covers events: publish, pending, reservation, lists and counts.
func exerciseEvents(run runCase) {
	ctx := context.Background()
	run("a reserved event is settled only as its run's copy", func(t *testing.T, s store.Store) {
		var held kt.Event
		must(t, s.Update(ctx, func(tx store.Tx) error {
			held = kt.Event{Workflow: "w", Topic: "t", MessageID: "m", Payload: json.RawMessage(`{"v":1}`), UpdatedAt: 5}
			if _, err := tx.EventPublish(&held); err != nil {
				return err
			}
			if err := tx.EventReserve(held, "r1", 6); err != nil {
				return err
			}
			held.ReservedBy, held.UpdatedAt = "r1", 6
			return nil
		}))
		refused := func(what string, ev kt.Event, runID string) {
			t.Helper()
			refused(t, s, what, store.ErrStale, func(tx store.Tx) error { return tx.EventSettle(ev, runID, kt.EventConsumed, 9) })
		}
		refused("another run's settle", held, "r2")
		fewer := held
		fewer.CausedBy = []string{"other"}
		refused("a copy of other causes (a publish merged in the same millisecond)", fewer, "r1")
		older := held
		older.UpdatedAt = 5
		refused("a copy older than the stored event", older, "r1")
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.EventSettle(held, "r1", kt.EventConsumed, 9) }))
		settled := held
		settled.UpdatedAt = 9
		refused("an event settled already", settled, "r1")
		must(t, s.View(ctx, func(tx store.Tx) error {
			got, err := tx.EventGet("w", "t", "m")
			if err != nil || got.Status != kt.EventConsumed || got.ReservedBy != "r1" || got.UpdatedAt != 9 || string(got.Payload) != `{"v":1}` {
				return fmt.Errorf("after the settle: %+v %v", got, err)
			}
			return nil
		}))
	})
	run("a handler's row is advanced without a read", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			return tx.HandlerPut(kt.Handler{Workflow: "w", Name: "c", Type: kt.HandlerConsumer, State: json.RawMessage(`{"n":1}`),
				Dirty: true, Queued: true, WakeAt: 3, NextRunAt: 4, UpdatedAt: 100})
		}))
		advance := func(state json.RawMessage, wake, now int64) {
			t.Helper()
			must(t, s.Update(ctx, func(tx store.Tx) error { return tx.HandlerAdvance("w", "c", state, wake, now) }))
		}
		check := func(what, state string, wake, updated int64) {
			t.Helper()
			must(t, s.View(ctx, func(tx store.Tx) error {
				h, err := tx.HandlerGet("w", "c")
				if err != nil || string(h.State) != state || h.WakeAt != wake || h.UpdatedAt != updated || !h.Dirty || !h.Queued || h.NextRunAt != 4 || h.Type != kt.HandlerConsumer {
					return fmt.Errorf("%s: %+v %v", what, h, err)
				}
				return nil
			}))
		}
		advance(json.RawMessage(`{"n":2}`), 7, 200)
		check("a clock ahead of the row", `{"n":2}`, 7, 200)
		advance(nil, 8, 150)
		check("a clock behind the row, and no new state", `{"n":2}`, 8, 201)
		advance(nil, 9, 201)
		check("the same millisecond", `{"n":2}`, 9, 202)
		refused(t, s, "a missing handler advanced", store.ErrStale, func(tx store.Tx) error { return tx.HandlerAdvance("w", "nope", nil, 1, 1) })
	})
	run("an event is reserved only as it was read", func(t *testing.T, s store.Store) {
		var read kt.Event
		must(t, s.Update(ctx, func(tx store.Tx) error {
			read = kt.Event{Workflow: "w", Topic: "t", MessageID: "m", Payload: json.RawMessage(`{"v":1}`), UpdatedAt: 5}
			_, err := tx.EventPublish(&read)
			return err
		}))
		// Refused: at once or at the commit, which fails, and nothing of
		// the transaction is written.
		refused := func(what string, ev kt.Event, runID string) {
			t.Helper()
			refused(t, s, what, store.ErrEventChanged, func(tx store.Tx) error { return tx.EventReserve(ev, runID, 9) })
		}
		newer := read
		newer.UpdatedAt++
		refused("a copy older than the stored event", newer, "r1")
		other := read
		other.Attempt++
		refused("a copy of another attempt", other, "r1")
		merged := read
		merged.Payload = json.RawMessage(`{"v":0}`)
		refused("a copy of other content (a publish merged in the same millisecond)", merged, "r1")
		caused := read
		caused.CausedBy = []string{"other"}
		refused("a copy of other causes", caused, "r1")
		refused("a missing event", kt.Event{ID: read.ID + 100, Attempt: read.Attempt, UpdatedAt: read.UpdatedAt}, "r1")
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.EventReserve(read, "r1", 9) }))
		// Reserved by r1 now: r2 may not take it, r1 from its new copy may.
		again := read
		again.UpdatedAt = 9
		refused("an event reserved by another run", again, "r2")
		must(t, s.Update(ctx, func(tx store.Tx) error { return tx.EventReserve(again, "r1", 11) }))
		must(t, s.Update(ctx, func(tx store.Tx) error {
			got, err := tx.EventGet("w", "t", "m")
			if err != nil || got.ReservedBy != "r1" || got.UpdatedAt != 11 || got.Status != kt.EventPending || string(got.Payload) != `{"v":1}` {
				return fmt.Errorf("after the reservations: %+v %v", got, err)
			}
			got.Status, got.UpdatedAt = kt.EventSkipped, 12
			return tx.EventUpdate(got)
		}))
		skipped := again
		skipped.UpdatedAt = 12
		refused("a skipped event", skipped, "r1")
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
			// The same event again (issue 44): nothing is written, and
			// the caller is given the event as stored.
			same := kt.Event{Workflow: "w", Topic: "t", MessageID: "m", Payload: json.RawMessage(`{"v":2}`), CausedBy: []string{"i1"}, Attempt: 1, UpdatedAt: 99}
			if created, err := tx.EventPublish(&same); err != nil || created || same.UpdatedAt == 99 || same.Status != kt.EventConsumed {
				return fmt.Errorf("the same publish again: %v %v %+v", created, err, same)
			}
			if got, _ := tx.EventGet("w", "t", "m"); got.UpdatedAt == 99 {
				return fmt.Errorf("the same publish again was written: %+v", got)
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
}
