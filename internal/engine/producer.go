package engine

import (
	"encoding/json"
	"fmt"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/schedule"
	"github.com/keep-run/keep/internal/store"
)

// producer runs a producer; hrow is the handler's row when the caller has
// just read it, nil to read it here.
func (x *runExec) producer(hrow *kt.Handler) (err error) {
	defer func() { x.finished(err) }()
	x.phaseNote(string(x.run.Phase), "producer "+x.run.Handler+" started")
	if hrow, err = x.e.handlerRowOf(x.ctx, x.wf.Name, x.run.Handler, hrow); err != nil {
		return err
	}
	decl := x.prog.Decl.Producers[x.run.Handler]
	h := x.host(phaseProducer)
	h.allowPublish, h.inputByKey, h.knownInputs = set(decl.Publishes), map[string]string{}, map[string]bool{}
	out, err := x.invoke(h, hrow.State)
	if err == nil {
		err = checkSize("the producer's returned state", out.Value)
	}
	if err != nil {
		return x.fail(err)
	}
	sched, err := schedule.Parse(decl.Schedule)
	if err != nil {
		return x.fail(kt.Errorf(kt.ClassLogic, "producer %s: %v", x.run.Handler, err))
	}
	summary := fmt.Sprintf("%d inputs registered, %d events published", len(h.inputs), len(h.publishes))
	return x.e.update(x.ctx, x.wf.Name, func(tx store.Tx) error {
		if err := x.commitProduced(tx, h); err != nil {
			return err
		}
		return x.commitScheduled(tx, out.Value, sched, summary)
	})
}

// commitProduced writes what a producer registered and published, inside
// its commit: new inputs with their first attempt, events with the input
// (and its attempt) that caused them.
func (x *runExec) commitProduced(tx store.Tx, h *host) error {
	now := x.e.nowMs()
	attempts := map[string]int{}
	for _, in := range h.inputs {
		if err := putItem(tx, in); err != nil {
			return err
		}
		if in.CreatedBy == x.run.ID {
			if err := tx.ItemAttemptPut(kt.ItemAttempt{ItemID: in.ID, Attempt: 1, Status: kt.ItemPending, Version: x.run.Version, StartedAt: now, UpdatedAt: now}); err != nil {
				return err
			}
		}
		attempts[in.ID] = in.CurrentAttempt
	}
	_, err := x.insertPublishes(tx, h.publishes, func(p publishReq) ([]string, int, error) {
		attempt, ok := attempts[p.InputID]
		if !ok {
			in, err := tx.InputGet(p.InputID)
			if err != nil {
				return nil, 0, err
			}
			attempt = in.CurrentAttempt
		}
		return []string{p.InputID}, attempt, nil
	})
	return err
}

// commitScheduled ends a producer or task run inside its commit: the new
// state saved, the next due time set, the run committed. Coalescing: whatever
// came due while the run executed collapses into one next run.
func (x *runExec) commitScheduled(tx store.Tx, state json.RawMessage, sched schedule.Schedule, summary string) error {
	run, now := x.run, x.e.nowMs()
	hrow, err := tx.HandlerGet(x.wf.Name, run.Handler)
	if err != nil {
		return err
	}
	if state != nil {
		hrow.State = state
	}
	hrow.Queued, hrow.NextRunAt, hrow.UpdatedAt = false, sched.Next(x.e.now()).UnixMilli(), now
	if err := tx.HandlerPut(hrow); err != nil {
		return err
	}
	return x.committed(tx, summary)
}

// committed marks the run committed, inside its commit transaction.
func (x *runExec) committed(tx store.Tx, summary string) error {
	if err := advance(x.run, kt.PhaseCommitted); err != nil {
		return err
	}
	now := x.e.nowMs()
	x.tr.add(TraceEntry{At: now, Kind: "phase", Phase: "committed", Text: summary})
	x.run.Status, x.run.Trace, x.run.UpdatedAt, x.run.FinishedAt, x.run.ErrorClass, x.run.ErrorMessage = kt.StatusCommitted, x.tr.json(), now, now, "", ""
	if asked := x.run.Action; asked != "" {
		// A person's decision came in while this step was under way
		// (takeDecision), and the step found the write applied: proof
		// wins, the run completes, and the decision log says so.
		x.run.Action = ""
		if err := logDecision(WithActor(x.ctx, "keep"), tx, kt.Decision{Workflow: x.run.Workflow, RunID: x.run.ID, Action: string(asked), At: now,
			Detail: fmt.Sprintf("not carried out: keep found the write applied before %s could be, so run %s completed (proof wins)", asked, x.run.ID)}); err != nil {
			return err
		}
	}
	return putRun(tx, x.run)
}

// insertPublishes writes a run's buffered publishes at commit (last write
// wins), with caused_by and attempt from cause, and marks the consumers of
// the topics dirty. It returns the handlers it marked.
func (x *runExec) insertPublishes(tx store.Tx, reqs []publishReq, cause func(publishReq) ([]string, int, error)) (map[string]bool, error) {
	wf, runID, now := x.wf.Name, x.run.ID, x.e.nowMs()
	subscribers := consumerOf(x.prog.Decl)
	dirty := map[string]bool{}
	for _, p := range reqs {
		causedBy, attempt, err := cause(p)
		if err != nil {
			return nil, err
		}
		ev := kt.Event{Workflow: wf, Topic: p.Topic, MessageID: p.MessageID, Payload: p.Payload, CreatedBy: runID,
			CausedBy: causedBy, Attempt: attempt, CreatedAt: now, UpdatedAt: now}
		if _, err := tx.EventPublish(&ev); err != nil {
			return nil, err
		}
		if c, ok := subscribers[p.Topic]; ok {
			dirty[c] = true
		}
	}
	return dirty, markDirty(tx, wf, dirty, now)
}

func markDirty(tx store.Tx, wf string, names map[string]bool, now int64) error {
	for n := range names {
		h, err := tx.HandlerGet(wf, n)
		if err != nil {
			return err
		}
		h.Dirty, h.UpdatedAt = true, now
		if err := tx.HandlerPut(h); err != nil {
			return err
		}
	}
	return nil
}
