package report

import (
	"context"
	"net/url"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// Webhook is one webhook of a workflow as people see it: where it is
// served, how it is verified (the secret's name, never its value), where
// its delivery id comes from, what it publishes, and its deliveries counted.
type Webhook struct {
	Name string `json:"name"`
	// Path is POST's path (/hooks/WF/NAME); URL adds the address of keep
	// serve --webhooks-addr, "" when none serves webhooks.
	Path      string         `json:"path"`
	URL       string         `json:"url"`
	Verify    string         `json:"verify"` // hmac, stripe, slack, token
	Header    string         `json:"header,omitempty"`
	Secret    string         `json:"secret"`
	Dedupe    string         `json:"dedupe"` // "header X-GitHub-Delivery", "json id", "body hash"
	Publishes []string       `json:"publishes"`
	Counts    map[string]int `json:"counts"` // by status: accepted, duplicate, refused, failed
}

// Delivery is one request a webhook received.
type Delivery struct {
	Webhook    string `json:"webhook"`
	DeliveryID string `json:"delivery"`
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	Inputs     int    `json:"inputs"`
	Events     int    `json:"events"`
	ReceivedAt string `json:"receivedAt"`
}

// Webhooks lists a workflow's webhooks (its active version's) with their
// newest deliveries, newest first, at most limit. base is where webhooks
// are served ("http://ADDR"; "" for nowhere).
func Webhooks(ctx context.Context, st store.Store, wf, base string, limit int) ([]Webhook, []Delivery, error) {
	hooks, ds, cs, err := engine.DeliveriesOf(ctx, st, wf, limit)
	if err != nil {
		return nil, nil, err
	}
	out := make([]Webhook, 0, len(hooks))
	for _, h := range hooks {
		v := Webhook{Name: h.Name, Path: "/hooks/" + url.PathEscape(wf) + "/" + url.PathEscape(h.Name), Verify: h.Verify.Kind, Header: h.Verify.Header,
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
		for _, st := range []kt.DeliveryStatus{kt.DeliveryAccepted, kt.DeliveryDuplicate, kt.DeliveryRefused, kt.DeliveryFailed} {
			v.Counts[string(st)] = 0
		}
		for _, c := range cs {
			if c.Webhook == h.Name {
				v.Counts[string(c.Status)] = c.Count
			}
		}
		out = append(out, v)
	}
	deliveries := make([]Delivery, 0, len(ds))
	for _, d := range ds {
		deliveries = append(deliveries, Delivery{Webhook: d.Webhook, DeliveryID: d.DeliveryID, Status: string(d.Status), Reason: d.Reason,
			Inputs: d.Inputs, Events: d.Events, ReceivedAt: Time(d.ReceivedAt)})
	}
	return out, deliveries, nil
}
