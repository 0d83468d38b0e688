package transition

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// The creators of an input and its events posted from outside, not by a
// run: the event API's and a webhook's. Such an event is its input's own,
// and opens again with a new attempt (reopenEvents).
const (
	CreatedByAPI     = "api"
	CreatedByWebhook = "webhook"
)

// An item's attempts: a person's Reprocess (control) and a major deploy's
// --reprocess (the engine) start one the same way.

// CloseBlockedHolders closes the blocked runs that hold pending events of
// an input, before a Reprocess: the run is marked skipped, its write that
// did not happen (or whose outcome is unknown) is marked skipped in the
// ledger, and events of other inputs it held are released. A run that is
// running right now is not touched: Reprocess is refused.
func CloseBlockedHolders(tx store.Tx, it kt.Input, evs []kt.Event, ms int64) ([]string, error) {
	var closed []string
	done := map[string]bool{}
	for _, ev := range evs {
		if ev.Status != kt.EventPending || ev.ReservedBy == "" || done[ev.ReservedBy] {
			continue
		}
		r, err := tx.RunGet(ev.ReservedBy)
		if err != nil {
			return nil, err
		}
		done[r.ID] = true
		if r.Status.Finished() {
			continue
		}
		if r.Status == kt.StatusActive || r.Action != "" {
			return nil, kt.Refuse("input %q is being processed right now (run %s); wait for the run to finish or block", it.Title, r.ID)
		}
		if kt.PhaseRank(r.Phase) >= kt.PhaseRank(kt.PhaseMutated) {
			return nil, kt.Refuse("input %q is held by run %s, whose write already happened and which must complete first; resolve it (`keep show run %s`)", it.Title, r.ID, r.ID)
		}
		if m, err := tx.MutationByRun(r.ID); err == nil && m.Status != kt.MutationApplied && m.Status != kt.MutationSkipped {
			m.Status, m.ResolvedBy, m.UpdatedAt = kt.MutationSkipped, kt.ResolvedByUserSkip, ms
			if err := PutMutation(tx, m); err != nil {
				return nil, err
			}
		} else if err != nil && !errors.Is(err, kt.ErrNotFound) {
			return nil, err
		}
		held, err := tx.EventsReservedBy(r.ID)
		if err != nil {
			return nil, err
		}
		for _, h := range held {
			if h.Status == kt.EventPending && !slices.Contains(h.CausedBy, it.ID) {
				h.ReservedBy, h.UpdatedAt = "", ms
				if err := tx.EventUpdate(h); err != nil {
					return nil, err
				}
			}
		}
		r.Status, r.Action, r.UpdatedAt, r.FinishedAt = kt.StatusSkipped, "", ms, ms
		if err := PutRun(tx, &r); err != nil {
			return nil, err
		}
		closed = append(closed, r.ID)
	}
	return closed, nil
}

// Reprocess starts a new attempt of an item (ch 12 §12.5): a task item's
// own, or an input's (ReprocessInput). It says what it did; an item still
// in progress is refused.
func Reprocess(tx store.Tx, it kt.Input, ms int64) (string, error) {
	if it.Kind == kt.KindInput {
		return ReprocessInput(tx, it, ms)
	}
	if it.Status == kt.ItemProcessing {
		if r, err := tx.RunGet(it.LastRun); err == nil && r.Status == kt.StatusActive {
			return "", kt.Refuse("item %q is being processed right now; wait for the run to finish", it.Key)
		}
	}
	prevStatus := it.Status
	it.Status = kt.ItemProcessing
	if err := startAttempt(tx, &it, prevStatus, ms); err != nil {
		return "", err
	}
	if r, err := tx.RunGet(it.LastRun); err == nil && !r.Status.Finished() && r.Status != kt.StatusActive && r.Action == "" {
		r.Action, r.UpdatedAt = kt.ActionRetry, ms
		if err := PutRun(tx, &r); err != nil {
			return "", err
		}
	}
	if err := markAll(tx, it.Workflow, kt.HandlerTask, ms); err != nil {
		return "", err
	}
	return fmt.Sprintf("item %q: attempt %d started; the task processes it on its next run (queued now)", it.Key, it.CurrentAttempt), nil
}

