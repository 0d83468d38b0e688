package engine_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/hookreq"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testbin"
)

// relayScript is a webhook that publishes a job and a consumer that writes
// each job to the sink.
const relayScript = `export default Keep.workflow({ name: "relay", topics: { "job": {} },
  webhooks: { in: { publishes: ["job"],
    verify: { token: { header: "Authorization", prefix: "Bearer ", secret: "shop_token" } },
    dedupe: { json: "id" },
    handler: async (ctx, req) => {
      const inputId = ctx.registerInput({ source: "http", type: "webhook", id: req.json.id, title: "Job " + req.json.id })
      await ctx.publish("job", { messageId: req.json.id, inputId, payload: { id: req.json.id } })
    } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data }) },
  }) },
})`

// 248c9c1 spares a commit's wake-up while the scheduler steps the workflow
// that changed. A webhook delivered then — while a run of the workflow waits
// on the sink, or while the Maintainer's lease holds it — must still be
// taken at once: the scheduler here polls once an hour, so a wake-up lost
// shows as a job pending for good. Waits on the jobs being consumed, not on
// a clock; fails when release does not wake the scheduler, or when Changed
// spares a wake-up nobody makes up for.
func TestAWebhookDeliveredWhileTheWorkflowIsSteppedIsTaken(t *testing.T) {
	t.Parallel()
	e := setUpWebhooks(t, newEnv(t))
	wf := e.deploy(relayScript)
	if _, err := control.Grant(e.ctx(), e.k.Store, wf, time.Now()); err != nil {
		t.Fatal(err)
	}
	sched, ctx := runWokenScheduler(t, e)
	deliver := func(ctx context.Context, id string) {
		t.Helper()
		d, err := e.k.Webhooks.Deliver(ctx, hookreq.Hook{Workflow: wf, Name: "in", Method: "POST",
			Header: http.Header{"Authorization": {"Bearer t0ken-shop"}}, Body: []byte(`{"id":"` + id + `"}`)})
		if err != nil || d.Status != kt.DeliveryAccepted {
			t.Fatalf("delivery %s: %+v, %v", id, d, err)
		}
	}
	consumed := func(ids ...string) {
		t.Helper()
		deadline := time.Now().Add(testbin.Patience())
		for {
			status := map[string]kt.EventStatus{}
			for _, ev := range e.events(wf, "job") {
				status[ev.MessageID] = ev.Status
			}
			all := true
			for _, id := range ids {
				all = all && status[id] == kt.EventConsumed
			}
			if all {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("jobs %v not consumed: %v (a wake-up was lost; the scheduler polls once an hour)", ids, status)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// A job delivered while a run of the workflow waits on the sink.
	held, release := e.sink.HoldWrite()
	deliver(e.ctx(), "a")
	<-held
	spared := sched.SkippedWakes()
	deliver(e.ctx(), "b")
	if sched.SkippedWakes() == spared {
		t.Fatal("the delivery during the run woke the scheduler: this case tries nothing")
	}
	release()
	consumed("a", "b")

	// A job delivered while the workflow is held by a lease (the
	// Maintainer's repairs): the wake-up is spared, and release makes it up.
	for {
		ok, err := sched.WithLease(ctx, wf, func(ctx context.Context) error {
			spared := sched.SkippedWakes()
			deliver(ctx, "c")
			if sched.SkippedWakes() == spared {
				t.Error("the delivery under the lease woke the scheduler: this case tries nothing")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
	}
	consumed("a", "b", "c")
	if ws := e.sink.Writes(); len(ws) != 3 {
		t.Fatalf("writes at the sink: %+v, want a, b and c once each", ws)
	}
}
