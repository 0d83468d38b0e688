package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exercisePages covers the paged lists and the tallies (issue 44).
func exercisePages(run runCase) {
	ctx := context.Background()
	// Seven rows of w, two of them in one millisecond (the id orders
	// them), and one of another workflow.
	at := []int64{10, 20, 30, 30, 40, 50, 60}
	run("inputs, runs and outputs are paged newest first by (time, id), both ways", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for i, ms := range at {
				id := fmt.Sprintf("x%d", i)
				title := fmt.Sprintf("Order %d", i)
				if i == 4 {
					title = "Refund 50%_off"
				}
				if err := tx.InputPut(kt.Input{ID: id, Workflow: "w", Key: "s:t:" + id, Kind: kt.KindInput, Source: "s", Type: "t", ExternalID: id, Title: title, CurrentAttempt: 1, CreatedAt: ms, UpdatedAt: ms}); err != nil {
					return err
				}
				if err := tx.RunPut(kt.Run{ID: id, Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Phase: kt.PhaseMutating, Status: kt.StatusCommitted, CreatedAt: ms, Trace: json.RawMessage(`[{"kind":"call"}]`)}); err != nil {
					return err
				}
				if err := tx.MutationPut(kt.Mutation{ID: id, Workflow: "w", RunID: id, Tool: "http", Method: "request", Params: json.RawMessage(`{}`),
					IdentityKey: "k" + id, IdempotencyKey: "keep-k" + id, Status: kt.MutationApplied, CreatedAt: ms}); err != nil {
					return err
				}
			}
			if err := tx.InputPut(kt.Input{ID: "y", Workflow: "other", Key: "s:t:y", Kind: kt.KindInput, Title: "Order y", CurrentAttempt: 1, CreatedAt: 35}); err != nil {
				return err
			}
			return tx.RunPut(kt.Run{ID: "y", Workflow: "other", Handler: "c", HandlerType: kt.HandlerConsumer, Phase: kt.PhaseMutating, Status: kt.StatusCommitted, CreatedAt: 35})
		}))
		type lister func(tx store.Tx, p store.Page) ([]store.Pos, error)
		listers := map[string]lister{
			"inputs": func(tx store.Tx, p store.Page) ([]store.Pos, error) {
				rows, err := tx.InputPage("w", p)
				var out []store.Pos
				for _, r := range rows {
					out = append(out, store.Pos{At: r.CreatedAt, ID: r.ID})
				}
				return out, err
			},
			"runs": func(tx store.Tx, p store.Page) ([]store.Pos, error) {
				rows, err := tx.RunPage("w", p)
				var out []store.Pos
				for _, r := range rows {
					if r.Trace != nil {
						return nil, fmt.Errorf("run %s of a page carries its trace %s: a list shows none", r.ID, r.Trace)
					}
					out = append(out, store.Pos{At: r.CreatedAt, ID: r.ID})
				}
				return out, err
			},
			"outputs": func(tx store.Tx, p store.Page) ([]store.Pos, error) {
				rows, err := tx.MutationPage("w", p)
				var out []store.Pos
				for _, r := range rows {
					out = append(out, store.Pos{At: r.CreatedAt, ID: r.ID})
				}
				return out, err
			},
		}
		ids := func(ps []store.Pos) string {
			var s []string
			for _, p := range ps {
				s = append(s, p.ID)
			}
			return strings.Join(s, ",")
		}
		for name, list := range listers {
			must(t, s.View(ctx, func(tx store.Tx) error {
				var pages []string
				var older *store.Pos
				var first [][]store.Pos
				for range 5 {
					ps, err := list(tx, store.Page{Limit: 3, Older: older})
					if err != nil {
						return err
					}
					if len(ps) == 0 {
						break
					}
					pages, first = append(pages, ids(ps)), append(first, ps)
					older = &ps[len(ps)-1]
				}
				if got, want := strings.Join(pages, " | "), "x6,x5,x4 | x3,x2,x1 | x0"; got != want {
					return fmt.Errorf("%s followed page by page: %s, want %s", name, got, want)
				}
				// The previous page of the third is the second, newest first.
				ps, err := list(tx, store.Page{Limit: 3, Newer: &first[2][0]})
				if err != nil || ids(ps) != "x3,x2,x1" {
					return fmt.Errorf("%s: the page before x0 is %s (%v), want x3,x2,x1", name, ids(ps), err)
				}
				ps, err = list(tx, store.Page{})
				if err != nil || len(ps) != 7 {
					return fmt.Errorf("%s: the default page holds %d rows (%v), want all 7 (fewer than 50)", name, len(ps), err)
				}
				return nil
			}))
		}
		must(t, s.View(ctx, func(tx store.Tx) error {
			for search, want := range map[string]string{"order": "x6,x5,x3,x2,x1,x0", "50%_": "x4", "X3": "x3", "%": "x4", "nothing": ""} {
				ins, err := tx.InputPage("w", store.Page{Search: search})
				var got []string
				for _, in := range ins {
					got = append(got, in.ID)
				}
				if err != nil || strings.Join(got, ",") != want {
					return fmt.Errorf("inputs searched for %q: %v (%v), want %s", search, got, err, want)
				}
			}
			ins, err := tx.InputPage("w", store.Page{Search: "order", Limit: 2, Older: &store.Pos{At: 50, ID: "x5"}})
			if err != nil || len(ins) != 2 || ins[0].ID != "x3" || ins[1].ID != "x2" {
				return fmt.Errorf("the second page of a search: %+v %v", ins, err)
			}
			return nil
		}))
	})

	run("a search reads one window of inputs and says where the next begins", func(t *testing.T, s store.Store) {
		n := store.SearchWindow + 5
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for i := range n {
				id, title := fmt.Sprintf("x%05d", i), fmt.Sprintf("Order %d", i)
				if i == 3 {
					title = "Refund 3"
				}
				if err := tx.InputPut(kt.Input{ID: id, Workflow: "w", Key: "s:t:" + id, Kind: kt.KindInput, Title: title, CurrentAttempt: 1, CreatedAt: int64(i)}); err != nil {
					return err
				}
			}
			return nil
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			// The newest window (inputs n-1 down to 5) holds no refund.
			ins, err := tx.InputPage("w", store.Page{Search: "refund"})
			if err != nil || len(ins) != 0 {
				return fmt.Errorf("the newest window: %d inputs %v, want none", len(ins), err)
			}
			end, ok, err := tx.InputWindowEnd("w", store.Page{Search: "refund"})
			if err != nil || !ok || end.ID != "x00005" {
				return fmt.Errorf("the newest window ends at %+v %v %v, want x00005", end, ok, err)
			}
			ins, err = tx.InputPage("w", store.Page{Search: "refund", Older: &end})
			if err != nil || len(ins) != 1 || ins[0].ID != "x00003" {
				return fmt.Errorf("the next window: %+v %v, want x00003", ins, err)
			}
			if _, ok, err := tx.InputWindowEnd("w", store.Page{Search: "refund", Older: &end}); ok || err != nil {
				return fmt.Errorf("the next window has an end (%v %v): it holds the last 5", ok, err)
			}
			// Back: the three matches nearest after x00004 (Order 1000,
			// 10000 and 10001), newest first.
			ins, err = tx.InputPage("w", store.Page{Search: "order 1000", Newer: &store.Pos{At: 4, ID: "x00004"}, Limit: 3})
			if err != nil || len(ins) != 3 || ins[0].ID != "x10001" || ins[2].ID != "x01000" {
				return fmt.Errorf("a search of newer inputs: %+v %v", ins, err)
			}
			return nil
		}))
	})

	run("the tallies agree with a count of the rows, and a transaction that fails changes neither", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for i := range 4 {
				id := fmt.Sprintf("r%d", i)
				if err := tx.InputPut(kt.Input{ID: id, Workflow: "w", Key: "s:t:" + id, Kind: kt.KindInput, Title: id, CurrentAttempt: 1, CreatedAt: int64(i)}); err != nil {
					return err
				}
				if err := tx.RunPut(kt.Run{ID: id, Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Phase: kt.PhaseMutating, Status: kt.StatusActive, CreatedAt: int64(i)}); err != nil {
					return err
				}
				if err := tx.MutationInsert(kt.Mutation{ID: id, Workflow: "w", RunID: id, Tool: "http", Method: "request", Params: json.RawMessage(`{}`),
					IdentityKey: "k" + id, IdempotencyKey: "keep-k" + id, Status: kt.MutationInFlight, CreatedAt: int64(i)}); err != nil {
					return err
				}
				for _, topic := range []string{"a", "b"} {
					if _, err := tx.EventPublish(&kt.Event{Workflow: "w", Topic: topic, MessageID: id, Payload: json.RawMessage(`1`), UpdatedAt: 1}); err != nil {
						return err
					}
				}
			}
			// Published again: one event, still.
			_, err := tx.EventPublish(&kt.Event{Workflow: "w", Topic: "a", MessageID: "r0", Payload: json.RawMessage(`2`), UpdatedAt: 1})
			return err
		}))
		// Runs move on, a write is applied, events are reserved and settled.
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for i, st := range []kt.Status{kt.StatusCommitted, kt.StatusReconciliation} {
				r, err := tx.RunGet(fmt.Sprintf("r%d", i))
				if err != nil {
					return err
				}
				r.Status = st
				if err := tx.RunSetIfRev(r); err != nil {
					return err
				}
			}
			m, err := tx.MutationGet("r0")
			if err != nil {
				return err
			}
			m.Status = kt.MutationApplied
			if err := tx.MutationPutFrom(m, kt.MutationInFlight); err != nil {
				return err
			}
			for i, final := range []kt.EventStatus{kt.EventConsumed, kt.EventSkipped, ""} {
				ev, err := tx.EventGet("w", "a", fmt.Sprintf("r%d", i))
				if err != nil {
					return err
				}
				if err := tx.EventReserve(ev, "run", 5); err != nil {
					return err
				}
				ev.ReservedBy, ev.UpdatedAt = "run", 5
				if final != "" {
					if err := tx.EventSettle(ev, "run", final, 6); err != nil {
						return err
					}
				}
			}
			return nil
		}))
		want := recount(t, s)
		// A transaction that changes every kind of row, then fails: the
		// tallies are as they were.
		boom := errors.New("boom")
		err := s.Update(ctx, func(tx store.Tx) error {
			if err := tx.InputPut(kt.Input{ID: "z", Workflow: "w", Key: "s:t:z", Kind: kt.KindInput, Title: "z", CurrentAttempt: 1}); err != nil {
				return err
			}
			r, err := tx.RunGet("r2")
			if err != nil {
				return err
			}
			r.Status = kt.StatusCommitted
			if err := tx.RunSetIfRev(r); err != nil {
				return err
			}
			ev, err := tx.EventGet("w", "b", "r0")
			if err != nil {
				return err
			}
			if err := tx.EventReserve(ev, "run", 7); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("the failing transaction: %v", err)
		}
		if got := recount(t, s); !reflect.DeepEqual(got, want) {
			t.Fatalf("after a transaction that failed the tallies are %+v, they were %+v", got, want)
		}
		if want.totals != (store.Totals{Inputs: 4, Runs: 4, Mutations: 4}) {
			t.Fatalf("totals %+v, want 4 inputs, 4 runs, 4 mutations", want.totals)
		}
		if w := []store.TopicCount{{Topic: "a", Reserved: 1, Consumed: 1, Skipped: 1, Pending: 1}, {Topic: "b", Pending: 4}}; !reflect.DeepEqual(want.topics, w) {
			t.Fatalf("topic counts %+v, want %+v", want.topics, w)
		}
	})
}