// ReprocessInput starts a new attempt of an input: its own events re-open
// with the new attempt, what descends from them is published again by the
// new attempt's runs.
func ReprocessInput(tx store.Tx, it kt.Input, ms int64) (string, error) {
	evs, err := tx.EventsByInput(it.ID)
	if err != nil {
		return "", err
	}
	// A run that holds one of its events and is blocked (needs
	// attention, failed) is closed first, in the same transaction:
	// chapter 12 §12.7 offers Reprocess there, as one action.
	closed, err := CloseBlockedHolders(tx, it, evs, ms)
	if err != nil {
		return "", err
	}
	prevStatus := kt.ItemDone
	if len(closed) > 0 {
		prevStatus = kt.ItemNeedsAttention
	} else if allSkipped(evs) {
		prevStatus = kt.ItemSkipped
	}
	if err := startAttempt(tx, &it, prevStatus, ms); err != nil {
		return "", err
	}
	roots, err := reopenEvents(tx, evs, it.CurrentAttempt, ms)
	if err != nil {
		return "", err
	}
	if err := markAll(tx, it.Workflow, kt.HandlerConsumer, ms); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("input %q: attempt %d started; %d events re-opened", it.Title, it.CurrentAttempt, roots)
	if len(closed) > 0 {
		msg += fmt.Sprintf("; blocked run %s closed (its unfinished write is not sent again)", strings.Join(closed, ", "))
	}
	return msg, nil
}

// startAttempt moves an item to its next attempt: the item saved (through
// its state machine), the old attempt closed with prevStatus, the new one
// opened.
func startAttempt(tx store.Tx, it *kt.Input, prevStatus kt.ItemStatus, ms int64) error {
	old := it.CurrentAttempt
	it.CurrentAttempt++
	it.UpdatedAt = ms
	if err := PutItem(tx, *it); err != nil {
		return err
	}
	if err := closeAttempt(tx, it.ID, old, prevStatus, ms); err != nil {
		return err
	}
	status := kt.ItemPending
	if it.Kind == kt.KindTask {
		status = it.Status
	}
	return tx.ItemAttemptPut(kt.ItemAttempt{ItemID: it.ID, Attempt: it.CurrentAttempt, Status: status, Version: it.LastVersion, StartedAt: ms, UpdatedAt: ms})
}

// reopenEvents gives an input's own events (published by a producer) the
// new attempt and makes them pending again; events further downstream that
// are still pending belong to the old attempt and end skipped (the new
// attempt publishes them again). It returns how many re-opened.
func reopenEvents(tx store.Tx, evs []kt.Event, attempt int, ms int64) (int, error) {
	roots := 0
	for _, ev := range evs {
		root := ev.CreatedBy == CreatedByAPI || ev.CreatedBy == CreatedByWebhook // posted with its input: its own
		if !root {
			r, err := tx.RunGet(ev.CreatedBy)
			root = err == nil && r.HandlerType == kt.HandlerProducer
		}
		if !root {
			if ev.Status == kt.EventPending {
				ev.Status, ev.ReservedBy, ev.UpdatedAt = kt.EventSkipped, "", ms
				if err := tx.EventUpdate(ev); err != nil {
					return 0, err
				}
			}
			continue
		}
		ev.Status, ev.ReservedBy, ev.Attempt, ev.UpdatedAt = kt.EventPending, "", attempt, ms
		if err := tx.EventUpdate(ev); err != nil {
			return 0, err
		}
		roots++
	}
	return roots, nil
}

func allSkipped(evs []kt.Event) bool {
	for _, ev := range evs {
		if ev.Status != kt.EventSkipped {
			return false
		}
	}
	return len(evs) > 0
}

func closeAttempt(tx store.Tx, itemID string, attempt int, status kt.ItemStatus, ms int64) error {
	as, err := tx.ItemAttemptList(itemID)
	if err != nil {
		return err
	}
	for _, a := range as {
		if a.Attempt == attempt {
			a.Status, a.UpdatedAt = status, ms
			return tx.ItemAttemptPut(a)
		}
	}
	return tx.ItemAttemptPut(kt.ItemAttempt{ItemID: itemID, Attempt: attempt, Status: status, StartedAt: ms, UpdatedAt: ms})
}

// markAll makes every consumer dirty, or queues every task, of a workflow.
func markAll(tx store.Tx, wf string, typ kt.HandlerType, ms int64) error {
	hs, err := tx.HandlerList(wf)
	if err != nil {
		return err
	}
	for _, h := range hs {
		if h.Type != typ || (typ == kt.HandlerTask && h.NextRunAt == 0 && !h.Queued) {
			continue
		}
		if typ == kt.HandlerConsumer {
			h.Dirty = true
		} else {
			h.Queued = true
		}
		Touch(&h, ms)
		if err := tx.HandlerPut(h); err != nil {
			return err
		}
	}
	return nil
}
