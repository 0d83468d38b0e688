package engine

import (
	"context"
	"errors"
	"fmt"
	"github.com/keep-run/keep/internal/transition"
	"slices"
	"sort"
	"strings"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// ItemRef names an item: its id or its key (FindItem), within a workflow,
// or across all workflows when Workflow is empty.
type ItemRef struct {
	Workflow string
	Ref      string
}

// skipItem carries out `keep skip ITEM` (SPEC §8.2, ch 12 §12.7).
func skipItem(ctx context.Context, st store.Store, ref ItemRef, now time.Time) (string, error) {
	ms := now.UnixMilli()
	return itemUpdate(ctx, st, ref, kt.Decision{Action: "skip-item", At: ms}, func(tx store.Tx, it kt.Input) (string, error) {
		if it.Kind == kt.KindTask {
			return skipTaskItem(tx, it, ms)
		}
		return skipInput(tx, it, ms)
	})
}

// skipTaskItem skips an item of an item script; the run blocked on it goes
// on with the other items.
func skipTaskItem(tx store.Tx, it kt.Input, ms int64) (string, error) {
	if !kt.ItemTransitionAllowed(it.Status, kt.ItemSkipped) {
		return "", kt.Refuse("item %q is %s; only an item that is not finished can be skipped (reprocess starts a done item again)", it.Key, it.Status)
	}
	it.Status, it.UpdatedAt = kt.ItemSkipped, ms
	if err := transition.PutItem(tx, it); err != nil {
		return "", err
	}
	if err := tx.ItemAttemptPut(kt.ItemAttempt{ItemID: it.ID, Attempt: it.CurrentAttempt, Status: kt.ItemSkipped, Version: it.LastVersion, StartedAt: ms, UpdatedAt: ms}); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("item %q skipped", it.Key)
	if r, err := tx.RunGet(it.LastRun); err == nil && !r.Status.Finished() && r.Status != kt.StatusActive && r.Action == "" {
		r.Action, r.UpdatedAt = ActionSkip, ms
		if err := transition.PutRun(tx, &r); err != nil {
			return "", err
		}
		msg += fmt.Sprintf("; blocked run %s goes on with the other items", r.ID)
	}
	return msg, nil
}

// skipInput skips the pending events of an input; a blocked run that holds
// one before its write is skipped, one whose write happened completes.
func skipInput(tx store.Tx, it kt.Input, ms int64) (string, error) {
	evs, err := tx.EventsByInput(it.ID)
	if err != nil {
		return "", err
	}
	var skipped, consumed, completing int
	var runs []string
	for _, ev := range evs {
		switch {
		case ev.Status == kt.EventConsumed:
			consumed++
		case ev.Status != kt.EventPending:
		case ev.ReservedBy == "":
			ev.Status, ev.UpdatedAt = kt.EventSkipped, ms
			if err := tx.EventUpdate(ev); err != nil {
				return "", err
			}
			skipped++
		default:
			r, err := tx.RunGet(ev.ReservedBy)
			if err != nil {
				return "", err
			}
			if kt.PhaseRank(r.Phase) >= kt.PhaseRank(kt.PhaseMutated) {
				completing++ // its write happened: the run completes
				continue
			}
			if !r.Status.Finished() && r.Action == "" {
				r.Action, r.UpdatedAt = ActionSkip, ms
				if err := transition.PutRun(tx, &r); err != nil {
					return "", err
				}
				runs = append(runs, r.ID)
			}
		}
	}
	parts := []string{fmt.Sprintf("input %q: %d pending events skipped", it.Title, skipped)}
	if len(runs) > 0 {
		parts = append(parts, fmt.Sprintf("run %s, which held it before its write, will be skipped", strings.Join(runs, ", ")))
	}
	if completing > 0 {
		parts = append(parts, fmt.Sprintf("%d events are held by a run whose write already happened; that run completes", completing))
	}
	if consumed > 0 {
		parts = append(parts, fmt.Sprintf("%d events were already consumed and stay so", consumed))
	}
	msg := strings.Join(parts, "; ")
	return msg, tx.ItemAttemptPut(kt.ItemAttempt{ItemID: it.ID, Attempt: it.CurrentAttempt, Status: kt.ItemSkipped, Version: it.LastVersion, StartedAt: ms, UpdatedAt: ms})
}

// closeBlockedHolders closes the blocked runs that hold pending events of
// an input, before a Reprocess: the run is marked skipped, its write that
// did not happen (or whose outcome is unknown) is marked skipped in the
// ledger, and events of other inputs it held are released. A run that is
// running right now is not touched: Reprocess is refused.
func closeBlockedHolders(tx store.Tx, it kt.Input, evs []kt.Event, ms int64) ([]string, error) {
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
			if err := transition.PutMutation(tx, m); err != nil {
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
		if err := transition.PutRun(tx, &r); err != nil {
			return nil, err
		}
		closed = append(closed, r.ID)
	}
	return closed, nil
}

// reprocessItem starts a new attempt of an item (ch 12 §12.5, SPEC §8.2).
// The old attempt's runs and mutations stay; the new attempt's mutations
// have new identities, so they really run.
func reprocessItem(ctx context.Context, st store.Store, ref ItemRef, now time.Time) (string, error) {
	ms := now.UnixMilli()
	return itemUpdate(ctx, st, ref, kt.Decision{Action: "reprocess", At: ms}, func(tx store.Tx, it kt.Input) (string, error) {
		return reprocess(tx, it, ms)
	})
}

// itemUpdate finds an item and applies a person's action to it, then logs
// the decision (d, with the item and what act says happened), in one
// transaction.
func itemUpdate(ctx context.Context, st store.Store, ref ItemRef, d kt.Decision, act func(store.Tx, kt.Input) (string, error)) (string, error) {
	err := st.Update(ctx, func(tx store.Tx) error {
		it, err := transition.FindItem(tx, ref.Workflow, ref.Ref)
		if err != nil {
			return err
		}
		if d.Detail, err = act(tx, it); err != nil {
			return err
		}
		d.Workflow, d.ItemID = it.Workflow, it.ID
		return transition.LogDecision(ctx, tx, d)
	})
	return d.Detail, err
}

func reprocess(tx store.Tx, it kt.Input, ms int64) (string, error) {
	if it.Kind == kt.KindInput {
		return reprocessInput(tx, it, ms)
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
		r.Action, r.UpdatedAt = ActionRetry, ms
		if err := transition.PutRun(tx, &r); err != nil {
			return "", err
		}
	}
	if err := markAll(tx, it.Workflow, kt.HandlerTask, ms); err != nil {
		return "", err
	}
	return fmt.Sprintf("item %q: attempt %d started; the task processes it on its next run (queued now)", it.Key, it.CurrentAttempt), nil
}

// reprocessInput starts a new attempt of an input: its own events re-open
// with the new attempt, what descends from them is published again by the
// new attempt's runs.
func reprocessInput(tx store.Tx, it kt.Input, ms int64) (string, error) {
	evs, err := tx.EventsByInput(it.ID)
	if err != nil {
		return "", err
	}
	// A run that holds one of its events and is blocked (needs
	// attention, failed) is closed first, in the same transaction:
	// chapter 12 §12.7 offers Reprocess there, as one action.
	closed, err := closeBlockedHolders(tx, it, evs, ms)
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
	if err := transition.PutItem(tx, *it); err != nil {
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
		root := ev.CreatedBy == createdByAPI || ev.CreatedBy == createdByWebhook // posted with its input: its own
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
		transition.Touch(&h, ms)
		if err := tx.HandlerPut(h); err != nil {
			return err
		}
	}
	return nil
}

// ReprocessAfterMajor applies `keep deploy --major --reprocess=...`: "all"
// starts a new attempt of every item that is not in progress, a list of keys
// starts one for each of them. It returns how many items were reprocessed.
func ReprocessAfterMajor(ctx context.Context, st store.Store, wf, choice string, now time.Time) (int, error) {
	if choice == "" || choice == "none" {
		return 0, nil
	}
	n := 0
	err := st.Update(ctx, func(tx store.Tx) error {
		var items []kt.Input
		if choice == "all" {
			all, err := tx.InputList(wf)
			if err != nil {
				return err
			}
			for _, it := range all {
				if it.Kind == kt.KindTask && it.Status == kt.ItemProcessing {
					continue
				}
				items = append(items, it)
			}
		} else {
			for _, key := range strings.Split(choice, ",") {
				it, err := transition.FindItem(tx, wf, strings.TrimSpace(key))
				if err != nil {
					return err
				}
				items = append(items, it)
			}
		}
		for _, it := range items {
			if _, err := reprocess(tx, it, now.UnixMilli()); err != nil {
				var ae *kt.ActionError
				if choice == "all" && errors.As(err, &ae) {
					continue // still in progress: left alone
				}
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// KeyPrefixes lists the item key prefixes a script gives withItem
// ("email:"), as script.Analyze reads the ids: the constant text an id
// starts with, up to its first colon.
func KeyPrefixes(source string) []string {
	a, err := script.Analyze(source)
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range a.Items {
		i := strings.Index(e.Prefix, ":")
		if i <= 0 {
			continue
		}
		p := e.Prefix[:i+1]
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// keyFormatWarning compares the item keys of a new major version with the
// existing items (ch 12 §12.6 "ID format change detection", best effort).
func keyFormatWarning(tx store.Tx, wf, source string) (string, error) {
	newPrefixes := KeyPrefixes(source)
	if len(newPrefixes) == 0 {
		return "", nil
	}
	items, err := tx.InputList(wf)
	if err != nil {
		return "", err
	}
	oldCount := map[string]int{}
	var samples []string
	incomplete := 0
	for _, it := range items {
		if it.Kind != kt.KindTask {
			continue
		}
		p := it.Key
		if i := strings.Index(p, ":"); i >= 0 {
			p = p[:i+1]
		}
		oldCount[p]++
		if !itemDone(it.Status) {
			incomplete++
			if len(samples) < 5 {
				samples = append(samples, it.Key)
			}
		}
	}
	for _, p := range newPrefixes {
		if oldCount[p] > 0 {
			return "", nil
		}
	}
	if len(oldCount) == 0 {
		return "", nil
	}
	var old []string
	for p := range oldCount {
		old = append(old, p)
	}
	sort.Strings(old)
	orphans := ""
	if incomplete > 0 {
		orphans = fmt.Sprintf(" (%s%s)", strings.Join(samples, ", "), map[bool]string{true: ", …", false: ""}[incomplete > len(samples)])
	}
	return fmt.Sprintf("item ids change format: existing items use %s, the new version uses %s. Old items will not be matched: their work may be done again under new ids (duplicate writes are possible), and %d incomplete old items will become orphaned%s (see `keep items %s --orphaned`; `keep skip` resolves them)",
		strings.Join(old, ", "), strings.Join(newPrefixes, ", "), incomplete, orphans, wf), nil
}
