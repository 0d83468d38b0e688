package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

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

// decodePrepared is DecodePrepareResult, decoded once for the same bytes
// in a run (the result is only read by its callers).
func (x *runExec) decodePrepared(raw json.RawMessage) (PrepareResult, error) {
	if x.preparedRaw != nil && bytes.Equal(raw, x.preparedRaw) {
		return x.prepared, nil
	}
	pr, err := DecodePrepareResult(raw)
	if err == nil {
		// A copy: the bytes compared next time are the ones decoded.
		x.prepared, x.preparedRaw = pr, append(json.RawMessage(nil), raw...)
	}
	return pr, err
}

// reservesNothing says prepare selected no event: the run has nothing to do.
func (pr PrepareResult) reservesNothing() bool {
	for _, r := range pr.Reservations {
		if len(r.IDs) > 0 {
			return false
		}
	}
	return true
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

// consumer runs a consumer from its run's phase on. hrow is the handler's
// row when the caller has just read it, nil to read it here.
func (x *runExec) consumer(hrow *kt.Handler) (err error) {
	defer func() {
		// (Runs last.) A selection a person changed while prepare ran: the
		// run was never stored and nothing was sent; the consumer, still
		// dirty, prepares again at its next step.
		if errors.Is(err, errSelectionGone) {
			x.unrecorded = true
			x.e.log.Info("prepare again: a person changed the selection while the run prepared", "workflow", x.wf.Name, "handler", x.run.Handler, "why", err.Error())
			err = nil
		}
	}()
	defer func() { x.finished(err) }()
	run := x.run
	decl, ok := x.prog.Decl.Consumers[run.Handler]
	if !ok {
		return x.fail(kt.Errorf(kt.ClassLogic, "consumer %s is not declared by version %d of the script", run.Handler, run.Version))
	}
	dv := x.declView()
	// The events prepare selects are held (x.reserve) and written as
	// reserved in the run's next write: with in_flight, with a wait or a
	// failure, or with the final commit.
	if run.Phase == kt.PhasePreparing {
		if done, err := x.prepare(hrow, dv, decl.Mutate); done || err != nil {
			return err
		}
	}
	if run.Phase == kt.PhasePrepared || run.Phase == kt.PhaseMutating {
		proceed, err := x.mutate(dv)
		if err != nil || !proceed {
			return err
		}
	}
	if run.Phase == kt.PhaseMutated {
		if err := advance(run, kt.PhaseEmitting); err != nil {
			return err
		}
	}
	if run.Phase == kt.PhaseEmitting {
		return x.emit(dv)
	}
	return nil
}

// prepare runs the prepare phase and checks its selection, which it holds
// for the run's next write (x.reserve); done says the run ended here (it
// failed, and the failure is recorded).
//
// A consumer that mutates has its mutate run in the same invocation of the
// sandbox when prepare reserves events (script.Invocation.Then: one round
// trip to the worker fewer per run, issue 25): the checks below are made
// when prepare's value reaches keep, before any of mutate's calls is
// served, and mutate goes on only when they pass and the run goes on to
// it; its outcome waits for mutate (x.mutated). Nothing durable happens
// between the two phases (the selection is written with the write's
// in_flight record), so this is the order the engine follows anyway.
func (x *runExec) prepare(hrow *kt.Handler, dv declView, mutates bool) (done bool, err error) {
	ps := x.startPhase(string(phasePrepare))
	defer func() { ps.end(x) }()
	run := x.run
	x.phaseNote("preparing", "consumer "+run.Handler+" started")
	if hrow, err = x.e.handlerRowOf(x.ctx, x.wf.Name, run.Handler, hrow); err != nil {
		return true, err
	}
	saw := *hrow
	x.rowRead = &saw
	h := x.host(phasePrepare)
	h.decl, h.ahead, x.ahead = dv, x.ahead, nil
	inv := x.invocation(h, hrow.State)
	var judged *preparedVerdict
	var hm *host
	var ms *phaseSpan
	taken := false
	if mutates {
		hm = x.host(phaseMutate)
		hm.decl = dv
		then := x.invocation(hm)
		inv.Then = &then
		inv.Next = func(value json.RawMessage) bool {
			h.preparePeeked()
			judged = x.judgePrepared(script.Outcome{Value: value}, nil, dv, mutates)
			if !judged.goesOn() {
				return false
			}
			if judged.err = x.takePrepared(judged); judged.err != nil {
				return false
			}
			taken = true
			// mutate's calls are under its own span from here.
			ps.end(x)
			ps, ms = nil, x.startPhase(string(phaseMutate))
			return true
		}
	}
	out, err := x.e.invoke(x.prog, inv)
	if judged == nil {
		h.preparePeeked()
		judged = x.judgePrepared(out, err, dv, mutates)
	}
	switch {
	case judged.err != nil:
		return true, judged.err
	case judged.failure != nil:
		return true, x.fail(judged.failure)
	case out.Then != nil:
		x.mutated = &fusedMutate{host: hm, err: out.ThenErr, span: ms}
		return false, nil
	case taken:
		// mutate was let go on but did not run with prepare (the sandbox
		// said nothing of it): it runs on its own.
		ms.end(x)
		return false, nil
	}
	return false, x.takePrepared(judged)
}

// preparedVerdict is what prepare's value comes to: the run's next phase
// and the events it reserves, the script's mistake (failure), or the
// store's error (err; errSelectionGone among them).
type preparedVerdict struct {
	value   json.RawMessage
	next    kt.Phase
	reserve []kt.Event
	failure error
	err     error
}

// goesOn says the run goes on to mutate.
func (v *preparedVerdict) goesOn() bool {
	return v.err == nil && v.failure == nil && v.next == kt.PhasePrepared
}

// judgePrepared checks what prepare returned: its size, its shape and its
// selection (checkSelection). It changes nothing of the run.
func (x *runExec) judgePrepared(out script.Outcome, err error, dv declView, mutates bool) *preparedVerdict {
	v := &preparedVerdict{value: out.Value}
	if err == nil {
		err = checkSize("the PrepareResult", out.Value)
	}
	var pr PrepareResult
	if err == nil {
		pr, err = x.decodePrepared(out.Value)
	}
	if err != nil {
		v.failure = err
		return v
	}
	v.next = kt.PhasePrepared
	if pr.reservesNothing() || !mutates {
		v.next = kt.PhaseEmitting
	}
	v.reserve, v.failure, v.err = x.checkSelection(pr, dv)
	return v
}

// takePrepared moves the run on from prepare as v says.
func (x *runExec) takePrepared(v *preparedVerdict) error {
	run := x.run
	if v.next == kt.PhaseEmitting {
		run.MutationResult = json.RawMessage(`{"status":"none"}`)
	}
	if err := advance(run, v.next); err != nil {
		return err
	}
	run.PrepareResult, x.reserve = v.value, v.reserve
	for _, ev := range v.reserve {
		x.noteInputs(ev.CausedBy...)
	}
	x.phaseNote(string(v.next), fmt.Sprintf("prepared: %d events to reserve", len(v.reserve)))
	return nil
}

// fusedMutate is mutate's invocation made with prepare's: its host (what
// it captured), its error, and its span, open.
type fusedMutate struct {
	host *host
	err  error
	span *phaseSpan
}

// mutate runs the mutate phase and the mutation it asked for; proceed says
// the run goes on to next.
func (x *runExec) mutate(dv declView) (proceed bool, err error) {
	run := x.run
	var h *host
	var ierr error
	if f := x.mutated; f != nil {
		// It ran with prepare (prepare's Invocation.Then).
		x.mutated = nil
		defer f.span.end(x)
		h, ierr = f.host, f.err
	} else {
		defer x.startPhase(string(phaseMutate)).end(x)
		h = x.host(phaseMutate)
		h.decl = dv
		_, ierr = x.invoke(h, preparedArg(run.PrepareResult))
	}
	if ierr != nil {
		if run.Phase == kt.PhasePrepared {
			// A failure inside mutate keeps the selection pinned (SPEC §4),
			// written with the failure: after a transient, permission or
			// precondition failure the retry re-runs mutate with the same
			// PrepareResult; after a logic failure the inputs show what is
			// stuck, Skip skips them and a repair releases them at a fresh
			// prepare.
			if aerr := advance(run, kt.PhaseMutating); aerr != nil {
				return false, aerr
			}
		}
		return false, x.fail(ierr)
	}
	if h.captured == nil {
		run.MutationResult = json.RawMessage(`{"status":"none"}`)
		return true, advance(run, kt.PhaseEmitting)
	}
	return x.executeMutation(h.captured)
}

// checkSelection checks prepare's selection (checkReservations). A
// selection of events prepare read pending in this run (a peek's page,
// getByIds) is checked against the copies it read, without reading them
// again: each is read once more under the lock by the write that reserves
// it (writeReservations), which finds one a person skipped or another run
// took meanwhile (errSelectionGone: prepare again), as a read here would
// have. Any other selection is read: it names an event prepare did not
// see pending, and the script's mistake is told by what the event is now.
func (x *runExec) checkSelection(pr PrepareResult, dv declView) (reserve []kt.Event, resErr, err error) {
	if seen, ok := x.selectionSeen(pr); ok {
		return checkReservations(seen, x.run, pr, dv, x.seenPending)
	}
	// Each event is checked on its own, and again by the write that
	// reserves it: no snapshot needed, and the reads go together.
	err = x.e.store.View(store.NoSnapshot(x.ctx), func(tx store.Tx) error {
		store.Prefetch(tx, func(tx store.Tx) {
			for _, res := range pr.Reservations {
				for _, id := range res.IDs {
					if dv.subscribe[res.Topic] {
						_, _ = tx.EventGet(x.wf.Name, res.Topic, id)
					}
				}
			}
		})
		var err error
		reserve, resErr, err = checkReservations(eventsOf(tx, x.wf.Name), x.run, pr, dv, x.seenPending)
		return err
	})
	return reserve, resErr, err
}

// selectionSeen gives the events of prepare's selection as prepare read
// them, when it read every one of them pending.
func (x *runExec) selectionSeen(pr PrepareResult) (eventLookup, bool) {
	for _, res := range pr.Reservations {
		for _, id := range res.IDs {
			if _, ok := x.seenEvents[seenKey{res.Topic, id}]; !ok {
				return nil, false
			}
		}
	}
	return func(topic, id string) (kt.Event, error) {
		return x.seenEvents[seenKey{topic, id}], nil
	}, true
}

// eventLookup finds an event of the run's workflow by topic and message
// id (kt.ErrNotFound when there is none).
type eventLookup func(topic, messageID string) (kt.Event, error)

// eventsOf looks events of wf up in tx.
func eventsOf(tx store.Tx, wf string) eventLookup {
	return func(topic, id string) (kt.Event, error) { return tx.EventGet(wf, topic, id) }
}

// checkReservations validates a PrepareResult's reservations (SPEC §4:
// subscribed topic, existing, pending, not reserved by another run) and
// returns the events to reserve. resErr is the script's mistake; err the store's.
//
// seen are the events the run read pending: one of them that is pending
// no more was taken or skipped while prepare ran, which is not the
// script's mistake (errSelectionGone: prepare again). That is told by
// what prepare read, not by the event's time: a person's Skip is stamped
// when its request came in, which may be before the run began.
func checkReservations(get eventLookup, run *kt.Run, pr PrepareResult, dv declView, seen map[int64]bool) (evs []kt.Event, resErr, err error) {
	taken := map[int64]bool{}
	for _, res := range pr.Reservations {
		if !dv.subscribe[res.Topic] {
			return nil, kt.Errorf(kt.ClassLogic, "prepare reserved events of topic %q, which consumer %s does not subscribe to", res.Topic, run.Handler), nil
		}
		for _, id := range res.IDs {
			ev, err := get(res.Topic, id)
			if errors.Is(err, kt.ErrNotFound) {
				return nil, kt.Errorf(kt.ClassLogic, "prepare reserved %s/%s, which does not exist; reserve messageIds that peek returned", res.Topic, id), nil
			}
			if err != nil {
				return nil, nil, err
			}
			if ev.Status != kt.EventPending {
				if seen[ev.ID] || ev.UpdatedAt >= run.CreatedAt {
					// It was pending when this run began: a person skipped it
					// while prepare ran. Not the script's mistake: prepare again.
					return nil, nil, fmt.Errorf("%w: %s/%s is %s now", errSelectionGone, res.Topic, id, ev.Status)
				}
				return nil, kt.Errorf(kt.ClassLogic, "prepare reserved %s/%s, which is already %s", res.Topic, id, ev.Status), nil
			}
			if ev.ReservedBy != "" && ev.ReservedBy != run.ID {
				return nil, kt.Errorf(kt.ClassLogic, "prepare reserved %s/%s, which run %s has reserved already", res.Topic, id, ev.ReservedBy), nil
			}
			if !taken[ev.ID] {
				taken[ev.ID] = true
				evs = append(evs, ev)
			}
		}
	}
	return evs, nil, nil
}

// errSelectionGone says an event prepare selected was skipped (or taken)
// by a person between prepare's read and the run's first write, which would
// reserve it: the run is dropped unrecorded — nothing of it was stored, and
// its write was not sent — and the consumer prepares again.
var errSelectionGone = errors.New("the events prepare selected changed before keep recorded the selection")

// writeReservations marks events as reserved by a run, inside a
// transition's transaction, each only while it is still as the run's copy
// (store.Tx.EventReserve): one skipped or reserved since is never written
// back as pending, and one changed in any way since the copy was read (a
// person's Reprocess started a new attempt, a publish merged new content)
// ends the write too (store.ErrEventChanged, which writeReading makes
// errSelectionGone: prepare again): the run's write is keyed and made from
// that copy (unitOfWork, mutate), so it would be another attempt's write,
// or stale content. The check is the write's own condition, not a read:
// on PostgreSQL the whole commit goes in one round trip, and a refusal
// may surface at its COMMIT.
// It returns the events as written.
func writeReservations(tx store.Tx, run *kt.Run, evs []kt.Event, now int64) ([]kt.Event, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	written := make([]kt.Event, 0, len(evs))
	for _, held := range evs {
		if err := tx.EventReserve(held, run.ID, now); err != nil {
			return nil, err
		}
		held.ReservedBy, held.UpdatedAt = run.ID, now
		written = append(written, held)
	}
	return written, nil
}

// preparedArg is what mutate and next receive: the PrepareResult as the script returned it.
func preparedArg(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}
