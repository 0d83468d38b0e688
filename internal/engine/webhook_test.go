package engine_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/account"
	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/hookreq"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

const webhookScript = `export default Keep.workflow({ name: "orders", topics: { "order": {}, "payment": {}, "never": {} },
  webhooks: {
    shop: {
      publishes: ["order"],
      verify: { token: { header: "Authorization", prefix: "Bearer ", secret: "shop_token" } },
      dedupe: { json: "delivery.id" },
      handler: async (ctx, req) => {
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id: "order-" + req.json.order, title: "Order " + req.json.order + (req.json.note || "") })
        await ctx.publish("order", { inputId, payload: { order: req.json.order, auth: req.headers.authorization || null, kind: req.headers["x-kind"] } })
      },
    },
    stripe: {
      publishes: ["payment"],
      verify: { stripe: { secret: "stripe_secret", tolerance: 60 } },
      dedupe: { json: "id" },
      handler: async (ctx, req) => {
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id: req.json.id, title: "Payment " + req.json.id })
        await ctx.publish("payment", { inputId, payload: {} })
      },
    },
    writes: {
      publishes: ["never"],
      verify: { token: { header: "X-Token", secret: "shop_token" } },
      handler: async (ctx, req) => {
        await ctx.http.request({ method: "POST", url: "%SINK%/write/nope", json: {} })
      },
    },
  },
})`

// webhookEnv deploys webhookScript, grants what it uses and sets its secrets.
func webhookEnv(t *testing.T) *env {
	t.Helper()
	return setUpWebhooks(t, newEnv(t))
}

