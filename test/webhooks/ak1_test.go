package webhooks

import (
	"database/sql"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/keep-run/keep/internal/store/sqlite" // the "sqlite" driver, to flip a stored row beside keep
	"github.com/keep-run/keep/internal/testbin"
)

// A sender's retry of a delivery held for the grant is held beside it; once
// granted, the two are one input, one event, one write at the sink (one
// accepted, one duplicate). A delivery held for the deploy of its webhook
// whose handler then fails under that version is held again (its sender
// will not send it again) and taken once a fix is deployed: written once.
func TestAHeldDeliveryIsTakenOnceThroughItsRetryAHandlerFailureAndItsFix(t *testing.T) {
	k, good := heldServedWithItsSecret(t)
	k.wantHeld(k.to("gh", "a", good), "source:http")
	k.wantHeld(k.to("gh", "a", good), "source:http") // the sender's retry
	if out, err := k.keep("", "grant", "held", "--yes"); err != nil {
		t.Fatalf("keep grant: %v\n%s", err, out)
	}
	testbin.WaitFor(t, "the held delivery to be written", func() bool { return k.writesTo("/write/a") >= 1 }, k.logs)
	testbin.WaitFor(t, "nothing held", func() bool { return len(k.held().Held) == 0 }, k.logs)
	time.Sleep(2 * time.Second) // a second take would write by now
	if n := k.writesTo("/write/a"); n != 1 {
		t.Fatalf("delivery a (held twice) written %d times", n)
	}
	st := map[string]int{}
	for _, d := range k.held().Deliveries {
		if d.Delivery == "d-a" {
			st[d.Status]++
		}
	}
	if st["accepted"] != 1 || st["duplicate"] != 1 {
		t.Fatalf("delivery d-a's records: %v", st)
	}

	// Held for the deploy of "later"; the version that declares it fails.
	k.wantHeld(k.to("later", "p1", good), `declares no webhook "later"`)
	broken := strings.Replace(k.heldSource(true), `const id = String(req.json.id)
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id, title: "later " + id })`, `throw new Error("a bug in later")`, 1)
	if !strings.Contains(broken, "a bug in later") {
		t.Fatal("the broken version was not made")
	}
	k.write("wf2.js", broken)
	if out, err := k.keep("", "deploy", k.path("wf2.js")); err != nil {
		t.Fatalf("keep deploy: %v\n%s", err, out)
	}
	testbin.WaitFor(t, "the held delivery to be held for its handler", func() bool {
		v := k.held()
		return len(v.Held) == 1 && strings.HasPrefix(v.Held[0].HeldFor, "handler:") && strings.Contains(v.Held[0].Reason, "a bug in later")
	}, k.logs)
	// A new delivery to the broken handler: the sender is told to retry.
	k.expect(k.to("later", "p2", good), http.StatusInternalServerError, "a bug in later")

	k.write("wf3.js", k.heldSource(true))
	if out, err := k.keep("", "deploy", k.path("wf3.js")); err != nil {
		t.Fatalf("keep deploy: %v\n%s", err, out)
	}
	testbin.WaitFor(t, "the held delivery to be written after the fix", func() bool { return k.writesTo("/write/p1") >= 1 }, k.logs)
	k.expect(k.to("later", "p2", good), http.StatusOK, `"status":"accepted"`)
	k.expect(k.to("later", "p1", good), http.StatusOK, `"status":"duplicate"`)
	testbin.WaitFor(t, "the retried delivery to be written", func() bool { return k.writesTo("/write/p2") >= 1 }, k.logs)
	time.Sleep(2 * time.Second)
	for _, id := range []string{"p1", "p2"} {
		if n := k.writesTo("/write/" + id); n != 1 {
			t.Errorf("delivery %s written %d times", id, n)
		}
	}
	if v := k.held(); len(v.Held) != 0 {
		t.Errorf("still held: %+v", v.Held)
	}
	if ins := k.inputsOf("held"); ins != 3 {
		t.Errorf("%d inputs, want 3 (a, p1, p2)", ins)
	}
}

