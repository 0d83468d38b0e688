package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	otrace "go.opentelemetry.io/otel/trace"

	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/hookreq"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// Webhooks carries out requests to workflows' webhooks (issue 41: a
// webhook's delivery is intake's, not the engine's): their verification,
// their record, holding those keep cannot take yet and taking them once
// their reason is gone, and the one transaction that writes what a
// handler made through the one producer writer (transition.WriteProduced).
// The handler itself runs in the engine's sandbox (engine.RunWebhook).
// It is the webhooks' listener's hooks.Deliverer.
type Webhooks struct {
	e *engine.Engine
}

// NewWebhooks is the webhook delivery of e's workflows.
func NewWebhooks(e *engine.Engine) *Webhooks { return &Webhooks{e: e} }

// keepDeliveries is how many deliveries of a webhook keep remembers per
// status that is not accepted (the newest): a sender, or anyone, refused a
// million times does not fill the store, nor pushes out the failed ones.
// Accepted ones stay: a retry is found by them.
const keepDeliveries = 1000

// keepHeld bounds the deliveries keep holds per webhook (and, for webhooks
// the active version does not declare, per workflow), with keepHeldBytes.
// Past either the sender is answered 503 (hookreq.WhyHeldFull) and the refusal
// is recorded: never a silent drop.
const keepHeld = 100

// keepHeldBytes bounds the bytes of the requests a webhook holds (as
// received, the body in base64): at the largest webhook_max_body (16 MiB)
// a hundred would be 2 GiB of the store.
const keepHeldBytes = 64 << 20

// Deliver carries out one request to a webhook: verified with the secret
// its declaration names (a request that fails never reaches the handler),
// found by its delivery id when accepted before (nothing changes), else its
// handler run in the sandbox as a producer runs, and what it registered and
// published committed in one transaction with the delivery's record
// (transition.WriteProduced, as a producer's and the event API's are): the sender is
// answered 2xx only once Deliver returns hookreq.WhyAccepted or hookreq.WhyDuplicate. Every
// delivery but one to an unknown webhook is recorded (kt.Delivery).
func (k *Webhooks) Deliver(ctx context.Context, h hookreq.Hook) (hookreq.Delivered, error) {
	ctx, span := startDelivery(ctx, k.e.Tracer(), h)
	d, err := k.deliver(ctx, h)
	endDelivery(span, d, err)
	if err == nil && d.Status != "" {
		k.e.NoteDelivered(h.Workflow, h.Name, d.Status)
	}
	return d, err
}

func (k *Webhooks) deliver(ctx context.Context, h hookreq.Hook) (hookreq.Delivered, error) {
	return k.deliverAs(ctx, h, kt.Delivery{Workflow: h.Workflow, Webhook: h.Name, ReceivedAt: k.e.NowMs()})
}

