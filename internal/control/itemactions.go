package control

import (
	"context"
	"fmt"
	"strings"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
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
		r.Action, r.UpdatedAt = kt.ActionSkip, ms
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
				r.Action, r.UpdatedAt = kt.ActionSkip, ms
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

// reprocessItem starts a new attempt of an item (ch 12 §12.5, SPEC §8.2).
// The old attempt's runs and mutations stay; the new attempt's mutations
// have new identities, so they really run.
func reprocessItem(ctx context.Context, st store.Store, ref ItemRef, now time.Time) (string, error) {
	ms := now.UnixMilli()
	return itemUpdate(ctx, st, ref, kt.Decision{Action: "reprocess", At: ms}, func(tx store.Tx, it kt.Input) (string, error) {
		return transition.Reprocess(tx, it, ms)
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
