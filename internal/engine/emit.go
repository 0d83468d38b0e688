package engine

import (
	"encoding/json"
	"fmt"
	"sort"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// emit runs a consumer's next phase and commits the run: the write's
// outcome and the selection when the run holds them (writeHeld), its
// reserved events consumed (or skipped), what next published, the new
// state and the wake time, in one transaction (SPEC §4).
func (x *runExec) emit(dv declView) error {
	defer x.startPhase(string(phaseNext)).end(x)
	run := x.run
	mr := run.MutationResult
	if len(mr) == 0 {
		mr = json.RawMessage(`{"status":"none"}`)
	}
	final, err := settledAs(run.ID, mr)
	if err != nil {
		return x.fail(err)
	}
	h := x.host(phaseNext)
	h.decl, h.allowPublish = dv, dv.publishes
	var newState json.RawMessage
	pr, err := x.decodePrepared(run.PrepareResult)
	if err != nil {
		return x.fail(kt.UndecodableJSON("the stored prepare result of run "+run.ID, "runs", "id="+run.ID, err))
	}
	if pr.reservesNothing() && x.unstored {
		return x.idle()
	}
	if pr.reservesNothing() {
		// Nothing to do (SPEC §4, docs/scripts.md): the run commits at once;
		// next is for work that was selected.
		x.phaseNote("emitting", "prepare reserved nothing: committed without next")
	} else if x.prog.Decl.Consumers[run.Handler].Next {
		out, err := x.invoke(h, preparedArg(run.PrepareResult), mr)
		if err == nil {
			err = checkSize("the state returned by next", out.Value)
		}
		if err != nil {
			return x.fail(err)
		}
		newState = out.Value
	}
	// With the copies of the events this step reserved (x.held), the
	// commit reads nothing (settleHeld, saveConsumerState): on PostgreSQL
	// one round trip. writeReading drops them when one is stale, and this
	// function's reads and writes then go from what is stored.
	return x.writeReading(func(tx store.Tx) {
		if x.held == nil {
			_, _ = tx.EventsReservedBy(run.ID) // settleReserved's
		}
		if x.held == nil || pr.reservesNothing() {
			_, _ = tx.HandlerGet(x.wf.Name, run.Handler) // saveConsumerState's
		}
	}, func(tx store.Tx) error {
		var settled []kt.Event
		var err error
		if x.held != nil {
			settled, err = settleHeld(tx, run.ID, x.held, final, x.e.NowMs())
		} else {
			settled, err = settleReserved(tx, run.ID, final, x.e.NowMs())
		}
		if err != nil {
			return err
		}
		causedBy, attempt := causesOf(settled)
		x.noteInputs(causedBy...)
		dirty, err := x.insertPublishes(tx, h.publishes, func(transition.Publish) ([]string, int, error) {
			return causedBy, attempt, nil
		})
		if err != nil {
			return err
		}
		if err := x.saveConsumerState(tx, newState, dirty[run.Handler]); err != nil {
			return err
		}
		if err := x.committed(tx, fmt.Sprintf("%d events %s, %d published", len(settled), final, len(h.publishes))); err != nil {
			return err
		}
		x.e.CrashPoint(CrashInsideCommit)
		return nil
	})
}

// settledAs is the status a consumer run's reserved events end with: the
// write's (mr, its stored mutation result) skipped, they are skipped, else
// consumed.
func settledAs(runID string, mr json.RawMessage) (kt.EventStatus, error) {
	var mstatus struct {
		Status string `json:"status"`
	}
	if err := decodeStored("mutation result", "runs", runID, mr, &mstatus); err != nil {
		return "", err
	}
	if mstatus.Status == "skipped" {
		return kt.EventSkipped, nil
	}
	return kt.EventConsumed, nil
}

// idle ends a new consumer run whose prepare reserved nothing: nothing to
// do (SPEC §4), so next does not run, and the run is not stored — an empty
// poll is no work a person looks at, and would fill `keep runs`, the page
// and the status with a row per wake-up (issue 27). Only the consumer's
// state is written: its wake time and a wake-up that came in meanwhile
// (saveConsumerState). A retry that reserves nothing was stored when it
// was made, and commits as a run.
func (x *runExec) idle() error {
	if err := advance(x.run, kt.PhaseCommitted); err != nil {
		return err
	}
	x.run.Status, x.unrecorded = kt.StatusCommitted, true
	x.e.log.Debug("a consumer's prepare reserved nothing: no run recorded", "workflow", x.wf.Name, "handler", x.run.Handler)
	// Its loss in a power cut is harmless: the consumer, still dirty or
	// due, polls once more after the restart, as if this poll had not
	// been. So it waits for no fsync (store.NoSync): the next durable
	// commit carries it to the disk.
	return x.e.update(store.NoSync(x.ctx), x.wf.Name, func(tx store.Tx) error {
		return x.saveConsumerState(tx, nil, false)
	})
}

// settleReserved gives the pending events a run holds their final status
// and returns them.
func settleReserved(tx store.Tx, runID string, final kt.EventStatus, now int64) ([]kt.Event, error) {
	reserved, err := tx.EventsReservedBy(runID)
	if err != nil {
		return nil, err
	}
	var settled []kt.Event
	for _, ev := range reserved {
		if ev.Status != kt.EventPending {
			continue
		}
		ev.Status, ev.UpdatedAt = final, now
		if err := tx.EventUpdate(ev); err != nil {
			return nil, err
		}
		settled = append(settled, ev)
	}
	return settled, nil
}

// settleHeld is settleReserved on the copies of the events the run
// reserved in this step (runExec.held), with no read: each is settled only
// while still as its copy (store.Tx.EventSettle), so a change since (a
// person's Skip, a merged publish) fails the commit with store.ErrStale,
// and it is made again with settleReserved.
func settleHeld(tx store.Tx, runID string, held []kt.Event, final kt.EventStatus, now int64) ([]kt.Event, error) {
	settled := make([]kt.Event, 0, len(held))
	for _, ev := range held {
		if err := tx.EventSettle(ev, runID, final, now); err != nil {
			return nil, err
		}
		ev.Status, ev.UpdatedAt = final, now
		settled = append(settled, ev)
	}
	return settled, nil
}

// causesOf is what a consumer's work descends from: the inputs that caused
// its events (sorted) and the newest attempt among them (at least 1).
func causesOf(evs []kt.Event) (causedBy []string, attempt int) {
	causes := map[string]bool{}
	attempt = 1
	for _, ev := range evs {
		for _, c := range ev.CausedBy {
			causes[c] = true
		}
		attempt = max(attempt, ev.Attempt)
	}
	causedBy = make([]string, 0, len(causes))
	for c := range causes {
		causedBy = append(causedBy, c)
	}
	sort.Strings(causedBy)
	return causedBy, attempt
}

// saveConsumerState stores what next returned and when the consumer runs
// again: dirty when a run that selected nothing published to its own topic,
// and the PrepareResult's wakeAt.
func (x *runExec) saveConsumerState(tx store.Tx, state json.RawMessage, selfDirty bool) error {
	pr, err := x.decodePrepared(x.run.PrepareResult)
	if err != nil {
		return err // emit stopped on it before
	}
	if x.held != nil && !pr.reservesNothing() {
		// The row's dirty mark stays as stored, so nothing of it needs
		// reading: the store merges (HandlerAdvance does touch's move).
		return tx.HandlerAdvance(x.wf.Name, x.run.Handler, state, x.e.wakeTime(pr.WakeAt), x.e.NowMs())
	}
	hrow, err := tx.HandlerGet(x.wf.Name, x.run.Handler)
	if err != nil {
		return err
	}
	if state != nil {
		hrow.State = state
	}
	if pr.reservesNothing() {
		// An event that came in while this run prepared (the event API,
		// a webhook, a person's reprocess) woke the consumer after
		// prepare read its row: that wake-up stands, or the event would
		// wait, unseen, for the next one (a lost wake-up). A mark from
		// before is what started the run, and prepare has seen what it
		// marked. Which is which is told by the row's change, never by
		// a clock: a request stamps its time when it comes in, before
		// it waits for the write transaction, and another node's clock
		// is its own (an event was stranded so).
		woken := hrow.Dirty && (x.rowRead == nil || hrow.UpdatedAt != x.rowRead.UpdatedAt)
		hrow.Dirty = selfDirty || woken
	}
	hrow.WakeAt = x.e.wakeTime(pr.WakeAt)
	transition.Touch(&hrow, x.e.NowMs())
	return tx.HandlerPut(hrow)
}