// One delivery id posted twice at once with different bodies: both
// handlers run, one commit is accepted, the other is a duplicate (200,
// nothing changed): one input, one write at the sink.
func TestOneDeliveryIDTwiceAtOnceWithDifferentBodiesIsWrittenOnce(t *testing.T) {
	k := setup(t)
	k.serve()
	got := make(chan answer, 2)
	for _, v := range []string{"1", "2"} {
		body := []byte(`{"id":"same","v":` + v + `}`)
		go func() {
			got <- k.post("/hooks/hooks/slow", body, map[string]string{"X-Token": secrets["GITHUB_SECRET"]})
		}()
	}
	for i := 0; i < 2; i++ {
		select {
		case <-k.reading:
		case <-time.After(30 * time.Second):
			t.Fatalf("handler %d did not run; keep said:\n%s", i, k.logs)
		}
	}
	k.unblock()
	a, b := <-got, <-got
	if a.code != http.StatusOK || b.code != http.StatusOK {
		t.Fatalf("answers %d %q and %d %q", a.code, a.body, b.code, b.body)
	}
	both := a.body + b.body
	if !strings.Contains(both, `"status":"accepted"`) || !strings.Contains(both, `"status":"duplicate"`) {
		t.Fatalf("want one accepted and one duplicate: %s | %s", a.body, b.body)
	}
	testbin.WaitFor(t, "the write", func() bool { return k.writes("slow.job") >= 1 }, k.logs)
	time.Sleep(2 * time.Second)
	if n := k.writes("slow.job"); n != 1 {
		t.Fatalf("written %d times", n)
	}
}

// heldServedWithItsSecret is heldSetup with its secret set (the grant not
// given), served; good is the secret's value.
func heldServedWithItsSecret(t *testing.T) (*keep, string) {
	t.Helper()
	k := heldSetup(t)
	good := secrets["GITHUB_SECRET"]
	if out, err := k.keep(good, "secret", "set", "GITHUB_SECRET"); err != nil {
		t.Fatalf("keep secret set: %v\n%s", err, out)
	}
	k.serve()
	return k, good
}

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}

// bigIDScript's webhook names its deliveries by the body's numeric "id"
// (as senders with 64-bit ids send them); its handler registers the
// input by the body's "ref", so each delivery is an input of its own.
const bigIDScript = `export default Keep.workflow({
  name: "orders",
  topics: { order: {} },
  webhooks: {
    shop: {
      publishes: ["order"],
      verify: { token: { header: "X-Token", secret: "GITHUB_SECRET" } },
      dedupe: { json: "id" },
      handler: async (ctx, req) => {
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id: req.json.ref, title: "order " + req.json.ref })
        await ctx.publish("order", { inputId, payload: { ref: req.json.ref } })
      },
    },
  },
  consumers: {
    w: Keep.consumer({
      subscribe: ["order"],
      async prepare(ctx) {
        const [e] = await ctx.peek("order")
        if (!e) return { reservations: [] }
        return { reservations: [{ topic: "order", ids: [e.messageId] }], data: e.payload }
      },
      async mutate(ctx, p) {
        await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.ref, json: p.data })
      },
    }),
  },
})`

// Two deliveries whose numeric ids differ only past 2^53 (64-bit ids, as
// many senders have) are two deliveries: dedupe must not read them as
// one, or the second is answered "duplicate" and silently lost.
func TestDeliveriesWithLargeNumericIDsAreNotLostAsDuplicates(t *testing.T) {
	k := setupWith(t, "", "", func(k *keep) string { return strings.ReplaceAll(bigIDScript, "%SINK%", k.sink.URL) })
	k.serve()
	tok := map[string]string{"X-Token": secrets["GITHUB_SECRET"]}
	k.expect(k.post("/hooks/orders/shop", []byte(`{"id": 9007199254740993, "ref": "a"}`), tok), http.StatusOK, `"status":"accepted"`)
	k.expect(k.post("/hooks/orders/shop", []byte(`{"id": 9007199254740992, "ref": "b"}`), tok), http.StatusOK, `"status":"accepted"`)
	testbin.WaitFor(t, "both orders written", func() bool { return k.writesTo("/write/a") == 1 && k.writesTo("/write/b") == 1 }, k.logs)
}

