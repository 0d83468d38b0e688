package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// Grant grants a workflow everything its active version uses that the
// reading names, and what its blocked run was refused at the call (a
// target computed at run time), and lets that run try again. It returns
// what it granted (nothing when all was granted already).
func Grant(ctx context.Context, st store.Store, workflow string, now time.Time) ([]string, error) {
	return grantThen(ctx, st, workflow, now, func(tx store.Tx, _ string) ([]string, error) {
		return ToGrant(tx, workflow)
	})
}

// ToGrant is what Grant would grant: the version's uses not granted yet,
// and the grant its blocked run was refused.
func ToGrant(tx store.Tx, workflow string) ([]string, error) {
	items, err := engine.Ungranted(tx, workflow)
	if err != nil {
		return nil, err
	}
	r, err := tx.RunOpen(workflow)
	if err != nil || r.Status != kt.StatusApproval || r.Action != "" {
		return items, nil
	}
	refused := kt.NeededGrant(r.ErrorMessage)
	if refused == "" || slices.Contains(items, refused) {
		return items, nil
	}
	gs, err := tx.GrantList(workflow)
	if err != nil || engine.GrantedIn(gs, refused) {
		return items, err
	}
	return append(items, refused), nil
}

// GrantItems grants a workflow exactly items (the card's Grant: what its
// run was refused), and lets a run blocked for want of them try again.
func GrantItems(ctx context.Context, st store.Store, workflow string, items []string, now time.Time) ([]string, error) {
	for _, it := range items {
		if err := kt.CheckGrantItem(it); err != nil {
			return nil, &kt.ActionError{Msg: err.Error()}
		}
	}
	return grantThen(ctx, st, workflow, now, func(tx store.Tx, _ string) ([]string, error) {
		gs, err := tx.GrantList(workflow)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, it := range items {
			if !slices.ContainsFunc(gs, func(g kt.Grant) bool { return g.Item == it }) && !slices.Contains(out, it) {
				out = append(out, it)
			}
		}
		return out, nil
	})
}

// grantThen grants what pick chooses (given the grant the workflow's
// blocked run was refused, "" when none is named) and lets that run try
// again once what it was refused is granted.
func grantThen(ctx context.Context, st store.Store, workflow string, now time.Time, pick func(tx store.Tx, refused string) ([]string, error)) ([]string, error) {
	var granted []string
	var blocked string
	err := st.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.WorkflowGet(workflow); errors.Is(err, kt.ErrNotFound) {
			return kt.Missing("there is no workflow %q (see `keep status`)", workflow)
		} else if err != nil {
			return err
		}
		var refused string
		r, err := tx.RunOpen(workflow)
		waiting := err == nil && r.Status == kt.StatusApproval && r.Action == "" && kt.NeedsGrant(r.ErrorMessage)
		if waiting {
			refused = kt.NeededGrant(r.ErrorMessage)
		}
		items, err := pick(tx, refused)
		if err != nil {
			return err
		}
		granted = items
		if err := transition.GrantAll(ctx, tx, workflow, items, now.UnixMilli()); err != nil {
			return err
		}
		if !waiting {
			return nil
		}
		gs, err := tx.GrantList(workflow)
		if err != nil {
			return err
		}
		// A message of the form before grants were named says nothing to
		// check: the run tries again, as it did then.
		if refused == "" || engine.GrantedIn(gs, refused) {
			blocked = r.ID
		}
		return nil
	})
	if err != nil || blocked == "" {
		return granted, err
	}
	if _, err := resolveRun(ctx, st, blocked, resolution{kt.ResolveTryAgain, (*decision).tryAgain}, now); err != nil && !IsRefusal(err) {
		return granted, err
	}
	return granted, nil
}

// revokeGrants takes grants back: a call they allowed is refused from its next
// call on (a run under way keeps what it read already). Each revoke is in
// the decision log.
func revokeGrants(ctx context.Context, st store.Store, workflow string, items []string, now time.Time) (string, error) {
	if len(items) == 0 {
		return "", &kt.ActionError{Msg: "name the grants to revoke: keep grant " + workflow + " --revoke 'http.request POST api.example.com'"}
	}
	err := st.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.WorkflowGet(workflow); errors.Is(err, kt.ErrNotFound) {
			return kt.Missing("there is no workflow %q (see `keep status`)", workflow)
		} else if err != nil {
			return err
		}
		gs, err := tx.GrantList(workflow)
		if err != nil && !kt.IsDamaged(err) {
			// A damaged grant is taken back as it is stored (its
			// restore step, kt.RestoreGrant): the list only says, on a
			// refusal, which grants there are.
			return err
		}
		for _, it := range items {
			ok, err := tx.GrantRemove(workflow, it)
			if err != nil {
				return err
			}
			if !ok {
				have := make([]string, 0, len(gs))
				for _, g := range gs {
					have = append(have, "'"+g.Item+"'")
				}
				if len(have) == 0 {
					have = append(have, "none")
				}
				return &kt.ActionError{Msg: fmt.Sprintf("%s has no grant '%s'; nothing was revoked (its grants: %s)", workflow, it, strings.Join(have, ", "))}
			}
		}
		return transition.LogDecision(ctx, tx, kt.Decision{Workflow: workflow, Action: "revoke", Detail: "revoked " + strings.Join(items, ", "), At: now.UnixMilli()})
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("revoked %s: %s — a call that needs it is refused from now on", workflow, strings.Join(items, ", ")), nil
}

// IsRefusal reports whether err is a refused action (the state moved on).
func IsRefusal(err error) bool {
	var ae *kt.ActionError
	return errors.As(err, &ae)
}

// grantAction is Grant as people ask for it, what it did in a sentence:
// without items, what the version uses and its run was refused (keep
// grant WF); with items, exactly those (the card's Grant).
func grantAction(ctx context.Context, st store.Store, workflow string, items []string, now time.Time) (string, error) {
	if len(items) == 0 {
		granted, err := Grant(ctx, st, workflow, now)
		if err != nil || len(granted) == 0 {
			return fmt.Sprintf("%s was granted everything its active version uses already", workflow), err
		}
		return fmt.Sprintf("granted %s: %s", workflow, strings.Join(granted, ", ")), nil
	}
	granted, err := GrantItems(ctx, st, workflow, items, now)
	if err != nil || len(granted) == 0 {
		return fmt.Sprintf("%s was granted %s already", workflow, strings.Join(items, ", ")), err
	}
	return fmt.Sprintf("granted %s: %s", workflow, strings.Join(granted, ", ")), nil
}
