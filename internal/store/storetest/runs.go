package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exerciseRuns covers runs.
func exerciseRuns(run runCase) {
	ctx := context.Background()
	run("runs: of one version in one status, newest first", func(t *testing.T, s store.Store) {
		must(t, s.Update(ctx, func(tx store.Tx) error {
			for i, r := range []kt.Run{
				{ID: "a", Workflow: "w", Version: 1, Status: kt.StatusCommitted},
				{ID: "b", Workflow: "w", Version: 2, Status: kt.StatusCommitted},
				{ID: "c", Workflow: "w", Version: 1, Status: kt.StatusSkipped},
				{ID: "d", Workflow: "w", Version: 1, Status: kt.StatusCommitted},
				{ID: "e", Workflow: "other", Version: 1, Status: kt.StatusCommitted},
				{ID: "f", Workflow: "w", Version: 1, Status: kt.StatusCommitted},
			} {
				r.Handler, r.HandlerType, r.Phase, r.CreatedAt, r.FinishedAt = "c", kt.HandlerConsumer, kt.PhaseCommitted, int64(i+1), int64(10-i)
				if err := tx.RunPut(r); err != nil {
					return err
				}
			}
			return nil
		}))
		must(t, s.View(ctx, func(tx store.Tx) error {
			ids := func(rs []kt.Run) (out []string) {
				for _, r := range rs {
					out = append(out, r.ID)
				}
				return out
			}
			all, err := tx.RunsOfVersion("w", 1, kt.StatusCommitted, 0)
			if err != nil || fmt.Sprint(ids(all)) != "[f d a]" {
				return fmt.Errorf("committed runs of version 1: %v %v, want [f d a]", ids(all), err)
			}
			two, err := tx.RunsOfVersion("w", 1, kt.StatusCommitted, 2)
			if err != nil || fmt.Sprint(ids(two)) != "[f d]" {
				return fmt.Errorf("the newest 2: %v %v, want [f d]", ids(two), err)
			}
			since, err := tx.RunsFinishedSince("w", 1, kt.StatusCommitted, 7, 0)
			if err != nil || fmt.Sprint(ids(since)) != "[d a]" {
				return fmt.Errorf("committed runs of version 1 finished at 7 or later: %v %v, want [d a] (the earliest first)", ids(since), err)
			}
			if one, err := tx.RunsFinishedSince("w", 1, kt.StatusCommitted, 0, 1); err != nil || fmt.Sprint(ids(one)) != "[f]" {
				return fmt.Errorf("the earliest finished: %v %v, want [f]", ids(one), err)
			}
			if _, err := tx.RunsFinishedSince("w", 1, "committed' OR '1'='1", 0, 0); err == nil {
				return fmt.Errorf("a status that is none of keep's was put into the statement")
			}
			if _, err := tx.RunsOfVersion("w", 1, "committed' OR '1'='1", 0); err == nil {
				return fmt.Errorf("a status that is none of keep's was put into the statement")
			}
			if r, err := tx.RunFirstOf("w", []int64{2, 1}, kt.HandlerConsumer, kt.StatusCommitted); err != nil || r.ID != "a" {
				return fmt.Errorf("the first committed run of versions 1 and 2: %+v %v, want a", r.ID, err)
			}
			if r, err := tx.RunFirstOf("w", []int64{2}, kt.HandlerConsumer, kt.StatusCommitted); err != nil || r.ID != "b" {
				return fmt.Errorf("the first committed run of version 2: %+v %v, want b", r.ID, err)
			}
			for _, versions := range [][]int64{{3}, nil} {
				if _, err := tx.RunFirstOf("w", versions, kt.HandlerConsumer, kt.StatusCommitted); !errors.Is(err, kt.ErrNotFound) {
					return fmt.Errorf("the first run of versions %v, which have none: %v, want not found", versions, err)
				}
			}
			if _, err := tx.RunFirstOf("w", []int64{1}, "task' OR '1'='1", kt.StatusCommitted); err == nil || errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("a handler type that is none of keep's: %v, want a refusal", err)
			}
			if _, err := tx.EventList("w", store.EventFilter{Status: "pending' OR '1'='1"}); err == nil || !strings.Contains(err.Error(), "not an event status") {
				return fmt.Errorf("an event status that is none of keep's: %v, want a refusal that names it", err)
			}
			if _, err := tx.RunFirstOf("w", []int64{1}, kt.HandlerTask, kt.StatusCommitted); !errors.Is(err, kt.ErrNotFound) {
				return fmt.Errorf("the first task run, where there is none: %v, want not found", err)
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
			r.Action = "skip"
			if err := tx.RunSetIfRev(r); err != nil {
				return fmt.Errorf("a write from the stored revision: %v", err)
			}
			if got, _ := tx.RunGet("r2"); got.Rev != r.Rev+1 || got.Action != "skip" {
				return fmt.Errorf("after a conditional write: rev %d (want %d), action %q", got.Rev, r.Rev+1, got.Action)
			}
			return nil
		}))
		// A run that counts a producer's polls that found nothing new
		// (issue 44): the count, the first one's start and the last one's
		// times are written by both writes, and the handler names it.
		must(t, s.Update(ctx, func(tx store.Tx) error {
			q := kt.Run{ID: "q1", Workflow: "w", Version: 1, Handler: "p", HandlerType: kt.HandlerProducer, Phase: kt.PhaseCommitted, Status: kt.StatusCommitted,
				CreatedAt: 10, UpdatedAt: 11, FinishedAt: 11, QuietPolls: 1, QuietSince: 10}
			if err := tx.RunPut(q); err != nil {
				return err
			}
			q.QuietPolls, q.CreatedAt, q.UpdatedAt, q.FinishedAt, q.Trace = 2, 20, 21, 21, json.RawMessage(`{"entries":[]}`)
			if err := tx.RunSetIfRev(q); err != nil {
				return err
			}
			got, err := tx.RunGet("q1")
			if err != nil || got.QuietPolls != 2 || got.QuietSince != 10 || got.CreatedAt != 20 || got.FinishedAt != 21 || got.Rev != 1 {
				return fmt.Errorf("a run of quiet polls after a conditional write: %+v %v", got, err)
			}
			if err := tx.HandlerPut(kt.Handler{Workflow: "w", Name: "p", Type: kt.HandlerProducer, QuietRun: "q1", UpdatedAt: 1}); err != nil {
				return err
			}
			if h, err := tx.HandlerGet("w", "p"); err != nil || h.QuietRun != "q1" {
				return fmt.Errorf("the handler's run of quiet polls: %+v %v", h, err)
			}
			hs, err := tx.HandlerList("w")
			if err != nil || !slices.ContainsFunc(hs, func(h kt.Handler) bool { return h.Name == "p" && h.QuietRun == "q1" }) {
				return fmt.Errorf("the handlers' runs of quiet polls: %+v %v", hs, err)
			}
			return nil
		}))
		// Refused: at once or at the transaction's commit, which fails,
		// and nothing of the transaction is written.
		refused := func(what string, r kt.Run) {
			t.Helper()
			refused(t, s, what, store.ErrConflict, func(tx store.Tx) error { return tx.RunSetIfRev(r) })
		}
		var stale kt.Run
		must(t, s.View(ctx, func(tx store.Tx) error { var err error; stale, err = tx.RunGet("r2"); return err }))
		stale.Rev--
		stale.Status, stale.ErrorMessage = kt.StatusCommitted, "stale"
		refused("a write from an older revision", stale)
		refused("a conditional write of a missing run", kt.Run{ID: "nope", Status: kt.StatusCommitted})
		must(t, s.Update(ctx, func(tx store.Tx) error {
			if got, _ := tx.RunGet("r2"); got.Status != kt.StatusReconciliation || got.ErrorMessage == "stale" || got.Action != "skip" {
				return fmt.Errorf("the refused write changed the run: %+v", got)
			}
			r, _ := tx.RunGet("r2")
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
}