// deliverAs carries out h as the delivery d: a new one (d.ID 0), or one
// held before (kt.DeliveryHeld), whose record is then settled in place
// (DeliverySettle: only while it is still held, so two takers take it
// once) and whose signature is checked against the clock of its receipt.
// A held delivery that cannot be taken yet is held again, saying why: its
// sender was answered 202 and will not send it again.
func (k *Webhooks) deliverAs(ctx context.Context, h hookreq.Hook, d kt.Delivery) (hookreq.Delivered, error) {
	w, v, prog, err := k.activeProgram(ctx, h.Workflow)
	if err != nil {
		if kt.IsDamaged(err) {
			return k.damaged(ctx, h, d, w, err)
		}
		if errors.Is(err, kt.ErrNotFound) {
			if d.ID != 0 {
				return k.record(ctx, d, kt.DeliveryRefused, hookreq.WhyNotFound, fmt.Sprintf("workflow %s no longer exists; nothing of this held delivery was kept", h.Workflow))
			}
			return hookreq.Delivered{Why: hookreq.WhyNotFound, Message: err.Error()}, nil
		}
		return hookreq.Delivered{}, err
	}
	wh, problems, ok := prog.Decl.Webhook(h.Name)
	if !ok {
		return k.undeclared(ctx, h, d, v, prog)
	}
	if len(problems) > 0 {
		msg := fmt.Sprintf("webhook %s of %s is not declared right (%s); fix the script and deploy it", h.Name, h.Workflow, strings.Join(problems, "; "))
		if d.ID != 0 {
			return k.hold(ctx, d, h, heldForVersion(v), msg+"; held until then")
		}
		return k.record(ctx, d, kt.DeliveryFailed, hookreq.WhyFailed, msg)
	}
	if h.TooLarge {
		pol, err := k.e.PolicyFor(w)
		if err != nil {
			return hookreq.Delivered{}, err
		}
		return k.record(ctx, d, kt.DeliveryRefused, hookreq.WhyTooLarge, fmt.Sprintf("the body is over the webhook_max_body of %s's [policy] (%d bytes); it was not read", h.Workflow, pol.WebhookMaxBody))
	}
	if out, settled, err := k.verified(ctx, wh, h, &d); settled || err != nil {
		return out, err
	}
	h.Verified = true // held from here on, it is not verified again at its take
	if d.DeliveryID, err = hookreq.DeliveryID(wh.Dedupe, h); err != nil {
		return k.record(ctx, d, kt.DeliveryRefused, hookreq.WhyBadInput, err.Error())
	}
	var had kt.Delivery
	err = k.e.Store().View(ctx, func(tx store.Tx) error {
		var err error
		had, err = tx.DeliveryAccepted(h.Workflow, h.Name, d.DeliveryID)
		return err
	})
	switch {
	case err == nil:
		return k.record(ctx, d, kt.DeliveryDuplicate, hookreq.WhyDuplicate, duplicateText(had))
	case !errors.Is(err, kt.ErrNotFound):
		return hookreq.Delivered{}, err
	}
	return k.handle(ctx, engine.WebhookTarget{Workflow: w, Version: v, Program: prog, Webhook: wh}, h, d)
}

// undeclared settles a delivery to a webhook the active version v does
// not declare: held until a version that declares it is deployed (the
// sender was set up before it was: GitHub sends its ping at once), or
// refused when its body was too large to read (nothing to hold).
func (k *Webhooks) undeclared(ctx context.Context, h hookreq.Hook, d kt.Delivery, v kt.Version, prog *script.Program) (hookreq.Delivered, error) {
	names := strings.Join(prog.Decl.WebhookNames(), ", ")
	if names == "" {
		names = "none"
	}
	if h.TooLarge {
		return k.record(ctx, d, kt.DeliveryRefused, hookreq.WhyTooLarge, fmt.Sprintf("the body is over the webhook_max_body of %s's [policy]; it was not read", h.Workflow))
	}
	return k.hold(ctx, d, h, kt.HeldForDeploy+":"+h.Name, fmt.Sprintf("the active version of %s (%s) declares no webhook %q (its webhooks: %s); held until a version that declares it is deployed", h.Workflow, v.Label(), h.Name, names))
}

