package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// exerciseDue covers due work.
func exerciseDue(run runCase) {
	ctx := context.Background()
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
}
