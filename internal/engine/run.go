package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/schedule"
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
		return true, e.execConsumer(ctx, wf, prog, &run, &c.h)
	}
	if len(due) > 0 {
		sort.SliceStable(due, func(i, j int) bool {
			if due[i].Queued != due[j].Queued {
				return due[i].Queued
			}
			return due[i].NextRunAt < due[j].NextRunAt
		})
		run := e.newRun(wf, due[0].Name, due[0].Type, kt.PhaseExecuting)
		if due[0].Type == kt.HandlerTask {
			return true, e.execTask(ctx, wf, prog, &run, &due[0])
		}
		return true, e.execProducer(ctx, wf, prog, &run, &due[0])
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

// ---------- producers ----------

// execProducer runs a producer; hrow is the handler's row when the caller
// has just read it, nil to read it here.
func (e *Engine) execProducer(ctx context.Context, wf kt.Workflow, prog *script.Program, run *kt.Run, hrow *kt.Handler) (err error) {
	defer func() {
		if err == nil {
			e.runFinished(run)
		}
	}()
	tr := loadTrace(run.Trace)
	tr.add(TraceEntry{At: e.nowMs(), Kind: "phase", Phase: string(run.Phase), Text: "producer " + run.Handler + " started"})
	if hrow, err = e.handlerRowOf(ctx, wf.Name, run.Handler, hrow); err != nil {
		return err
	}
	decl := prog.Decl.Producers[run.Handler]
	h := &host{e: e, ctx: ctx, run: run, phase: "producer", tr: tr, handler: run.Handler, allowPublish: set(decl.Publishes),
		inputByKey: map[string]string{}, knownInputs: map[string]bool{}}
	out, err := e.invoke(prog, script.Invocation{Kind: kt.HandlerProducer, Name: run.Handler, Phase: "handler",
		Args: []json.RawMessage{hrow.State}, Tools: e.registry.Tools(), Host: h.call, Limits: e.limits()})
	if err == nil {
		err = checkSize("the producer's returned state", out.Value)
	}
	if err != nil {
		return e.fail(ctx, wf, run, tr, err)
	}
	sched, err := schedule.Parse(decl.Schedule)
	if err != nil {
		return e.fail(ctx, wf, run, tr, kt.Errorf(kt.ClassLogic, "producer %s: %v", run.Handler, err))
	}
	subscribers := consumerOf(prog.Decl)
	now := e.nowMs()
	return e.update(ctx, wf.Name, func(tx store.Tx) error {
		attempts := map[string]int{}
		for _, in := range h.inputs {
			if err := putItem(tx, in); err != nil {
				return err
			}
			if in.CreatedBy == run.ID {
				if err := tx.ItemAttemptPut(kt.ItemAttempt{ItemID: in.ID, Attempt: 1, Status: kt.ItemPending, Version: run.Version, StartedAt: now, UpdatedAt: now}); err != nil {
					return err
				}
			}
			attempts[in.ID] = in.CurrentAttempt
		}
		_, err := insertPublishes(tx, wf.Name, run.ID, h.publishes, subscribers, now, func(p publishReq) ([]string, int, error) {
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
		if err != nil {
			return err
		}
		return e.commitScheduled(tx, wf.Name, run, tr, out.Value, sched, now,
			fmt.Sprintf("%d inputs registered, %d events published", len(h.inputs), len(h.publishes)))
	})
}

// commitScheduled ends a producer or task run inside its commit: the new
// state saved, the next due time set, the run committed. Coalescing: whatever
// came due while the run executed collapses into one next run.
func (e *Engine) commitScheduled(tx store.Tx, wf string, run *kt.Run, tr *trace, state json.RawMessage, sched schedule.Schedule, now int64, summary string) error {
	hrow, err := tx.HandlerGet(wf, run.Handler)
	if err != nil {
		return err
	}
	if state != nil {
		hrow.State = state
	}
	hrow.Queued, hrow.NextRunAt, hrow.UpdatedAt = false, sched.Next(e.now()).UnixMilli(), now
	if err := tx.HandlerPut(hrow); err != nil {
		return err
	}
	if err := advance(run, kt.PhaseCommitted); err != nil {
		return err
	}
	tr.add(TraceEntry{At: now, Kind: "phase", Phase: "committed", Text: summary})
	run.Status, run.Trace, run.UpdatedAt, run.FinishedAt, run.ErrorClass, run.ErrorMessage = kt.StatusCommitted, tr.json(), now, now, "", ""
	return putRun(tx, *run)
}

// insertPublishes writes a run's buffered publishes at commit (last write
// wins), with caused_by and attempt from cause, and marks the consumers of
// the topics dirty. It returns the handlers it marked.
func insertPublishes(tx store.Tx, wf, runID string, reqs []publishReq, subscribers map[string]string, now int64,
	cause func(publishReq) ([]string, int, error)) (map[string]bool, error) {
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

// ---------- consumers ----------

// PrepareResult is what prepare returns (ch 06).
type PrepareResult struct {
	SelectionID  string          `json:"selectionId,omitempty"`
	Reservations []Reservation   `json:"reservations"`
	Data         json.RawMessage `json:"data,omitempty"`
	UI           json.RawMessage `json:"ui,omitempty"`
	WakeAt       any             `json:"wakeAt,omitempty"`
}

// Reservation names events of one topic.
type Reservation struct {
	Topic string   `json:"topic"`
	IDs   []string `json:"ids"`
}

// DecodePrepareResult parses and checks the shape of a PrepareResult.
func DecodePrepareResult(raw json.RawMessage) (PrepareResult, error) {
	var pr PrepareResult
	if len(raw) == 0 {
		return pr, kt.Errorf(kt.ClassLogic, "prepare returned nothing; it must return { reservations: [...], data: {...} }")
	}
	var shape map[string]json.RawMessage
	if err := json.Unmarshal(raw, &shape); err != nil {
		return pr, kt.Errorf(kt.ClassLogic, "prepare must return an object { reservations, data }, got %s", snippetJSON(raw))
	}
	if r, ok := shape["reservations"]; ok && string(r) != "null" {
		var list []json.RawMessage
		if err := json.Unmarshal(r, &list); err != nil {
			return pr, kt.Errorf(kt.ClassLogic, "prepare: reservations must be an array of { topic, ids }, got %s", snippetJSON(r))
		}
		for i, item := range list {
			var res struct {
				Topic any   `json:"topic"`
				IDs   []any `json:"ids"`
			}
			if err := json.Unmarshal(item, &res); err != nil {
				return pr, kt.Errorf(kt.ClassLogic, "prepare: reservations[%d] must be { topic, ids: [messageId, ...] }", i)
			}
			topic, ok := res.Topic.(string)
			if !ok || topic == "" {
				return pr, kt.Errorf(kt.ClassLogic, "prepare: reservations[%d].topic must be a topic name", i)
			}
			out := Reservation{Topic: topic}
			for j, id := range res.IDs {
				s, ok := id.(string)
				if !ok {
					return pr, kt.Errorf(kt.ClassLogic, "prepare: reservations[%d].ids[%d] must be a messageId string", i, j)
				}
				out.IDs = append(out.IDs, s)
			}
			pr.Reservations = append(pr.Reservations, out)
		}
	}
	pr.Data, pr.UI = shape["data"], shape["ui"]
	if w, ok := shape["wakeAt"]; ok {
		_ = json.Unmarshal(w, &pr.WakeAt)
	}
	if s, ok := shape["selectionId"]; ok {
		_ = json.Unmarshal(s, &pr.SelectionID)
	}
	return pr, nil
}

func snippetJSON(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// wakeTime reads wakeAt (ms since epoch, or an ISO date) and clamps it to [30 s, 24 h] from now.
func (e *Engine) wakeTime(v any) int64 {
	now := e.now()
	var t time.Time
	switch w := v.(type) {
	case float64:
		t = time.UnixMilli(int64(w))
	case string:
		p, err := time.Parse(time.RFC3339, w)
		if err != nil {
			return 0
		}
		t = p
	default:
		return 0
	}
	if min := now.Add(30 * time.Second); t.Before(min) {
		t = min
	}
	if max := now.Add(24 * time.Hour); t.After(max) {
		t = max
	}
	return t.UnixMilli()
}

// execConsumer runs a consumer from its run's phase on. hrow is the
// handler's row when the caller has just read it, nil to read it here.
func (e *Engine) execConsumer(ctx context.Context, wf kt.Workflow, prog *script.Program, run *kt.Run, hrow *kt.Handler) (err error) {
	defer func() {
		if err == nil {
			e.runFinished(run)
		}
	}()
	tr := loadTrace(run.Trace)
	decl, ok := prog.Decl.Consumers[run.Handler]
	if !ok {
		return e.fail(ctx, wf, run, tr, kt.Errorf(kt.ClassLogic, "consumer %s is not declared by version %d of the script", run.Handler, run.Version))
	}
	dv := declView{publishes: set(decl.Publishes), subscribe: set(decl.Subscribe)}

	// reserve holds events selected by prepare and not yet written as reserved.
	var reserve []kt.Event
	if run.Phase == kt.PhasePreparing {
		tr.add(TraceEntry{At: e.nowMs(), Kind: "phase", Phase: "preparing", Text: "consumer " + run.Handler + " started"})
		if hrow, err = e.handlerRowOf(ctx, wf.Name, run.Handler, hrow); err != nil {
			return err
		}
		h := &host{e: e, ctx: ctx, run: run, phase: "prepare", tr: tr, decl: dv, handler: run.Handler}
		out, err := e.invoke(prog, script.Invocation{Kind: kt.HandlerConsumer, Name: run.Handler, Phase: "prepare",
			Args: []json.RawMessage{hrow.State}, Tools: e.registry.Tools(), Host: h.call, Limits: e.limits()})
		if err == nil {
			err = checkSize("the PrepareResult", out.Value)
		}
		if err != nil {
			return e.fail(ctx, wf, run, tr, err)
		}
		pr, err := DecodePrepareResult(out.Value)
		if err != nil {
			return e.fail(ctx, wf, run, tr, err)
		}
		next := kt.PhasePrepared
		if len(pr.Reservations) == 0 || !decl.Mutate {
			next = kt.PhaseEmitting
			run.MutationResult = json.RawMessage(`{"status":"none"}`)
		}
		// The reservations are checked now and written in the run's next
		// transaction (with in_flight, or with the commit): one fsync less per run.
		var resErr error
		if err := e.store.View(ctx, func(tx store.Tx) error {
			var err error
			reserve, resErr, err = checkReservations(tx, wf.Name, run, pr, dv)
			return err
		}); err != nil {
			return err
		}
		if resErr != nil {
			return e.fail(ctx, wf, run, tr, resErr)
		}
		if err := advance(run, next); err != nil {
			return err
		}
		run.PrepareResult = out.Value
		tr.add(TraceEntry{At: e.nowMs(), Kind: "phase", Phase: string(next), Text: fmt.Sprintf("prepared: %d events to reserve", len(reserve))})
	}

	if run.Phase == kt.PhasePrepared || run.Phase == kt.PhaseMutating {
		h := &host{e: e, ctx: ctx, run: run, phase: "mutate", tr: tr, decl: dv, handler: run.Handler}
		_, err := e.invoke(prog, script.Invocation{Kind: kt.HandlerConsumer, Name: run.Handler, Phase: "mutate",
			Args: []json.RawMessage{preparedArg(run.PrepareResult)}, Tools: e.registry.Tools(), Host: h.call, Limits: e.limits()})
		if err != nil {
			if len(reserve) > 0 {
				// A failure inside mutate keeps the selection pinned (SPEC §4):
				// after a transient, permission or precondition failure the
				// retry re-runs mutate with the same PrepareResult; after a
				// logic failure the inputs show what is stuck, Skip skips them
				// and a repair releases them at a fresh prepare.
				if aerr := advance(run, kt.PhaseMutating); aerr != nil {
					return aerr
				}
				evs := reserve
				if werr := e.store.Update(ctx, func(tx store.Tx) error { return writeReservations(tx, run, evs, e.nowMs()) }); werr != nil {
					return werr
				}
			}
			return e.fail(ctx, wf, run, tr, err)
		}
		if h.captured == nil {
			if err := advance(run, kt.PhaseEmitting); err != nil {
				return err
			}
			run.MutationResult = json.RawMessage(`{"status":"none"}`)
		} else {
			proceed, err := e.executeMutation(ctx, wf, prog, run, tr, h.captured, reserve)
			reserve = nil
			if err != nil || !proceed {
				return err
			}
		}
	}
	if run.Phase == kt.PhaseMutated {
		if err := advance(run, kt.PhaseEmitting); err != nil {
			return err
		}
	}
	if run.Phase == kt.PhaseEmitting {
		return e.emit(ctx, wf, prog, run, tr, dv, reserve)
	}
	return nil
}

// checkReservations validates a PrepareResult's reservations (SPEC §4:
// subscribed topic, existing, pending, not reserved by another run) and
// returns the events to reserve. resErr is the script's mistake; err the store's.
func checkReservations(tx store.Tx, wf string, run *kt.Run, pr PrepareResult, dv declView) (evs []kt.Event, resErr, err error) {
	seen := map[int64]bool{}
	for _, res := range pr.Reservations {
		if !dv.subscribe[res.Topic] {
			return nil, kt.Errorf(kt.ClassLogic, "prepare reserved events of topic %q, which consumer %s does not subscribe to", res.Topic, run.Handler), nil
		}
		for _, id := range res.IDs {
			ev, err := tx.EventGet(wf, res.Topic, id)
			if errors.Is(err, kt.ErrNotFound) {
				return nil, kt.Errorf(kt.ClassLogic, "prepare reserved %s/%s, which does not exist; reserve messageIds that peek returned", res.Topic, id), nil
			}
			if err != nil {
				return nil, nil, err
			}
			if ev.Status != kt.EventPending {
				return nil, kt.Errorf(kt.ClassLogic, "prepare reserved %s/%s, which is already %s", res.Topic, id, ev.Status), nil
			}
			if ev.ReservedBy != "" && ev.ReservedBy != run.ID {
				return nil, kt.Errorf(kt.ClassLogic, "prepare reserved %s/%s, which run %s has reserved already", res.Topic, id, ev.ReservedBy), nil
			}
			if !seen[ev.ID] {
				seen[ev.ID] = true
				evs = append(evs, ev)
			}
		}
	}
	return evs, nil, nil
}

// writeReservations marks events as reserved by a run, inside a transition's transaction.
func writeReservations(tx store.Tx, run *kt.Run, evs []kt.Event, now int64) error {
	for _, ev := range evs {
		ev.ReservedBy, ev.UpdatedAt = run.ID, now
		if err := tx.EventUpdate(ev); err != nil {
			return err
		}
	}
	return nil
}

// preparedArg is what mutate and next receive: the PrepareResult as the script returned it.
func preparedArg(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

func (e *Engine) emit(ctx context.Context, wf kt.Workflow, prog *script.Program, run *kt.Run, tr *trace, dv declView, reserve []kt.Event) error {
	decl := prog.Decl.Consumers[run.Handler]
	mr := run.MutationResult
	if len(mr) == 0 {
		mr = json.RawMessage(`{"status":"none"}`)
	}
	var mstatus struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(mr, &mstatus)
	h := &host{e: e, ctx: ctx, run: run, phase: "next", tr: tr, decl: dv, handler: run.Handler, allowPublish: dv.publishes}
	var newState json.RawMessage
	if decl.Next {
		out, err := e.invoke(prog, script.Invocation{Kind: kt.HandlerConsumer, Name: run.Handler, Phase: "next",
			Args: []json.RawMessage{preparedArg(run.PrepareResult), mr}, Tools: e.registry.Tools(), Host: h.call, Limits: e.limits()})
		if err == nil {
			err = checkSize("the state returned by next", out.Value)
		}
		if err != nil {
			return e.fail(ctx, wf, run, tr, err)
		}
		newState = out.Value
	}
	pr, _ := DecodePrepareResult(run.PrepareResult)
	subscribers := consumerOf(prog.Decl)
	now := e.nowMs()
	return e.update(ctx, wf.Name, func(tx store.Tx) error {
		if err := writeReservations(tx, run, reserve, now); err != nil {
			return err
		}
		reserved, err := tx.EventsReservedBy(run.ID)
		if err != nil {
			return err
		}
		final := kt.EventConsumed
		if mstatus.Status == "skipped" {
			final = kt.EventSkipped
		}
		causes := map[string]bool{}
		attempt := 1
		nReserved := 0
		for _, ev := range reserved {
			if ev.Status != kt.EventPending {
				continue
			}
			nReserved++
			for _, c := range ev.CausedBy {
				causes[c] = true
			}
			if ev.Attempt > attempt {
				attempt = ev.Attempt
			}
			ev.Status, ev.UpdatedAt = final, now
			if err := tx.EventUpdate(ev); err != nil {
				return err
			}
		}
		causedBy := make([]string, 0, len(causes))
		for c := range causes {
			causedBy = append(causedBy, c)
		}
		sort.Strings(causedBy)
		dirty, err := insertPublishes(tx, wf.Name, run.ID, h.publishes, subscribers, now, func(publishReq) ([]string, int, error) {
			return causedBy, attempt, nil
		})
		if err != nil {
			return err
		}
		hrow, err := tx.HandlerGet(wf.Name, run.Handler)
		if err != nil {
			return err
		}
		if newState != nil {
			hrow.State = newState
		}
		if len(pr.Reservations) == 0 {
			hrow.Dirty = dirty[run.Handler]
		}
		hrow.WakeAt, hrow.UpdatedAt = e.wakeTime(pr.WakeAt), now
		if err := tx.HandlerPut(hrow); err != nil {
			return err
		}
		if err := advance(run, kt.PhaseCommitted); err != nil {
			return err
		}
		tr.add(TraceEntry{At: now, Kind: "phase", Phase: "committed", Text: fmt.Sprintf("%d events %s, %d published", nReserved, final, len(h.publishes))})
		run.Status, run.Trace, run.UpdatedAt, run.FinishedAt, run.ErrorClass, run.ErrorMessage = kt.StatusCommitted, tr.json(), now, now, "", ""
		if err := putRun(tx, *run); err != nil {
			return err
		}
		e.crashPoint(CrashInsideCommit)
		return nil
	})
}

// ---------- failures ----------

// maxErrorText bounds the error message kept on a run.
const maxErrorText = 4000

// fail records a failed run by the taxonomy of SPEC §6 and applies the reset rules of §4.
func (e *Engine) fail(ctx context.Context, wf kt.Workflow, run *kt.Run, tr *trace, cause error) error {
	if errors.Is(cause, script.ErrStopping) {
		// Not a failure of the run: keep is stopping. The run stays active
		// and is recovered like a crashed one at the next start.
		return cause
	}
	class := kt.ClassOf(cause)
	// The one way an error reaches the run, its card, the log and the page:
	// credentials masked, and no more than a person reads (a script once
	// threw a 20 MB message, stored twice and printed whole).
	msg := clip(redact.String(cause.Error()), maxErrorText)
	now := e.nowMs()
	run.ErrorClass, run.ErrorMessage, run.UpdatedAt, run.Action = class, msg, now, ""
	run.NextAttemptAt = 0
	var wait *approvalWait
	if errors.As(cause, &wait) {
		class, run.ErrorClass = kt.ClassPermission, ""
	}
	switch class {
	case kt.ClassTransient:
		run.Status = kt.StatusTransient
		if run.RetryCount < e.policy.TransientRetries {
			run.NextAttemptAt = now + config.Backoff(e.policy.TransientBackoff, e.policy.TransientBackoffMax, run.RetryCount+1).Milliseconds()
		} else {
			run.ErrorMessage = fmt.Sprintf("%s — gave up after %d automatic retries; try again or skip", msg, run.RetryCount)
		}
	case kt.ClassLogic:
		run.Status = kt.StatusFailedLogic
	case kt.ClassPermission, kt.ClassPrecondition:
		run.Status = kt.StatusApproval
	case kt.ClassIndeterminate:
		run.Status = kt.StatusReconciliation
	default:
		run.Status = kt.StatusFailedInternal
	}
	tr.add(TraceEntry{At: now, Kind: "error", Phase: string(run.Phase), Outcome: string(class), Text: msg})
	run.Trace = tr.json()
	e.log.Info("run failed", "workflow", wf.Name, "run", run.ID, "handler", run.Handler, "phase", run.Phase, "status", run.Status, "error", msg)
	return e.update(ctx, wf.Name, func(tx store.Tx) error {
		if run.HandlerType == kt.HandlerConsumer && releasesReservations(run, class) {
			if err := releaseReservations(tx, run.ID, now); err != nil {
				return err
			}
		}
		if run.Status == kt.StatusFailedInternal {
			w, err := tx.WorkflowGet(wf.Name)
			if err != nil {
				return err
			}
			w.Paused, w.PausedReason, w.UpdatedAt = true, "internal error in run "+run.ID+": "+msg, now
			if err := tx.WorkflowPut(w); err != nil {
				return err
			}
		}
		return putRun(tx, *run)
	})
}

// releasesReservations applies SPEC §4's reset rules: a failure before
// mutate lets the selection go (the retry prepares afresh); a logic failure
// keeps it pinned to the failed run, so its inputs show what is stuck and a
// person's Skip can skip exactly those events (a repair releases them).
func releasesReservations(run *kt.Run, class kt.ErrorClass) bool {
	if class == kt.ClassLogic {
		return false
	}
	switch run.Phase {
	case kt.PhasePreparing, kt.PhasePrepared:
		return true
	}
	return false
}

func releaseReservations(tx store.Tx, runID string, now int64) error {
	return updatePinned(tx, runID, now, func(ev *kt.Event) { ev.ReservedBy = "" })
}

// updatePinned applies change to every event a run still holds (pending and reserved by it).
func updatePinned(tx store.Tx, runID string, now int64, change func(*kt.Event)) error {
	evs, err := tx.EventsReservedBy(runID)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		if ev.Status != kt.EventPending {
			continue
		}
		change(&ev)
		ev.UpdatedAt = now
		if err := tx.EventUpdate(ev); err != nil {
			return err
		}
	}
	return nil
}

// reconcileCall builds the connector call of a ledger row.
func reconcileCall(m kt.Mutation) (connector.Call, error) {
	var args map[string]any
	if err := json.Unmarshal(m.Params, &args); err != nil {
		return connector.Call{}, err
	}
	return connector.Call{Args: args, IdempotencyKey: m.IdempotencyKey}, nil
}
