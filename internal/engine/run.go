package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sort"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// Crash points: the durable steps Options.AtDurableStep is told about; crash
// tests end the process at one of them, as if it were killed there.
const (
	CrashAfterPrepared = "after-prepared"
	CrashAfterInFlight = "after-inflight"
	CrashAfterCall     = "after-call"
	CrashAfterApplied  = "after-applied"
	CrashInsideCommit  = "inside-commit"
)

func (e *Engine) crashPoint(name string) {
	if e.atStep != nil {
		e.atStep(name)
	}
}

// advance moves a run to a later phase; a backward move is a host bug.
func advance(r *kt.Run, to kt.Phase) error {
	if !kt.PhaseTransitionAllowed(r.Phase, to) {
		return kt.Errorf(kt.ClassInternal, "run %s: phase %s → %s is not allowed", r.ID, r.Phase, to)
	}
	r.Phase = to
	return nil
}

// Step performs the next piece of work of one workflow: at most one run,
// or one reconciliation attempt, or one person's decision. It reports
// whether it did anything. The caller guarantees that no other Step of the
// same workflow runs at the same time.
func (e *Engine) Step(ctx context.Context, name string) (bool, error) {
	var wf kt.Workflow
	var open *kt.Run
	var handlers []kt.Handler
	var prog *script.Program
	now := e.nowMs()
	// Priority (SPEC §5): consumers with the oldest pending event, then other
	// dirty or woken consumers, then due producers and tasks.
	type cand struct {
		h      kt.Handler
		oldest int64
		has    bool
	}
	var consumers []cand
	var due []kt.Handler
	// pick sorts the handlers into candidates; with a program already
	// compiled it runs inside the step's one read transaction.
	pick := func(tx store.Tx) error {
		for _, h := range handlers {
			switch h.Type {
			case kt.HandlerConsumer:
				d, ok := prog.Decl.Consumers[h.Name]
				if !ok || !(h.Dirty || (h.WakeAt > 0 && h.WakeAt <= now)) {
					continue
				}
				oldest, has, err := tx.OldestPending(wf.Name, d.Subscribe)
				if err != nil {
					return err
				}
				consumers = append(consumers, cand{h, oldest, has})
			case kt.HandlerProducer, kt.HandlerTask:
				_, isProducer := prog.Decl.Producers[h.Name]
				_, isTask := prog.Decl.Tasks[h.Name]
				if (isProducer || isTask) && (h.Queued || (h.NextRunAt > 0 && h.NextRunAt <= now)) {
					due = append(due, h)
				}
			}
		}
		return nil
	}
	picked := false
	err := e.store.View(ctx, func(tx store.Tx) error {
		var err error
		if wf, err = tx.WorkflowGet(name); err != nil {
			return err
		}
		r, err := tx.RunOpen(name)
		switch {
		case err == nil:
			open = &r
			return nil
		case !errors.Is(err, kt.ErrNotFound):
			return err
		}
		if handlers, err = tx.HandlerList(name); err != nil {
			return err
		}
		if prog = e.cachedProgram(wf.Name, wf.ActiveVersion); prog == nil || wf.Paused {
			return nil
		}
		picked = true
		return pick(tx)
	})
	if err != nil {
		return false, err
	}
	if wf.Paused {
		return false, nil
	}
	if open != nil {
		return e.handleOpen(ctx, wf, *open)
	}
	if !picked {
		if prog, err = e.program(ctx, wf.Name, wf.ActiveVersion); err != nil {
			return false, err
		}
		if err := e.store.View(ctx, pick); err != nil {
			return false, err
		}
	}
	if len(consumers) > 0 {
		sort.SliceStable(consumers, func(i, j int) bool {
			if consumers[i].has != consumers[j].has {
				return consumers[i].has
			}
			return consumers[i].oldest < consumers[j].oldest
		})
		c := consumers[0]
		run := e.newRun(wf, c.h.Name, kt.HandlerConsumer, kt.PhasePreparing)
		return true, e.newExec(ctx, wf, prog, &run).consumer(&c.h)
	}
	if len(due) > 0 {
		sort.SliceStable(due, func(i, j int) bool {
			if due[i].Queued != due[j].Queued {
				return due[i].Queued
			}
			return due[i].NextRunAt < due[j].NextRunAt
		})
		run := e.newRun(wf, due[0].Name, due[0].Type, kt.PhaseExecuting)
		x := e.newExec(ctx, wf, prog, &run)
		if due[0].Type == kt.HandlerTask {
			return true, x.task(&due[0])
		}
		return true, x.producer(&due[0])
	}
	return false, nil
}

func (e *Engine) newRun(wf kt.Workflow, handler string, typ kt.HandlerType, phase kt.Phase) kt.Run {
	now := e.nowMs()
	return kt.Run{ID: newID(), Workflow: wf.Name, Version: wf.ActiveVersion, Handler: handler, HandlerType: typ,
		Phase: phase, Status: kt.StatusActive, CreatedAt: now, UpdatedAt: now}
}

func (e *Engine) limits() script.Limits {
	return script.Limits{Timeout: e.policy.HandlerTimeout, MemoryLimit: e.policy.MemoryLimit}
}

func set(list []string) map[string]bool {
	m := map[string]bool{}
	for _, s := range list {
		m[s] = true
	}
	return m
}

// consumerOf maps each topic to the consumer that subscribes to it.
func consumerOf(d script.Declaration) map[string]string {
	m := map[string]string{}
	for name, c := range d.Consumers {
		for _, t := range c.Subscribe {
			m[t] = name
		}
	}
	return m
}

func checkSize(what string, raw json.RawMessage) error {
	if len(raw) > MaxJSONBytes {
		return kt.Errorf(kt.ClassLogic, "%s is %d bytes, more than the limit of %d bytes; keep it small and store references", what, len(raw), MaxJSONBytes)
	}
	return nil
}
