package report

import (
	"context"
	"fmt"
	"net/url"

	"github.com/keep-run/keep/internal/apitype"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// Webhooks lists a workflow's webhooks (its active version's) with their
// newest deliveries, newest first, at most limit. base is where webhooks
// are served ("http://ADDR"; "" for nowhere).
func Webhooks(ctx context.Context, st store.Store, wf, base string, limit int) ([]apitype.Webhook, []apitype.Delivery, []apitype.Delivery, error) {
	hooks, ds, cs, err := deliveriesOf(ctx, st, wf, limit)
	if err != nil {
		return nil, nil, nil, err
	}
	var held []kt.Delivery
	if err := st.View(ctx, func(tx store.Tx) error {
		var err error
		held, err = tx.DeliveryHeld(wf, "", 0)
		return err
	}); err != nil {
		return nil, nil, nil, err
	}
	out := make([]apitype.Webhook, 0, len(hooks))
	for _, h := range hooks {
		v := apitype.Webhook{Name: h.Name, Path: "/hooks/" + url.PathEscape(wf) + "/" + url.PathEscape(h.Name), Verify: h.Verify.Kind, Header: h.Verify.Header,
			Secret: h.Verify.Secret, Dedupe: "body hash", Publishes: nonNilStrings(h.Publishes), Counts: map[string]int{}}
		if base != "" {
			v.URL = base + v.Path
		}
		switch {
		case h.Dedupe.Header != "":
			v.Dedupe = "header " + h.Dedupe.Header
		case h.Dedupe.JSON != "":
			v.Dedupe = "json " + h.Dedupe.JSON
		}
		for _, st := range []kt.DeliveryStatus{kt.DeliveryAccepted, kt.DeliveryDuplicate, kt.DeliveryHeld, kt.DeliveryRefused, kt.DeliveryFailed} {
			v.Counts[string(st)] = 0
		}
		for _, c := range cs {
			if c.Webhook == h.Name {
				v.Counts[string(c.Status)] = c.Count
			}
		}
		out = append(out, v)
	}
	return out, deliveryRows(ds), deliveryRows(held), nil
}

func deliveryRows(ds []kt.Delivery) []apitype.Delivery {
	out := make([]apitype.Delivery, 0, len(ds))
	for _, d := range ds {
		out = append(out, apitype.Delivery{Record: d.ID, Webhook: d.Webhook, DeliveryID: d.DeliveryID, Status: string(d.Status), Reason: d.Reason,
			Inputs: d.Inputs, Events: d.Events, ReceivedAt: Time(d.ReceivedAt), HeldFor: d.HeldFor})
	}
	return out
}

// deliveriesOf lists a workflow's webhooks as its active version declares
// them, with their newest deliveries (at most limit) and their counts: a
// read of what people see, so report's (it was the engine's). When that
// version's stored script is damaged (kt.IsDamaged) no webhook is listed,
// but the deliveries are: those held until it is restored say so.
func deliveriesOf(ctx context.Context, st store.Store, wf string, limit int) ([]script.Webhook, []kt.Delivery, []kt.DeliveryCount, error) {
	var v kt.Version
	var ds []kt.Delivery
	var cs []kt.DeliveryCount
	var damaged bool
	if err := st.View(ctx, func(tx store.Tx) error {
		w, err := transition.Workflow(tx, wf)
		if err != nil {
			return err
		}
		v, err = tx.VersionGet(wf, w.ActiveVersion)
		damaged = kt.IsDamaged(err)
		if err != nil && !damaged {
			return err
		}
		if ds, err = tx.DeliveryList(wf, limit); err != nil {
			return err
		}
		cs, err = tx.DeliveryCounts(wf)
		return err
	}); err != nil {
		return nil, nil, nil, err
	}
	if damaged {
		return nil, ds, cs, nil
	}
	decl, err := script.Declare(v.File, v.Script)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read the declaration of %s version %s: %w", wf, v.Label(), err)
	}
	var hooks []script.Webhook
	for _, n := range decl.WebhookNames() {
		wh, _, _ := decl.Webhook(n)
		hooks = append(hooks, wh)
	}
	return hooks, ds, cs, nil
}
