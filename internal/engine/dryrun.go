package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// DryRunResult is what a failed consumer run does on a proposed version.
type DryRunResult struct {
	// Write is "tool.method" of the write mutate asked for ("" for none).
	Write string
	// Identity is that write's identity key (empty without a write).
	Identity string
	// Supported is false for a run of no known kind.
	Supported bool
	// Replayed is what ran again, as the retry will run it: "next" (the
	// write is done), "mutate" (the retry resumes in mutating, on the
	// same selection: a write it had chosen must be the same write),
	// "prepare" (afresh),
	// "producer" or "task" (from the start, up to its first new write).
	Replayed string
}

// DryRun replays a failed consumer run on a proposed script (issue 17, the
// Maintainer's last check): prepare runs, mutate's write is
// captured and never sent, every read answered from what the failed run
// read, and nothing is stored. It returns the write
// the repaired run would make; an error is the script's failure on it.
func (e *Engine) DryRun(ctx context.Context, workflow, runID, src string) (DryRunResult, error) {
	reads := &recordedReads{}
	res, err := e.dryRun(ctx, workflow, runID, src, reads)
	if miss := reads.missErr(); miss != nil {
		// Whatever the script made of the refused read, keep cannot tell
		// what it would do: the read is the answer.
		return res, miss
	}
	return res, err
}

// dryRun reads the failed run and replays it on src by its kind.
func (e *Engine) dryRun(ctx context.Context, workflow, runID, src string, reads *recordedReads) (DryRunResult, error) {
	var wf kt.Workflow
	var run kt.Run
	var hrow kt.Handler
	if err := e.store.View(ctx, func(tx store.Tx) error {
		var err error
		if wf, err = tx.WorkflowGet(workflow); err != nil {
			return err
		}
		if run, err = tx.RunGet(runID); err != nil {
			return err
		}
		hrow, err = tx.HandlerGet(workflow, run.Handler)
		return err
	}); err != nil {
		return DryRunResult{}, err
	}
	pol, err := e.PolicyFor(wf)
	if err != nil {
		return DryRunResult{}, err
	}
	prog, err := script.Compile("dry-run.js", src)
	if err != nil {
		return DryRunResult{Supported: true}, err
	}
	// Every read is answered from what the failed run read (issue 22):
	// a read it did not make ends the dry run; nothing reaches the world.
	*reads = *readsOf(run.Trace)
	x := &runExec{e: e, ctx: ctx, wf: wf, prog: prog, run: &run, tr: newTrace("dry run", e.NowMs()), reg: e.connectorsOf(wf), pol: pol, reads: reads}
	switch run.HandlerType {
	case kt.HandlerTask:
		return x.dryTask(hrow)
	case kt.HandlerProducer:
		return x.dryProducer(hrow)
	}
	return x.dryConsumer(hrow)
}

// dryTask runs an item script from the start again: items are read,
// never written; writes the ledger has applied replay; the first new write
// stops the replay, which then counts as reaching it.
func (x *runExec) dryTask(hrow kt.Handler) (DryRunResult, error) {
	x.dry = true
	h := x.host(phaseTask)
	h.task = &taskState{}
	res := DryRunResult{Supported: true, Replayed: "task"}
	_, err := x.invoke(h, hrow.State)
	var dw *errDryWrite
	if errors.As(err, &dw) {
		res.Write, res.Identity = dw.write, dw.identity
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("the task: %w", err)
	}
	return res, nil
}

// dryProducer runs a producer: it registers and publishes into its host
// and commits at the end, so run, its collections dropped, it stores
// nothing.
func (x *runExec) dryProducer(hrow kt.Handler) (DryRunResult, error) {
	h := x.host(phaseProducer)
	h.allowPublish, h.inputByKey, h.knownInputs = set(x.prog.Decl.Producers[x.run.Handler].Publishes), map[string]string{}, map[string]bool{}
	res := DryRunResult{Supported: true, Replayed: "producer"}
	if _, err := x.invoke(h, hrow.State); err != nil {
		return res, fmt.Errorf("the producer: %w", err)
	}
	return res, nil
}

