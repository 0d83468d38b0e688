package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/hookreq"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// Held deliveries (issue 40 #1). A sender such as GitHub does not send a
// delivery again by itself; one keep cannot take for a reason of its own
// (kt.HeldForDeploy, kt.HeldForSecret, kt.HeldForGrant, heldForDamaged; a
// deploy that overtook its handler, heldForVersion) is kept with its
// request, the sender answered 202, and taken once the reason is gone
// (TakeAllHeld, which keep serve calls), or at once when a person asks
// (HeldAction: take or drop). A held delivery that later fails in its handler is held
// again until a new version is deployed (heldForHandler): its sender will
// not send it again either.

// heldForHandler is what a held delivery whose handler failed under a
// version waits for: another version.
const heldForHandler = "handler"

func heldForVersion(v kt.Version) string {
	return heldForHandler + ":" + strconv.FormatInt(v.ID, 10)
}

// heldForGrant is what a delivery whose handler, under version v, was
// refused the grant item waits for: "grant:ITEM@VERSION" — the grant
// given, or another version active (taken then, it runs with that one:
// accepted, or held again for what that one needs). A grant item never
// holds '@' (kt.CheckGrantItem, which kt.NeededGrant applies).
func heldForGrant(item string, v kt.Version) string {
	return kt.HeldForGrant + ":" + item + "@" + strconv.FormatInt(v.ID, 10)
}

// grantHeld reads what a delivery held for a grant (heldForGrant) waits
// for: the grant item and the version it was refused under, "" for a hold
// written before the version was (it waits for the grant alone).
func grantHeld(what string) (item, version string) {
	if i := strings.LastIndexByte(what, '@'); i >= 0 {
		return what[:i], what[i+1:]
	}
	return what, ""
}

// heldForDamaged is what a delivery to a workflow whose active version's
// stored script is damaged (kt.IsDamaged) waits for: that version's
// script read again (restored), or another version deployed. Which
// webhooks it declares cannot be read: its bound is the workflow's, as
// for undeclared names (workflowHeld).
const heldForDamaged = "damaged"

// workflowHeld says whether deliveries held for heldFor are bounded per
// workflow rather than per webhook: names no version declares, and names
// of a workflow whose declaration cannot be read, are anyone's to make up.
func workflowHeld(heldFor string) bool {
	return strings.HasPrefix(heldFor, kt.HeldForDeploy+":") || strings.HasPrefix(heldFor, heldForDamaged+":")
}

// damaged settles a delivery to workflow w whose active version's stored
// script is damaged (the error damage): held until it is restored or
// another version deployed (its sender answered 202, the damage in its
// record), or refused when its body was too large to read. If the hold
// cannot be written, a new one is refused and recorded, the sender
// answered 503 with Retry-After.
func (k *Webhooks) damaged(ctx context.Context, h hookreq.Hook, d kt.Delivery, w kt.Workflow, damage error) (hookreq.Delivered, error) {
	if h.TooLarge {
		return k.record(ctx, d, kt.DeliveryRefused, hookreq.WhyTooLarge, fmt.Sprintf("the body is over the webhook_max_body of %s's [policy]; it was not read", h.Workflow))
	}
	said := fmt.Sprintf("workflow %s's stored script is damaged; held until it is restored or the workflow deployed again", h.Workflow)
	out, err := k.hold(ctx, d, h, heldForDamaged+":"+strconv.FormatInt(w.ActiveVersion, 10), said+": "+damage.Error())
	if err != nil && d.ID == 0 {
		out, rerr := k.record(ctx, d, kt.DeliveryRefused, hookreq.WhyHeldFull, fmt.Sprintf("%s, but the hold could not be written (%v); nothing of it was kept: send it again", said, err))
		if rerr != nil {
			return hookreq.Delivered{}, errors.Join(err, rerr)
		}
		return out, nil
	}
	return out, err
}

// hold keeps d (new, or held before and held again) for the reason
// heldFor, in a transaction of its own.
func (k *Webhooks) hold(ctx context.Context, d kt.Delivery, h hookreq.Hook, heldFor, msg string) (hookreq.Delivered, error) {
	var out hookreq.Delivered
	err := k.e.Store().Update(ctx, func(tx store.Tx) error {
		var err error
		out, err = holdIn(tx, d, h, heldFor, msg)
		return err
	})
	if err == nil {
		k.e.Changed(d.Workflow)
	}
	return out, err
}

