package engine_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/account"
	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/hookreq"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// heldHandlerScript's webhook fails while its body says so (%FAILS% true,
// version 1); a version that does not is the fix.
const heldHandlerScript = `export default Keep.workflow({
  name: "held",
  topics: { t: {} },
  webhooks: {
    tok: {
      publishes: ["t"],
      verify: { token: { header: "X-Token", secret: "tok" } },
      handler: async (ctx, req) => {
        if (req.json && req.json.fail && %FAILS%) throw new Error("told to fail")
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id: String(req.json.id), title: "d" })
        await ctx.publish("t", { inputId, payload: {} })
      },
    },
  },
})`

func tokHook(body string) hookreq.Hook {
	h := http.Header{}
	h.Set("X-Token", "s3cret")
	return hookreq.Hook{Workflow: "held", Name: "tok", Method: "POST", Header: h, Body: []byte(body)}
}

func heldOf(t *testing.T, e *env) []kt.Delivery {
	t.Helper()
	var held []kt.Delivery
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		var err error
		held, err = tx.DeliveryHeld("held", "", 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return held
}

// Issue 40 #1: a held delivery whose handler then fails is held again
// (its sender, answered 202, will not send it again) until another
// version is deployed, then taken once.
func TestAHeldDeliveryWhoseHandlerFailsWaitsForANewVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.deployUnchecked(strings.Replace(heldHandlerScript, "%FAILS%", "true", 1))
	if _, err := control.Grant(e.ctx(), e.k.Store, "held", time.Now()); err != nil {
		t.Fatal(err)
	}
	d, err := e.k.Webhooks.Deliver(e.ctx(), tokHook(`{"id": 1, "fail": true}`))
	if err != nil || d.Why != hookreq.WhyHeld || !strings.Contains(d.Message, "keep secret set tok") {
		t.Fatalf("before the secret: %+v %v", d, err)
	}
	accts, err := daemon.Accounts(filepath.Join(e.dir, "data"), e.k.Store)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&account.Secrets{Store: e.k.Store, Box: accts.Box}).Set(e.ctx(), "tok", "s3cret"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := e.k.Webhooks.TakeAllHeld(e.ctx()); err != nil {
			t.Fatal(err)
		}
		held := heldOf(t, e)
		if len(held) != 1 || !strings.HasPrefix(held[0].HeldFor, "handler:") || !strings.Contains(held[0].Reason, "told to fail") {
			t.Fatalf("pass %d, a held delivery whose handler fails: %+v", i, held)
		}
	}
	e.redeploy(strings.Replace(heldHandlerScript, "%FAILS%", "false", 1), kt.DeployMinor)
	if err := e.k.Webhooks.TakeAllHeld(e.ctx()); err != nil {
		t.Fatal(err)
	}
	if held := heldOf(t, e); len(held) != 0 {
		t.Fatalf("after the fix was deployed: %+v", held)
	}
	if in, _ := countsOf(t, e, "held"); in != 1 {
		t.Fatalf("%d inputs, want 1", in)
	}
}

func countsOf(t *testing.T, e *env, wf string) (inputs, events int) {
	t.Helper()
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		ins, err := tx.InputList(wf)
		inputs = len(ins)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return inputs, 0
}