// tallied is what the tallies say of workflow w, each checked against a
// count of the rows themselves.
type tallied struct {
	counts store.Counts
	topics []store.TopicCount
	totals store.Totals
}

func recount(t *testing.T, s store.Store) tallied {
	t.Helper()
	var got tallied
	must(t, s.View(context.Background(), func(tx store.Tx) error {
		var err error
		if got.counts, err = tx.Counts(); err != nil {
			return err
		}
		if got.topics, err = tx.TopicCounts("w"); err != nil {
			return err
		}
		if got.totals, err = tx.WorkflowTotals("w"); err != nil {
			return err
		}
		// The rows, counted one by one.
		ins, err := tx.InputList("w")
		if err != nil {
			return err
		}
		rs, err := tx.RunList("w", 0)
		if err != nil {
			return err
		}
		ms, err := tx.MutationList("w")
		if err != nil {
			return err
		}
		evs, err := tx.EventList("w", store.EventFilter{Limit: 1000})
		if err != nil {
			return err
		}
		byStatus := func(statuses []string) []store.Tally {
			n := map[string]int{}
			for _, s := range statuses {
				n[s]++
			}
			var out []store.Tally
			for s, c := range n {
				out = append(out, store.Tally{Workflow: "w", Status: s, N: c})
			}
			sort.Slice(out, func(i, j int) bool { return out[i].Status < out[j].Status })
			return out
		}
		var runStatuses, mutStatuses []string
		for _, r := range rs {
			runStatuses = append(runStatuses, string(r.Status))
		}
		for _, m := range ms {
			mutStatuses = append(mutStatuses, string(m.Status))
		}
		topics := map[string]*store.TopicCount{}
		var names []string
		pending := 0
		for _, e := range evs {
			c := topics[e.Topic]
			if c == nil {
				c = &store.TopicCount{Topic: e.Topic}
				topics[e.Topic], names = c, append(names, e.Topic)
			}
			switch {
			case e.Status == kt.EventPending && e.ReservedBy != "":
				c.Reserved++
			case e.Status == kt.EventPending:
				c.Pending++
			case e.Status == kt.EventConsumed:
				c.Consumed++
			case e.Status == kt.EventSkipped:
				c.Skipped++
			}
			if e.Status == kt.EventPending {
				pending++
			}
		}
		sort.Strings(names)
		var topicCounts []store.TopicCount
		for _, n := range names {
			topicCounts = append(topicCounts, *topics[n])
		}
		want := tallied{counts: store.Counts{Runs: byStatus(runStatuses), Mutations: byStatus(mutStatuses), PendingEvents: pending}, topics: topicCounts,
			totals: store.Totals{Inputs: len(ins), Runs: len(rs), Mutations: len(ms)}}
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("the tallies say %+v, a count of the rows %+v", got, want)
		}
		return nil
	}))
	return got
}