// holdIn holds d inside tx: a delivery held before is settled as held
// again (its request kept); a new one is added within keepHeld and
// keepHeldBytes, else refused and recorded as such (hookreq.WhyHeldFull).
func holdIn(tx store.Tx, d kt.Delivery, h hookreq.Hook, heldFor, msg string) (hookreq.Delivered, error) {
	if d.DeliveryID == "" {
		d.DeliveryID = heldDeliveryID(h)
	}
	req, err := json.Marshal(h)
	if err != nil {
		return hookreq.Delivered{}, err
	}
	if d.ID != 0 && bytes.Equal(req, d.Request) {
		d.Request = nil // held again as it was stored: DeliverySettle keeps it
	} else {
		d.Request = req // new, or what keep learned of it since (verified at its take)
	}
	if d.ID == 0 {
		scope := d.Webhook
		if workflowHeld(heldFor) {
			scope = "" // the workflow's bound, not each name's
		}
		n, size, err := tx.DeliveryHeldCount(d.Workflow, scope)
		if err != nil {
			return hookreq.Delivered{}, err
		}
		if n >= keepHeld || size+int64(len(req)) > keepHeldBytes {
			d.Request = nil // refused: nothing of it is kept but its record
			return deliveryRecord(tx, d, kt.DeliveryRefused, hookreq.WhyHeldFull, fmt.Sprintf("%s; keep holds %d deliveries of %s already (%.1f MiB; it holds at most %d, %d MiB), so this one was not kept: send it again once that is done, or take or drop the held ones (keep webhooks %s --take or --drop)", msg, n, holdScope(d, heldFor), float64(size)/(1<<20), keepHeld, keepHeldBytes>>20, d.Workflow))
		}
	}
	d.Status, d.HeldFor, d.Reason = kt.DeliveryHeld, heldFor, msg
	if d.ID == 0 {
		if err := tx.DeliveryAdd(&d); err != nil {
			return hookreq.Delivered{}, err
		}
	} else if err := tx.DeliverySettle(&d); err != nil {
		return hookreq.Delivered{}, err
	}
	return hookreq.Delivered{Status: kt.DeliveryHeld, Why: hookreq.WhyHeld, DeliveryID: d.DeliveryID, Record: d.ID,
		Message: fmt.Sprintf("webhook %s of %s, delivery %s: held (record %d): %s; it is taken once that is done, or by a person (keep webhooks %s --take)", d.Webhook, d.Workflow, d.DeliveryID, d.ID, msg, d.Workflow)}, nil
}

func holdScope(d kt.Delivery, heldFor string) string {
	if strings.HasPrefix(heldFor, heldForDamaged+":") {
		return "workflow " + d.Workflow + " while its stored script is damaged, or of its undeclared webhooks"
	}
	if workflowHeld(heldFor) {
		return "workflow " + d.Workflow + "'s undeclared webhooks or webhook " + d.Webhook
	}
	return "webhook " + d.Webhook + " of " + d.Workflow
}

// heldDeliveryID names a held delivery before its webhook's dedupe can be
// read (no declaration yet): its body's hash, as a webhook without dedupe
// names its deliveries. Taken, it gets the id its dedupe reads.
func heldDeliveryID(h hookreq.Hook) string {
	id, _ := hookreq.DeliveryID(script.Dedupe{}, h)
	return id
}

// HeldTaken says what a take of held deliveries came to.
type HeldTaken struct {
	Taken int      // settled: accepted, duplicate, refused (a bad signature once verified)
	Held  int      // still held (their reason is not gone)
	Lines []string // one line per delivery taken
}

// TakeAllHeld takes, in every workflow that holds deliveries, those whose
// reason is gone; keep serve calls it at each of its passes. A workflow
// that cannot be taken from (its storage damaged) does not stop the
// others: its error is returned with theirs once each was tried.
func (k *Webhooks) TakeAllHeld(ctx context.Context) error {
	var wfs []string
	if err := k.e.Store().View(ctx, func(tx store.Tx) error {
		var err error
		wfs, err = tx.DeliveryHeldWorkflows()
		return err
	}); err != nil {
		return err
	}
	var errs []error
	for _, wf := range wfs {
		if _, err := k.TakeHeld(ctx, wf); err != nil {
			errs = append(errs, fmt.Errorf("workflow %s: %w", wf, err))
		}
	}
	return errors.Join(errs...)
}