// A verified delivery without the id its dedupe names (a body that is not
// JSON, an id that is an object, no id) is answered 400 saying why, never
// reaches its handler, and is recorded refused.
func TestADeliveryWithoutItsIDIsRefusedAndRecorded(t *testing.T) {
	k := setupWith(t, "", "", func(k *keep) string { return strings.ReplaceAll(bigIDScript, "%SINK%", k.sink.URL) })
	k.serve()
	tok := map[string]string{"X-Token": secrets["GITHUB_SECRET"]}
	for _, c := range []struct{ body, says string }{
		{`{"id": 1, "ref": "x"`, "not JSON"},
		{`{"id": {"n": 1}, "ref": "x"}`, `has no \"id\"`},
		{`{"ref": "x"}`, `has no \"id\"`},
		{`{"id": true, "ref": "x"}`, `has no \"id\"`},
		{`{"id": 1, "ref": "x"} trailing`, "not JSON"},
	} {
		k.expect(k.post("/hooks/orders/shop", []byte(c.body), tok), http.StatusBadRequest, c.says)
	}
	if n := k.viewOf("orders").counts("shop")["refused"]; n != 5 {
		t.Fatalf("%d refused deliveries recorded, want 5", n)
	}
	if n := k.inputsOf("orders"); n != 0 {
		t.Fatalf("%d inputs from deliveries without an id", n)
	}
	// 1.0 and 1 are one id: a sender's retry written either way is a duplicate.
	k.expect(k.post("/hooks/orders/shop", []byte(`{"id": 1, "ref": "one"}`), tok), http.StatusOK, `"status":"accepted"`)
	k.expect(k.post("/hooks/orders/shop", []byte(`{"id": 1.0, "ref": "one"}`), tok), http.StatusOK, `"status":"duplicate"`)
}

// Damaged storage in one workflow (its stored script flipped beside keep)
// stops that workflow only (docs/reliability.md: "the other workflow
// writes"): another workflow's delivery held for its grant is still taken
// once the grant is given, though the damaged workflow holds a delivery
// too and comes first in keep serve's pass over the held ones.
func TestADamagedWorkflowDoesNotStopAnotherOnesHeldDeliveries(t *testing.T) {
	k, good := heldServedWithItsSecret(t)
	k.write("aaa.js", strings.Replace(k.heldSource(false), `name: "held"`, `name: "aaa"`, 1)+"\n// marker zzzz\n")
	if out, err := k.keep("", "deploy", k.path("aaa.js")); err != nil {
		t.Fatalf("keep deploy aaa: %v\n%s", err, out)
	}
	k.expect(k.post("/hooks/aaa/undeclared", []byte(`{}`), nil), http.StatusAccepted, `"status":"held"`)
	k.wantHeld(k.to("gh", "other", good), "source:http")
	_ = k.cmd.Process.Signal(syscall.SIGKILL)
	_ = k.cmd.Wait()

	k.flipScript("aaa", "zzzz", "zzzy")

	k.serve()
	if out, err := k.keep("", "grant", "held", "--yes"); err != nil {
		t.Fatalf("keep grant: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for k.writesTo("/write/other") == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := k.writesTo("/write/other"); n != 1 {
		t.Fatalf("workflow held's delivery, held for the grant now given, was written %d times while workflow aaa is damaged; held: %+v; keep said:\n%s", n, k.held().Held, k.logs)
	}
}

// flipScript changes the stored script of wf's one version beside keep
// (from to to in its text), as damage or a restore of keep.db would.
func (k *keep) flipScript(wf, from, to string) {
	k.t.Helper()
	db, err := sql.Open("sqlite", "file:"+k.path("data/keep.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		k.t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(`UPDATE versions SET script=replace(script, ?, ?) WHERE workflow=?`, from, to, wf)
	if err != nil {
		k.t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		k.t.Fatalf("flipped %d versions of %s, want 1", n, wf)
	}
}