// verified checks h against wh's verify and answers Slack's URL
// verification. settled says the delivery ends here (refused, held for
// its secret, or the challenge answered): out is its answer. A held
// delivery (d.ID set) is named by its dedupe whatever becomes of it; one
// verified before (h.Verified: on receipt, or at an earlier take) is not
// verified again — its secret may have been rotated since — and one held
// unverified is judged against the clock of its receipt.
func (k *Webhooks) verified(ctx context.Context, wh script.Webhook, h hookreq.Hook, d *kt.Delivery) (out hookreq.Delivered, settled bool, err error) {
	at := k.e.WallNow() // a sender's signed timestamp is its wall clock's: judged against ours
	if d.ID != 0 {
		at = time.UnixMilli(d.ReceivedAt) // a signed timestamp is judged as of its receipt
		if id, err := hookreq.DeliveryID(wh.Dedupe, h); err == nil {
			d.DeliveryID = id // named as its sender names it, whatever becomes of it
		}
		if h.Verified {
			return hookreq.Delivered{}, false, nil
		}
	}
	if why, msg, err := k.verifyHook(ctx, wh, h, at); err != nil || why != "" {
		if err != nil {
			return hookreq.Delivered{}, true, err
		}
		if why == hookreq.WhyNoSecret && k.e.OpensSecrets() {
			// Kept unverified: verified once the secret is set, and
			// refused then (recorded) if its signature fails.
			if id, err := hookreq.DeliveryID(wh.Dedupe, h); err == nil {
				d.DeliveryID = id
			}
			out, err = k.hold(ctx, *d, h, kt.HeldForSecret+":"+wh.Verify.Secret, msg+"; held unverified: it is verified, and taken or refused, once the secret is set")
			return out, true, err
		}
		if d.ID != 0 && why == hookreq.WhyBadSig {
			msg = "held, then verified once the secret was set: " + msg
		}
		out, err = k.record(ctx, *d, kt.DeliveryRefused, why, msg)
		return out, true, err
	}
	challenge, ok := hookreq.SlackChallenge(wh, h)
	if ok && d.ID != 0 {
		// Held while its secret was not set: Slack wanted the challenge
		// back at once, and checks the URL again when it is saved.
		out, err = k.record(ctx, *d, kt.DeliveryRefused, hookreq.WhyChallenge, "Slack's URL verification, held while the secret was not set, cannot be answered now: save the Request URL in the Slack app's settings again to have it checked")
		return out, true, err
	}
	if ok {
		// Slack checks an Events API URL with a signed challenge it must
		// get back before it sends any event: a handshake, not a delivery.
		reply, _ := json.Marshal(map[string]string{"challenge": challenge})
		return hookreq.Delivered{Why: hookreq.WhyChallenge, Reply: reply, Message: "answered Slack's URL verification"}, true, nil
	}
	return hookreq.Delivered{}, false, nil
}

// activeProgram reads a workflow, its active version and that version's program.
func (k *Webhooks) activeProgram(ctx context.Context, wf string) (kt.Workflow, kt.Version, *script.Program, error) {
	var w kt.Workflow
	var v kt.Version
	if err := k.e.Store().View(ctx, func(tx store.Tx) error {
		var err error
		if w, err = transition.Workflow(tx, wf); err != nil {
			return err
		}
		v, err = tx.VersionGet(wf, w.ActiveVersion)
		return err
	}); err != nil {
		return w, v, nil, err
	}
	prog, err := k.e.Program(ctx, wf, v.ID)
	return w, v, prog, err
}

// handle runs the webhook's handler for a verified, new delivery
// (engine.RunWebhook) and commits what it did with the delivery's record,
// inside the handler's phase (its span covers the commit).
func (k *Webhooks) handle(ctx context.Context, t engine.WebhookTarget, h hookreq.Hook, d kt.Delivery) (hookreq.Delivered, error) {
	req, err := hookreq.Request(t.Webhook, h)
	if err != nil {
		return hookreq.Delivered{}, err
	}
	// out is settle's, as it said it: zero when keep failed before the
	// handler ran.
	var out hookreq.Delivered
	err = k.e.RunWebhook(ctx, t, req, func(m engine.WebhookMade) error {
		var err error
		out, err = k.settle(ctx, t, h, d, m)
		return err
	})
	return out, err
}

// settle writes what a delivery's handler made (m): held or recorded when
// it failed, else committed with the delivery's record.
func (k *Webhooks) settle(ctx context.Context, t engine.WebhookTarget, h hookreq.Hook, d kt.Delivery, m engine.WebhookMade) (hookreq.Delivered, error) {
	if m.HandlerFailed {
		if m.NeedsGrant != "" {
			// The input source (or what else the handler reaches) is not
			// granted yet: keep's reason, not the sender's. Held until it
			// is given, or another version is active.
			return k.hold(ctx, d, h, heldForGrant(m.NeedsGrant, t.Version), m.Failed)
		}
		if d.ID != 0 {
			// Its sender was answered 202 and will not send it again:
			// held until a fix is deployed, or a person takes or drops it.
			return k.hold(ctx, d, h, heldForVersion(t.Version), m.Failed)
		}
		return k.record(ctx, d, kt.DeliveryFailed, hookreq.WhyFailed, m.Failed)
	}
	var out hookreq.Delivered
	err := k.e.Store().Update(ctx, func(tx store.Tx) error {
		var err error
		out, err = k.commitDelivery(tx, t, h, d, m)
		return err
	})
	if err != nil {
		return hookreq.Delivered{}, err
	}
	k.e.Changed(t.Workflow.Name)
	return out, nil
}