// TakeHeld takes the held deliveries of wf whose reason is gone (a
// person's take is one: HeldForPerson), each as it came, oldest first.
// One still blocked is held again, saying why.
func (k *Webhooks) TakeHeld(ctx context.Context, wf string) (HeldTaken, error) {
	var out HeldTaken
	var held []kt.Delivery
	if err := k.e.Store().View(ctx, func(tx store.Tx) error {
		var err error
		held, err = tx.DeliveryHeld(wf, "", 0)
		return err
	}); err != nil {
		return out, err
	}
	// What each reason came to in this pass: a hundred deliveries held for
	// one secret are one look at it.
	gone := map[string]bool{}
	for _, d := range held {
		g, seen := gone[d.HeldFor]
		if !seen {
			var err error
			if g, err = k.heldReasonGone(ctx, d); err != nil {
				return out, err
			}
			gone[d.HeldFor] = g
		}
		if !g {
			out.Held++
			continue
		}
		if err := k.e.Store().View(ctx, func(tx store.Tx) error {
			var err error
			d, err = tx.DeliveryHeldGet(d.ID) // its request, read now it is taken
			return err
		}); errors.Is(err, kt.ErrNotFound) {
			continue // settled meanwhile (another node, a person's drop)
		} else if err != nil {
			return out, err
		}
		var h hookreq.Hook
		if err := json.Unmarshal(d.Request, &h); err != nil {
			return out, fmt.Errorf("read held delivery %d of webhook %s of %s: %w", d.ID, d.Webhook, wf, err)
		}
		got, err := k.deliverAs(ctx, h, d)
		if errors.Is(err, store.ErrStale) {
			continue // another taker (a node, a person's drop) settled it first
		}
		if err != nil {
			return out, err
		}
		if got.Status != "" {
			k.e.NoteDelivered(d.Workflow, d.Webhook, got.Status)
		}
		if got.Status == kt.DeliveryHeld {
			out.Held++
		} else {
			out.Taken++
		}
		out.Lines = append(out.Lines, got.Message)
	}
	return out, nil
}

// HeldForPerson is what a held delivery a person asked to take waits
// for: nothing (keep serve takes it at its next pass, within a second).
const HeldForPerson = "person"

// heldReasonGone says whether what d waits for is done: the webhook
// declared by the active version, the secret set, the grant given (or
// another version active than the one its handler was refused it under),
// another version deployed.
func (k *Webhooks) heldReasonGone(ctx context.Context, d kt.Delivery) (bool, error) {
	kind, what, _ := strings.Cut(d.HeldFor, ":")
	var gone bool
	var active int64
	err := k.e.Store().View(ctx, func(tx store.Tx) error {
		w, err := tx.WorkflowGet(d.Workflow)
		if errors.Is(err, kt.ErrNotFound) {
			gone = true // taken, it is refused: the workflow is gone
			return nil
		}
		if err != nil {
			return err
		}
		active = w.ActiveVersion
		switch kind {
		case kt.HeldForDeploy:
			prog, err := k.e.Program(ctx, d.Workflow, w.ActiveVersion)
			if kt.IsDamaged(err) {
				gone = true // taken, it is held again for the damage (heldForDamaged), saying so
				return nil
			}
			if err != nil {
				return err
			}
			_, _, gone = prog.Decl.Webhook(what)
		case kt.HeldForGrant:
			item, under := grantHeld(what)
			if under != "" && under != strconv.FormatInt(w.ActiveVersion, 10) {
				gone = true // another version: taken, it runs with that one
				return nil
			}
			gs, err := tx.GrantList(d.Workflow)
			if err != nil {
				return err
			}
			gone = engine.GrantedIn(gs, item)
		case heldForHandler:
			gone = strconv.FormatInt(w.ActiveVersion, 10) != what
		case HeldForPerson:
			gone = true
		case kt.HeldForSecret, heldForDamaged:
			// Below, outside this transaction: the secret is opened
			// through keep's own (engine.OpenSecret), the script read by
			// engine.Program.
		default:
			gone = true // a reason this keep does not know: try it
		}
		return nil
	})
	if err != nil || gone || (kind != kt.HeldForSecret && kind != heldForDamaged) {
		return gone, err
	}
	if kind == heldForDamaged {
		// Gone once the active version's script is read: restored, or
		// another version deployed.
		_, err := k.e.Program(ctx, d.Workflow, active)
		if kt.IsDamaged(err) {
			return false, nil
		}
		return err == nil, err
	}
	if !k.e.OpensSecrets() {
		return false, nil
	}
	if still, err := k.verifiesWith(ctx, d, active, what); err != nil || !still {
		return !still, err
	}
	_, err = k.e.OpenSecret(ctx, what)
	if errors.Is(err, kt.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// verifiesWith says whether the active version (active) of d's workflow
// still verifies d's webhook with the secret d is held for. When it does
// not (a version deployed since names another secret, no longer declares
// the webhook, or its stored script is damaged), d's reason is gone: taken,
// it is judged by the declaration of the version active now — verified with
// the secret that one names, or held again for what that one waits for —
// rather than held for a secret nothing uses any more.
func (k *Webhooks) verifiesWith(ctx context.Context, d kt.Delivery, active int64, secret string) (bool, error) {
	prog, err := k.e.Program(ctx, d.Workflow, active)
	if kt.IsDamaged(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	wh, _, ok := prog.Decl.Webhook(d.Webhook)
	return ok && wh.Verify.Secret == secret, nil
}
