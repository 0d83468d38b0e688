package transition

import (
	"context"
	"errors"
	"strings"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

type actorKey struct{}

// WithActor names the person behind the actions taken with ctx; they are
// recorded in the decision log. The API passes the caller it knows: the
// CLI's --by (default "cli") beside the instance secret, the page's "web
// page", else "api".
func WithActor(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, actorKey{}, who)
}

// Actor is the person named by WithActor, or "unknown".
func Actor(ctx context.Context) string {
	if who, _ := ctx.Value(actorKey{}).(string); who != "" {
		return who
	}
	return "unknown"
}

// LogDecision appends a person's decision to the decision log, inside the
// transaction that carries it out.
func LogDecision(ctx context.Context, tx store.Tx, d kt.Decision) error {
	d.By = Actor(ctx)
	return tx.DecisionAdd(d)
}

// Unpause lets a paused workflow be scheduled again (a redeploy, a
// person's decision that clears what paused it).
func Unpause(tx store.Tx, wf string, now int64) error {
	w, err := tx.WorkflowGet(wf)
	if err != nil {
		return err
	}
	if !w.Paused {
		return nil
	}
	w.Paused, w.PausedReason, w.UpdatedAt = false, "", now
	return tx.WorkflowPut(w)
}

// QueueScheduled queues every producer and task of a workflow.
func QueueScheduled(tx store.Tx, wf string, ms int64) (int, error) {
	hs, err := tx.HandlerList(wf)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, h := range hs {
		if (h.Type == kt.HandlerProducer || h.Type == kt.HandlerTask) && (h.NextRunAt > 0 || h.Queued) {
			h.Queued = true
			Touch(&h, ms)
			if err := tx.HandlerPut(h); err != nil {
				return 0, err
			}
			n++
		}
	}
	return n, nil
}

// Workflow reads a workflow, or answers that there is none.
func Workflow(tx store.Tx, name string) (kt.Workflow, error) {
	w, err := tx.WorkflowGet(name)
	if errors.Is(err, kt.ErrNotFound) {
		return w, kt.Missing("there is no workflow %q (see `keep status`)", name)
	}
	return w, err
}

// FindItem resolves an item reference — its id, or its key (an input's
// source:type:id, a task item's own id) — within a workflow, or across all
// workflows when wf is empty (an ambiguous key is an error).
func FindItem(tx store.Tx, wf, ref string) (kt.Input, error) {
	if it, err := tx.InputGet(ref); err == nil && (wf == "" || it.Workflow == wf) {
		return it, nil
	}
	var wfs []string
	if wf != "" {
		wfs = []string{wf}
	} else {
		all, err := tx.WorkflowList()
		if err != nil {
			return kt.Input{}, err
		}
		for _, w := range all {
			wfs = append(wfs, w.Name)
		}
	}
	var found []kt.Input
	for _, w := range wfs {
		it, err := tx.InputGetByKey(w, ref)
		if err == nil {
			found = append(found, it)
		} else if !errors.Is(err, kt.ErrNotFound) {
			return kt.Input{}, err
		}
	}
	switch len(found) {
	case 0:
		return byExternalID(tx, wfs, ref)
	case 1:
		return found[0], nil
	}
	return kt.Input{}, kt.Refuse("item key %q exists in several workflows; pass --workflow", ref)
}

// byExternalID finds the input whose own id is ref: `keep inputs` shows an
// input's source/type and that id, which a person copies. Only on the way
// to "not found", so the scan costs nothing on a found key.
func byExternalID(tx store.Tx, wfs []string, ref string) (kt.Input, error) {
	var found []kt.Input
	for _, w := range wfs {
		ins, err := tx.InputList(w)
		if err != nil {
			return kt.Input{}, err
		}
		for _, in := range ins {
			if in.Kind == kt.KindInput && in.ExternalID == ref {
				found = append(found, in)
			}
		}
	}
	switch len(found) {
	case 0:
		return kt.Input{}, kt.Missing("there is no item %q: name it by its id or its key, SOURCE:TYPE:ID (`keep inputs WORKFLOW` shows each input's source/type and id; `keep items WORKFLOW` each item's key)", ref)
	case 1:
		return found[0], nil
	}
	keys := make([]string, len(found))
	for i, in := range found {
		keys[i] = in.Workflow + " " + in.Key
	}
	return kt.Input{}, kt.Refuse("%d inputs have the id %q (%s): name one by its key, and its workflow with --workflow", len(found), ref, strings.Join(keys, ", "))
}

// AddGrants records grants of items inside tx, by the actor of ctx, out
// of the decision log: a grant that is no person's decision (Deploy's for
// keep bench and tests).
func AddGrants(ctx context.Context, tx store.Tx, workflow string, items []string, now int64) error {
	for _, it := range items {
		if err := tx.GrantAdd(kt.Grant{Workflow: workflow, Item: it, GrantedBy: Actor(ctx), GrantedAt: now}); err != nil {
			return err
		}
	}
	return nil
}

// GrantAll records grants of items inside tx, with the decision.
func GrantAll(ctx context.Context, tx store.Tx, workflow string, items []string, now int64) error {
	if len(items) == 0 {
		return nil
	}
	if err := AddGrants(ctx, tx, workflow, items, now); err != nil {
		return err
	}
	return LogDecision(ctx, tx, kt.Decision{Workflow: workflow, Action: "grant", Detail: "granted " + strings.Join(items, ", "), At: now})
}