// commitDelivery writes, inside tx, what a delivery's handler made with
// the delivery's record: unless a deploy came in while it ran (nothing it
// did is kept, and the delivery is held for the new version: a sender such
// as GitHub does not send it again), or the same delivery was accepted
// meanwhile (a duplicate).
func (k *Webhooks) commitDelivery(tx store.Tx, t engine.WebhookTarget, h hookreq.Hook, d kt.Delivery, m engine.WebhookMade) (hookreq.Delivered, error) {
	w, v := t.Workflow, t.Version
	cur, err := transition.Workflow(tx, w.Name)
	if err != nil {
		return hookreq.Delivered{}, err
	}
	if cur.ActiveVersion != v.ID {
		return holdIn(tx, d, h, heldForVersion(v), fmt.Sprintf("workflow %s was deployed while this delivery's handler ran (version %s is no longer active); nothing it did was kept, and it is taken again with the new version", w.Name, v.Label()))
	}
	if had, err := tx.DeliveryAccepted(w.Name, t.Webhook.Name, d.DeliveryID); err == nil {
		return deliveryRecord(tx, d, kt.DeliveryDuplicate, hookreq.WhyDuplicate, duplicateText(had))
	} else if !errors.Is(err, kt.ErrNotFound) {
		return hookreq.Delivered{}, err
	}
	inputs, publishes, err := sameInputs(tx, w.Name, m.Inputs, m.Publishes, m.Created)
	if err != nil {
		return hookreq.Delivered{}, err
	}
	evs, err := transition.WriteProduced(tx, transition.Produced{Workflow: w.Name, Version: v.ID, Consumers: t.Program.Decl.ConsumerOf(), CreatedBy: transition.CreatedByWebhook, Fresh: m.Created, Inputs: inputs, Publishes: publishes, Now: k.e.NowMs()})
	if err != nil {
		return hookreq.Delivered{}, err
	}
	d.Inputs, d.Events = len(inputs), len(evs)
	k.e.CrashPoint(engine.CrashInsideDelivery)
	return deliveryRecord(tx, d, kt.DeliveryAccepted, hookreq.WhyAccepted, fmt.Sprintf("%s registered, %s published", kt.Count(len(inputs), "input"), kt.Count(len(evs), "event")))
}

// sameInputs checks the inputs a delivery created (by id) by key within
// its transaction: a delivery that ran at the same time as this one may
// have registered the same input since its handler looked (two deliveries
// about one order). Such an input is the stored one, no longer created
// here; the events name it.
func sameInputs(tx store.Tx, wf string, inputs []kt.Input, pubs []transition.Publish, created map[string]bool) ([]kt.Input, []transition.Publish, error) {
	renamed := map[string]string{}
	out := make([]kt.Input, 0, len(inputs))
	for _, in := range inputs {
		if created[in.ID] {
			had, err := tx.InputGetByKey(wf, in.Key)
			switch {
			case err == nil:
				delete(created, in.ID)
				renamed[in.ID] = had.ID
				had.Title, had.UpdatedAt = in.Title, in.UpdatedAt
				in = had
			case !errors.Is(err, kt.ErrNotFound):
				return nil, nil, err
			}
		}
		out = append(out, in)
	}
	for i, p := range pubs {
		if id, ok := renamed[p.InputID]; ok {
			if p.MessageID == p.InputID {
				pubs[i].MessageID = id
			}
			pubs[i].InputID = id
		}
	}
	return out, pubs, nil
}

// record stores a delivery that was not accepted, in a transaction of its own.
func (k *Webhooks) record(ctx context.Context, d kt.Delivery, st kt.DeliveryStatus, why hookreq.Why, msg string) (hookreq.Delivered, error) {
	var out hookreq.Delivered
	err := k.e.Store().Update(ctx, func(tx store.Tx) error {
		var err error
		out, err = deliveryRecord(tx, d, st, why, msg)
		return err
	})
	if err == nil {
		k.e.Changed(d.Workflow)
	}
	return out, err
}

