package engine_test

import (
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// twoEventsScript: one input causes two events; the consumer writes each to
// the same URL, with the body given.
func twoEventsScript(body string) string {
	return `export default Keep.workflow({ name: "two", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "order-1", title: "Order 1" })
    await ctx.publish("job", { messageId: "order-1/invoice", inputId, payload: { kind: "invoice" } })
    await ctx.publish("job", { messageId: "order-1/receipt", inputId, payload: { kind: "receipt" } })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) {
      const [e] = await ctx.peek("job")
      if (!e) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload }
    },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/order-1", json: ` + body + ` }) },
  }) } })`
}

// Issue 10 #1: the unit of work of a consumer run is its reservation set, so
// the second event's write is sent — with the same body or another one.
func TestEachEventOfOneInputGetsItsOwnWrite(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{"same body": `{ n: 1 }`, "other body": `p.data`} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			wf := e.deploy(twoEventsScript(body))
			e.settle()
			e.noOpenRun(wf)
			if w := e.sink.Writes(); len(w) != 2 {
				t.Fatalf("writes at the sink: %d, want 2 (one per event)", len(w))
			}
			var muts []kt.Mutation
			_ = e.k.Store.View(e.ctx(), func(tx store.Tx) error {
				var err error
				muts, err = tx.MutationList(wf)
				return err
			})
			if len(muts) != 2 || muts[0].IdentityKey == muts[1].IdentityKey {
				t.Fatalf("ledger rows %d", len(muts))
			}
			for _, m := range muts {
				if m.Status != kt.MutationApplied || strings.Join(m.ItemKeys, ",") == "" {
					t.Fatalf("row %+v", m)
				}
			}
		})
	}
}

// A ledger row written under the old identity rule (by the inputs) is moved
// to the new one at start-up, so the run that owns it finds it again.
func TestOldConsumerIdentitiesAreMigratedAtStartUp(t *testing.T) {
	t.Parallel()
	e, wf, r := unknownWrite(t)
	if r.Status != kt.StatusReconciliation {
		t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
	}
	var want string
	must(t, e.k.Store.Update(e.ctx(), func(tx store.Tx) error {
		m, err := tx.MutationByRun(r.ID)
		if err != nil {
			return err
		}
		want = m.IdentityKey
		m.IdentityKey = "written-by-an-older-keep"
		return tx.MutationPut(m)
	}))
	if _, err := e.k.Engine.Recover(e.ctx()); err != nil {
		t.Fatal(err)
	}
	_ = e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		m, err := tx.MutationByRun(r.ID)
		if err != nil || m.IdentityKey != want {
			t.Fatalf("after start-up: %q %v, want %q", m.IdentityKey, err, want)
		}
		return nil
	})
	// The person says it did not happen: it is sent once more, once.
	e.resolve(r.ID, kt.ResolveDidntHappen)
	e.settle()
	e.noOpenRun(wf)
	if len(e.sink.Writes()) != 2 {
		t.Fatalf("writes %d (the timed-out one and the resend)", len(e.sink.Writes()))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