// dryConsumer replays a consumer run where its retry resumes, by the
// engine's one rule (resumeAt, which Engine.retry follows too): past the
// write, only next runs again; resuming in mutating, mutate runs again on
// the same selection; otherwise the run prepares afresh, its pinned events
// released. It works on a copy of the run.
func (x *runExec) dryConsumer(hrow kt.Handler) (DryRunResult, error) {
	run := *x.run
	dry := run
	x.run = &dry
	step, _, _, err := x.e.resumeOf(x.ctx, run)
	if err != nil {
		return DryRunResult{}, err
	}
	res := DryRunResult{Supported: true, Replayed: step.replayed()}
	dv := x.declView()
	switch step {
	case resumeNext:
		return res, x.dryNext(dv, run)
	case resumeMutate, resumeReconcile:
		return x.e.dryMutate(x, dv, run.PrepareResult, nil, &res)
	}
	return x.dryPrepare(dv, hrow, &res)
}

// dryNext runs next on the run's recorded PrepareResult and write; its
// publishes are collected, never stored.
func (x *runExec) dryNext(dv declView, run kt.Run) error {
	if !x.prog.Decl.Consumers[run.Handler].Next {
		return nil
	}
	h := x.host(phaseNext)
	h.decl, h.allowPublish = dv, dv.publishes
	mr := run.MutationResult
	if len(mr) == 0 {
		mr = json.RawMessage(`{"status":"none"}`)
	}
	if _, err := x.invoke(h, preparedArg(run.PrepareResult), mr); err != nil {
		return fmt.Errorf("next: %w", err)
	}
	return nil
}

// dryPrepare runs prepare afresh (the run's pinned events released) and
// mutate on what it selects, with the write captured.
func (x *runExec) dryPrepare(dv declView, hrow kt.Handler, res *DryRunResult) (DryRunResult, error) {
	dry := x.run
	released := dry.ID
	dry.Phase, dry.PrepareResult, dry.MutationResult = kt.PhasePreparing, nil, nil
	h := x.host(phasePrepare)
	h.decl, h.released = dv, released
	out, err := x.invoke(h, hrow.State)
	if err != nil {
		return *res, fmt.Errorf("prepare: %w", err)
	}
	pr, err := DecodePrepareResult(out.Value)
	if err != nil {
		return *res, fmt.Errorf("prepare: %w", err)
	}
	if len(pr.Reservations) == 0 || !x.prog.Decl.Consumers[dry.Handler].Mutate {
		return *res, nil // it succeeds without a write
	}
	var reserve []kt.Event
	var resErr error
	if err := x.e.store.View(x.ctx, func(tx store.Tx) error {
		var err error
		reserve, resErr, err = checkReservations(eventsOf(tx, x.wf.Name), dry, pr, dv, x.seenPending)
		return err
	}); err != nil {
		return *res, err
	}
	if resErr != nil {
		return *res, fmt.Errorf("prepare's reservations: %w", resErr)
	}
	return x.e.dryMutate(x, dv, out.Value, reserve, res)
}

// dryMutate runs mutate with the write captured, and names the write.
func (e *Engine) dryMutate(x *runExec, dv declView, prepared json.RawMessage, reserve []kt.Event, res *DryRunResult) (DryRunResult, error) {
	hm := x.host(phaseMutate)
	hm.decl = dv
	if _, err := x.invoke(hm, preparedArg(prepared)); err != nil && !errors.Is(err, script.ErrSuspend) {
		return *res, fmt.Errorf("mutate: %w", err)
	}
	if hm.captured == nil {
		return *res, nil
	}
	call := hm.captured
	m, err := x.reg.Method(call.Tool, call.Method)
	if err != nil {
		return *res, err
	}
	var unit []string
	if err := e.store.View(x.ctx, func(tx store.Tx) error {
		evs := reserve
		if evs == nil {
			var err error
			if evs, err = tx.EventsReservedBy(x.run.ID); err != nil {
				return err
			}
		}
		var err error
		unit, err = UnitOfWork(tx, *x.run, evs)
		return err
	}); err != nil {
		return *res, err
	}
	identity, _ := m.Split(call.Args)
	subkey, _ := call.Args["subkey"].(string)
	res.Write = call.Tool + "." + call.Method
	res.Identity = Identity{Workflow: x.run.Workflow, Handler: x.run.Handler, Tool: call.Tool, Method: m.Name, Params: identity, Subkey: subkey}.ConsumerKey(unit)
	return *res, nil
}