// setUpWebhooks deploys webhookScript on e, grants it and sets its secrets.
func setUpWebhooks(t *testing.T, e *env) *env {
	t.Helper()
	e.deployUnchecked(webhookScript) // writes' handler writes, which keep validate refuses: the host refuses it too
	if _, err := control.Grant(e.ctx(), e.k.Store, "orders", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := control.GrantItems(e.ctx(), e.k.Store, "orders", []string{"http.request"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	accts, err := daemon.Accounts(filepath.Join(e.dir, "data"), e.k.Store)
	if err != nil {
		t.Fatal(err)
	}
	secrets := &account.Secrets{Store: e.k.Store, Box: accts.Box}
	for name, v := range map[string]string{"shop_token": "t0ken-shop", "stripe_secret": "whsec_1"} {
		if err := secrets.Set(e.ctx(), name, v); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func shopHook(delivery, order, token string) hookreq.Hook {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	h.Set("X-Kind", "new")
	return hookreq.Hook{Workflow: "orders", Name: "shop", Method: "POST", Header: h,
		Body: []byte(fmt.Sprintf(`{"delivery": {"id": %q}, "order": %q}`, delivery, order))}
}

// counts is what the store holds of the workflow's inputs and events.
func counts(t *testing.T, e *env) (inputs, events int) {
	t.Helper()
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		ins, err := tx.InputList("orders")
		inputs = len(ins)
		if err != nil {
			return err
		}
		evs, err := tx.EventList("orders", store.EventFilter{Limit: 1000})
		events = len(evs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return inputs, events
}

// TestConcurrentDeliveriesOfOneIDAcceptOne: a sender that sends the same
// delivery eight times at once (retries racing each other) gets one
// accepted and seven duplicates, and one input and one event are stored;
// four deliveries about the same order register it once. The token header
// never reaches the handler.
func TestConcurrentDeliveriesOfOneIDAcceptOne(t *testing.T) {
	t.Parallel()
	e := webhookEnv(t)
	deliver := func(n int, hook func(i int) hookreq.Hook) map[kt.DeliveryStatus]int {
		var mu sync.Mutex
		got := map[kt.DeliveryStatus]int{}
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				d, err := e.k.Webhooks.Deliver(e.ctx(), hook(i))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("delivery %d: %v", i, err)
					return
				}
				got[d.Status]++
			}(i)
		}
		wg.Wait()
		return got
	}
	got := deliver(8, func(int) hookreq.Hook { return shopHook("d-1", "1042", "t0ken-shop") })
	if got[kt.DeliveryAccepted] != 1 || got[kt.DeliveryDuplicate] != 7 {
		t.Fatalf("the same delivery 8 times at once: %v, want 1 accepted and 7 duplicates", got)
	}
	if in, ev := counts(t, e); in != 1 || ev != 1 {
		t.Fatalf("after 8 copies of one delivery: %d inputs, %d events; want 1 and 1", in, ev)
	}
	got = deliver(4, func(i int) hookreq.Hook { return shopHook(fmt.Sprint("d-2", i), "2000", "t0ken-shop") })
	if got[kt.DeliveryAccepted] != 4 {
		t.Fatalf("4 deliveries about one order: %v, want 4 accepted", got)
	}
	if in, ev := counts(t, e); in != 2 || ev != 2 {
		t.Fatalf("after 4 deliveries about order 2000: %d inputs, %d events; want 2 and 2", in, ev)
	}
	// A later delivery about an input an earlier one registered (and
	// whose work is done) leaves its attempt as it is.
	attempt := func() kt.ItemAttempt {
		var as []kt.ItemAttempt
		if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
			in, err := tx.InputGetByKey("orders", "http:webhook:order-2000")
			if err != nil {
				return err
			}
			as, err = tx.ItemAttemptList(in.ID)
			return err
		}); err != nil || len(as) != 1 {
			t.Fatalf("the attempts of order 2000: %+v %v", as, err)
		}
		return as[0]
	}
	done := attempt()
	done.Status = kt.ItemDone
	if err := e.k.Store.Update(e.ctx(), func(tx store.Tx) error { return tx.ItemAttemptPut(done) }); err != nil {
		t.Fatal(err)
	}
	later := shopHook("d-3", "2000", "t0ken-shop")
	later.Body = []byte(`{"delivery": {"id": "d-3"}, "order": "2000", "note": " (paid)"}`) // a new title: the input is written again
	if d, err := e.k.Webhooks.Deliver(e.ctx(), later); err != nil || d.Status != kt.DeliveryAccepted {
		t.Fatalf("a later delivery about order 2000: %+v %v", d, err)
	}
	if a := attempt(); a.Status != kt.ItemDone || a.StartedAt != done.StartedAt {
		t.Fatalf("a later delivery about order 2000 changed its attempt: %+v, was %+v", a, done)
	}
	var payload string
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		in, err := tx.InputGetByKey("orders", "http:webhook:order-1042")
		if err != nil {
			return err
		}
		evs, err := tx.EventsByInput(in.ID)
		if err == nil && len(evs) == 1 {
			payload = string(evs[0].Payload)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(payload, `"auth":null`) || !strings.Contains(payload, `"kind":"new"`) || strings.Contains(payload, "t0ken") {
		t.Fatalf("the event the handler published: %s (the token header must not reach it; x-kind must)", payload)
	}
	// The event reaches its topic as a producer's does: nothing consumes
	// "order" here, so it ends its chain.
	e.settle()
}

// TestWebhookRefusalsAndFailures: a wrong token, a Stripe signature made
// with a rotated secret beside the current one (accepted, as Stripe sends
// both during a rotation), one past the tolerance, a handler that writes.
func TestWebhookRefusalsAndFailures(t *testing.T) {
	t.Parallel()
	e := webhookEnv(t)
	d, err := e.k.Webhooks.Deliver(e.ctx(), shopHook("d-1", "1", "wrong"))
	if err != nil || d.Status != kt.DeliveryRefused || d.Why != hookreq.WhyBadSig || !strings.Contains(d.Message, "the Authorization header does not carry the token") || strings.Contains(d.Message, "t0ken-shop") {
		t.Fatalf("a wrong token: %+v %v", d, err)
	}
	stripe := func(at time.Time, secrets ...string) hookreq.Hook {
		body := `{"id": "evt_9", "type": "charge.succeeded"}`
		ts := fmt.Sprint(at.Unix())
		sig := "t=" + ts
		for _, s := range secrets {
			m := hmac.New(sha256.New, []byte(s))
			m.Write([]byte(ts + "." + body))
			sig += ",v1=" + hex.EncodeToString(m.Sum(nil))
		}
		h := http.Header{}
		h.Set("Stripe-Signature", sig)
		return hookreq.Hook{Workflow: "orders", Name: "stripe", Method: "POST", Header: h, Body: []byte(body)}
	}
	if d, err := e.k.Webhooks.Deliver(e.ctx(), stripe(time.Now().Add(-2*time.Minute), "whsec_1")); err != nil || d.Why != hookreq.WhyBadSig || !strings.Contains(d.Message, "more than the tolerance of 1m0s") {
		t.Fatalf("a Stripe signature 2 minutes old, tolerance 60 s: %+v %v", d, err)
	}
	if d, err := e.k.Webhooks.Deliver(e.ctx(), stripe(time.Now(), "whsec_old", "whsec_1")); err != nil || d.Status != kt.DeliveryAccepted || d.Inputs != 1 {
		t.Fatalf("a Stripe signature with the old and the current secret: %+v %v", d, err)
	}
	h := http.Header{}
	h.Set("X-Token", "t0ken-shop")
	d, err = e.k.Webhooks.Deliver(e.ctx(), hookreq.Hook{Workflow: "orders", Name: "writes", Method: "POST", Header: h, Body: []byte(`{}`)})
	if err != nil || d.Status != kt.DeliveryFailed || !strings.Contains(d.Message, "is a mutation; a webhook's handler only reads, registers inputs and publishes") {
		t.Fatalf("a handler that writes: %+v %v", d, err)
	}
	if n := e.sink.Requests(); n != 0 {
		t.Fatalf("a webhook's handler sent %d requests", n)
	}
	// A webhook the active version does not declare is held until one
	// that does is deployed (issue 40); an unknown workflow is not found.
	if d, _ := e.k.Webhooks.Deliver(e.ctx(), hookreq.Hook{Workflow: "orders", Name: "nope", Header: http.Header{}}); d.Why != hookreq.WhyHeld || d.Status != kt.DeliveryHeld {
		t.Fatalf("an undeclared webhook: %+v", d)
	}
	if d, _ := e.k.Webhooks.Deliver(e.ctx(), hookreq.Hook{Workflow: "nope", Name: "shop", Header: http.Header{}}); d.Why != hookreq.WhyNotFound || d.Status != "" {
		t.Fatalf("an unknown workflow: %+v", d)
	}
	var ds []kt.Delivery
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		var err error
		ds, err = tx.DeliveryList("orders", 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for _, d := range ds {
		statuses = append(statuses, d.Webhook+":"+string(d.Status))
	}
	if strings.Join(statuses, " ") != "nope:held writes:failed stripe:accepted stripe:refused shop:refused" {
		t.Fatalf("the deliveries recorded: %v", statuses)
	}
	if in, ev := counts(t, e); in != 1 || ev != 1 {
		t.Fatalf("%d inputs, %d events; only the Stripe delivery stores any", in, ev)
	}
}
