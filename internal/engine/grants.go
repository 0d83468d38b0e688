package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	sc "github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// Permissions per source (issue 16, ch 06a "permissions are enforced per
// source"): a version uses connector methods and input sources; a person
// grants them (keep grant, the page's Grant, keep run for the script it
// runs, keep deploy --grant); a call of anything not granted blocks its
// run as paused:approval with a card that says what to grant. Grants are
// kept per workflow, so a new version that uses nothing new needs none.

// Uses lists what a script calls that needs a grant, sorted, as
// script.Analyze reads it: "tool.method" for each connector call on ctx
// however ctx reaches it, and "source:NAME" for each registerInput whose
// source is a literal. Validation refuses a connector reached by a
// computed name; a computed source is refused at the call until granted.
// A script that does not parse uses nothing it can be granted.
func Uses(script string) []string {
	a, err := sc.Analyze(script)
	if err != nil {
		return nil
	}
	return a.Uses()
}

// UsesOf is Uses of several scripts together, sorted, once each.
func UsesOf(scripts []string) []string {
	set := map[string]bool{}
	for _, s := range scripts {
		for _, u := range Uses(s) {
			set[u] = true
		}
	}
	out := make([]string, 0, len(set))
	for u := range set {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

// grantedIn reports whether item is among gs ("*" grants everything).
func grantedIn(gs []kt.Grant, item string) bool {
	for _, g := range gs {
		if g.Item == item || g.Item == "*" {
			return true
		}
	}
	return false
}

// Ungranted lists the uses of a workflow's active version not granted yet.
func Ungranted(tx store.Tx, workflow string) ([]string, error) {
	wf, err := tx.WorkflowGet(workflow)
	if err != nil {
		return nil, err
	}
	v, err := tx.VersionGet(workflow, wf.ActiveVersion)
	if err != nil {
		return nil, err
	}
	gs, err := tx.GrantList(workflow)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, u := range Uses(v.Script) {
		if !grantedIn(gs, u) {
			out = append(out, u)
		}
	}
	return out, nil
}

// grantAll records grants of items inside tx, with the decision.
func grantAll(ctx context.Context, tx store.Tx, workflow string, items []string, now int64, logIt bool) error {
	if len(items) == 0 {
		return nil
	}
	for _, it := range items {
		if err := tx.GrantAdd(kt.Grant{Workflow: workflow, Item: it, GrantedBy: Actor(ctx), GrantedAt: now}); err != nil {
			return err
		}
	}
	if !logIt {
		return nil
	}
	return logDecision(ctx, tx, kt.Decision{Workflow: workflow, Action: "grant", Detail: "granted " + strings.Join(items, ", "), At: now})
}

// Grant grants a workflow everything its active version uses, and lets a
// run that was blocked for want of a grant try again. It returns what it
// granted (nothing when all was granted already).
func Grant(ctx context.Context, st store.Store, workflow string, now time.Time) ([]string, error) {
	var granted []string
	var blocked string
	err := st.Update(ctx, func(tx store.Tx) error {
		items, err := Ungranted(tx, workflow)
		if errors.Is(err, kt.ErrNotFound) {
			return Missing("there is no workflow %q (see `keep status`)", workflow)
		}
		if err != nil {
			return err
		}
		granted = items
		if err := grantAll(ctx, tx, workflow, items, now.UnixMilli(), true); err != nil {
			return err
		}
		if r, err := tx.RunOpen(workflow); err == nil && r.Status == kt.StatusApproval && r.Action == "" && kt.NeedsGrant(r.ErrorMessage) {
			blocked = r.ID
		}
		return nil
	})
	if err != nil || blocked == "" {
		return granted, err
	}
	if _, err := Resolve(ctx, st, blocked, ResolveTryAgain, now); err != nil && !IsRefusal(err) {
		return granted, err
	}
	return granted, nil
}

// IsRefusal reports whether err is a refused action (the state moved on).
func IsRefusal(err error) bool {
	var ae *ActionError
	return errors.As(err, &ae)
}

// checkGrant refuses a call of item the workflow was not granted.
func (x *runExec) checkGrant(item, what string) error {
	if x.grants == nil {
		var gs []kt.Grant
		if err := x.e.store.View(x.ctx, func(tx store.Tx) error {
			var err error
			gs, err = tx.GrantList(x.wf.Name)
			return err
		}); err != nil {
			return kt.Errorf(kt.ClassInternal, "read the grants of %s: %v", x.wf.Name, err)
		}
		x.grants = gs
		if x.grants == nil {
			x.grants = []kt.Grant{}
		}
	}
	if grantedIn(x.grants, item) {
		return nil
	}
	return kt.Errorf(kt.ClassPermission, "%s is not granted to %s: a person allows what a workflow uses (%s)%s", what, x.wf.Name, item, kt.GrantSuffix(x.wf.Name))
}

// GrantAction is Grant as people ask for it: what it did, in a sentence.
func GrantAction(ctx context.Context, st store.Store, workflow string, now time.Time) (string, error) {
	items, err := Grant(ctx, st, workflow, now)
	if err != nil {
		return "", err
	}
	if len(items) == 0 {
		return fmt.Sprintf("%s was granted everything its active version uses already", workflow), nil
	}
	return fmt.Sprintf("granted %s: %s", workflow, strings.Join(items, ", ")), nil
}
