package storetest

import (
	"context"
	"fmt"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exerciseTally covers Tally (issue 42): counts per hour of one
// workflow's runs, writes and inputs in a range, and the waits for a
// person that overlap it (BlockedSpanAdd's, ended, and runs' blocked_at,
// going on); the rows of other workflows and outside the range are not
// counted.
func exerciseTally(run runCase) {
	ctx := context.Background()
	run("tally counts per hour in the range, one workflow's", func(t *testing.T, s store.Store) {
		const h = int64(3600000)
		base := 1000 * h // the start of an hour
		must(t, s.Update(ctx, func(tx store.Tx) error {
			runs := []kt.Run{
				{ID: "a", Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Status: kt.StatusCommitted, CreatedAt: base + 10, FinishedAt: base + 20},
				{ID: "b", Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Status: kt.StatusCommitted, CreatedAt: base + h - 1, FinishedAt: base + h},
				{ID: "c", Workflow: "w", Handler: "p", HandlerType: kt.HandlerProducer, Status: kt.StatusFailedLogic, CreatedAt: base + h + 5, BlockedAt: base + h + 7},
				{ID: "d", Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Status: kt.StatusSkipped, CreatedAt: base + 2*h, FinishedAt: base + 2*h + 600000},
				{ID: "e", Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Status: kt.StatusRetried, CreatedAt: base + 2*h + 1, FinishedAt: base + 2*h + 2},
				{ID: "f", Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Status: kt.StatusTransient, CreatedAt: base + 2*h + 3},
				{ID: "old", Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Status: kt.StatusCommitted, CreatedAt: base - 1},
				{ID: "late", Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Status: kt.StatusCommitted, CreatedAt: base + 3*h},
				{ID: "x", Workflow: "other", Handler: "c", HandlerType: kt.HandlerConsumer, Status: kt.StatusFailedLogic, CreatedAt: base + 10, BlockedAt: base + 10},
				{ID: "y", Workflow: "w", Handler: "c", HandlerType: kt.HandlerConsumer, Status: kt.StatusFailedLogic, CreatedAt: base + 3*h, BlockedAt: base + 3*h},
			}
			for _, r := range runs {
				r.UpdatedAt = r.CreatedAt
				if err := tx.RunPut(r); err != nil {
					return fmt.Errorf("run %s: %w", r.ID, err)
				}
			}
			for _, b := range []struct {
				wf string
				store.BlockedSpan
			}{
				{"w", store.BlockedSpan{RunID: "d", Handler: "c", From: base + 2*h + 60000, To: base + 2*h + 600000}},
				{"w", store.BlockedSpan{RunID: "old", Handler: "c", From: base - h, To: base}},          // ended as the range began
				{"w", store.BlockedSpan{RunID: "late", Handler: "c", From: base + 3*h, To: base + 4*h}}, // began as it ended
				{"w", store.BlockedSpan{RunID: "b", Handler: "c", From: base - 2*h, To: base + 1}},      // overlaps its start
				{"other", store.BlockedSpan{RunID: "x", Handler: "c", From: base, To: base + 600000}},   // another workflow's
			} {
				if err := tx.BlockedSpanAdd(b.wf, b.BlockedSpan); err != nil {
					return err
				}
			}
			for i, m := range []kt.Mutation{
				{Status: kt.MutationApplied, CreatedAt: base + 11},
				{Status: kt.MutationApplied, CreatedAt: base + 12},
				{Status: kt.MutationIndeterminate, CreatedAt: base + h + 6},
				{Status: kt.MutationApplied, CreatedAt: base - 5},
			} {
				m.ID, m.Workflow, m.RunID, m.Tool, m.Method, m.IdentityKey, m.UpdatedAt = fmt.Sprint("m", i), "w", "a", "http", "request", fmt.Sprint("k", i), m.CreatedAt
				if err := tx.MutationPut(m); err != nil {
					return err
				}
			}
			for i, in := range []kt.Input{
				{Kind: kt.KindInput, CreatedAt: base + 1},
				{Kind: kt.KindInput, CreatedAt: base + 2*h + 1},
				{Kind: kt.KindTask, CreatedAt: base + 2},
				{Kind: kt.KindInput, CreatedAt: base + 3*h},
			} {
				in.ID, in.Workflow, in.Key, in.Title, in.UpdatedAt = fmt.Sprint("i", i), "w", fmt.Sprint("s:t:", i), "t", in.CreatedAt
				if err := tx.InputPut(in); err != nil {
					return err
				}
			}
			return nil
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			got, err := tx.Tally("w", base, base+3*h)
			if err != nil {
				return err
			}
			want := store.HourTally{
				Runs: []store.RunTally{{Hour: base, Handler: "c", Status: kt.StatusCommitted, N: 2}, {Hour: base + h, Handler: "p", Status: kt.StatusFailedLogic, N: 1},
					{Hour: base + 2*h, Handler: "c", Status: kt.StatusTransient, N: 1}, {Hour: base + 2*h, Handler: "c", Status: kt.StatusRetried, N: 1}, {Hour: base + 2*h, Handler: "c", Status: kt.StatusSkipped, N: 1}},
				Writes: []store.WriteTally{{Hour: base, Tool: "http", Method: "request", Status: kt.MutationApplied, N: 2}, {Hour: base + h, Tool: "http", Method: "request", Status: kt.MutationIndeterminate, N: 1}},
				Inputs: []store.HourCount{{Hour: base, N: 1}, {Hour: base + 2*h, N: 1}},
				Blocked: []store.BlockedSpan{{RunID: "b", Handler: "c", From: base - 2*h, To: base + 1}, {RunID: "c", Handler: "p", From: base + h + 7, To: 0},
					{RunID: "d", Handler: "c", From: base + 2*h + 60000, To: base + 2*h + 600000}},
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
				return fmt.Errorf("tally\n got %+v\nwant %+v", got, want)
			}
			return nil
		}))
	})
}