// deliveryRecord writes a delivery's record inside tx; a delivery that was
// not accepted makes room for itself (keepDeliveries).
func deliveryRecord(tx store.Tx, d kt.Delivery, st kt.DeliveryStatus, why hookreq.Why, msg string) (hookreq.Delivered, error) {
	wasHeld := d.ID != 0
	d.Status, d.Reason = st, msg
	if d.DeliveryID == "" {
		d.DeliveryID = "-" // refused before its id was read
	}
	if wasHeld {
		if err := tx.DeliverySettle(&d); err != nil {
			return hookreq.Delivered{}, err
		}
	} else if err := tx.DeliveryAdd(&d); err != nil {
		return hookreq.Delivered{}, err
	}
	if st != kt.DeliveryAccepted {
		if err := tx.DeliveryPrune(d.Workflow, d.Webhook, st, keepDeliveries); err != nil {
			return hookreq.Delivered{}, err
		}
	}
	return hookreq.Delivered{Status: st, Why: why, DeliveryID: d.DeliveryID, Record: d.ID, Inputs: d.Inputs, Events: d.Events,
		Message: fmt.Sprintf("webhook %s of %s, delivery %s: %s: %s", d.Webhook, d.Workflow, d.DeliveryID, st, msg)}, nil
}

func duplicateText(had kt.Delivery) string {
	return fmt.Sprintf("accepted before (delivery record %d: %s); nothing changed", had.ID, had.Reason)
}

// WebhookMaxBody is the largest body a webhook of wf takes: the
// webhook_max_body of the [policy] wf was deployed under (this keep's for
// a workflow it does not know, which Deliver then refuses).
func (k *Webhooks) WebhookMaxBody(ctx context.Context, wf string) int64 {
	var w kt.Workflow
	if err := k.e.Store().View(ctx, func(tx store.Tx) error {
		var err error
		w, err = tx.WorkflowGet(wf)
		return err
	}); err != nil {
		return int64(k.e.Policy().WebhookMaxBody)
	}
	pol, err := k.e.PolicyFor(w)
	if err != nil {
		return int64(k.e.Policy().WebhookMaxBody)
	}
	return int64(pol.WebhookMaxBody)
}

// startDelivery opens the span of one request to a webhook (Deliver): a
// server span, whatever keep makes of it; its handler's phase and reads
// are its children (the engine's, engine.RunWebhook).
func startDelivery(ctx context.Context, tracer otrace.Tracer, h hookreq.Hook) (context.Context, otrace.Span) {
	if tracer == nil {
		return ctx, nil
	}
	ctx, span := tracer.Start(ctx, "webhook "+h.Workflow+"/"+h.Name, otrace.WithSpanKind(otrace.SpanKindServer),
		otrace.WithAttributes(attribute.String(engine.AttrWorkflow, h.Workflow), attribute.String(engine.AttrWebhook, h.Name)))
	if !span.IsRecording() {
		span.End()
		return ctx, nil
	}
	return ctx, span
}

// endDelivery ends a delivery's span with what keep made of it: its
// status (accepted, duplicate, refused, failed), why, its delivery id and
// what it registered; an error status when the handler failed or keep did.
// A refusal is the sender's error, not keep's: it is in the attributes.
func endDelivery(span otrace.Span, d hookreq.Delivered, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String(engine.AttrDelivery, string(d.Status)), attribute.String(engine.AttrDeliveryWhy, string(d.Why)),
		attribute.String(engine.AttrDeliveryID, d.DeliveryID), attribute.Int(engine.AttrInputs, d.Inputs), attribute.Int(engine.AttrEvents, d.Events))
	switch {
	case err != nil:
		span.SetStatus(codes.Error, kt.Clip(redact.String(err.Error()), engine.MaxErrorText))
	case d.Status == kt.DeliveryFailed:
		span.SetStatus(codes.Error, kt.Clip(redact.String(d.Message), engine.MaxErrorText))
	}
	span.End()
}
