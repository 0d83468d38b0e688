package webhooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testsink"
)

// heldScript has a GitHub-style webhook whose handler registers an input
// of source http (a grant a person gives) and publishes it; its consumer
// writes each event to the sink once, with a reconcile (a kill -9 may land
// while a write is out). %LATER% is where a second version declares a
// second webhook.
const heldScript = `export default Keep.workflow({
  name: "held",
  topics: { t: {}%U% },
  webhooks: {
    gh: {
      publishes: ["t"],
      verify: { hmac: { header: "X-Hub-Signature-256", prefix: "sha256=", secret: "GITHUB_SECRET" } },
      dedupe: { header: "X-GitHub-Delivery" },
      handler: async (ctx, req) => {
        const id = String(req.json.id)
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id, title: "delivery " + id })
        await ctx.publish("t", { inputId, payload: { id } })
      },
    },
%LATER%
  },
  consumers: {
    w: Keep.consumer({
      subscribe: ["t"],
      async prepare(ctx) {
        const [e] = await ctx.peek("t")
        if (!e) return { reservations: [] }
        return { reservations: [{ topic: "t", ids: [e.messageId] }], data: e.payload }
      },
      async mutate(ctx, p) {
        await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, reconcile: { url: "%SINK%/writes/{idempotencyKey}" } })
      },
    }),
%W2%  },
})`

const laterConsumer = `    w2: Keep.consumer({
      subscribe: ["u"],
      async prepare(ctx) {
        const [e] = await ctx.peek("u")
        if (!e) return { reservations: [] }
        return { reservations: [{ topic: "u", ids: [e.messageId] }], data: e.payload }
      },
      async mutate(ctx, p) {
        await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, reconcile: { url: "%SINK%/writes/{idempotencyKey}" } })
      },
    }),
`

const laterHook = `    later: {
      publishes: ["u"],
      verify: { hmac: { header: "X-Hub-Signature-256", prefix: "sha256=", secret: "GITHUB_SECRET" } },
      dedupe: { header: "X-GitHub-Delivery" },
      handler: async (ctx, req) => {
        const id = String(req.json.id)
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id, title: "later " + id })
        await ctx.publish("u", { inputId, payload: { id } })
      },
    },`

// heldSetup deploys heldScript (without %LATER%) neither granted nor with
// its secret set: what a person who set up GitHub first has.
func heldSetup(t *testing.T) *keep { t.Helper(); return heldSetupOn(t, "") }

// heldSetupOn is heldSetup on the store ("" for SQLite in the data directory).
func heldSetupOn(t *testing.T, store string) *keep {
	t.Helper()
	k := &keep{t: t, dir: t.TempDir(), store: store, sink: testsink.New(), reading: make(chan struct{}, 8), release: make(chan struct{})}
	t.Cleanup(func() { k.unblock(); k.sink.Close() })
	k.write("wf.js", k.heldSource(false))
	k.write("keep.toml", "[policy]\nwebhook_max_body = \"64KiB\"\n"+k.sink.AllowTOML())
	if out, err := k.keep("", "deploy", k.path("wf.js")); err != nil {
		t.Fatalf("keep deploy: %v\n%s", err, out)
	}
	return k
}

func (k *keep) heldSource(later bool) string {
	r := strings.NewReplacer("%LATER%", "", "%U%", "", "%W2%", "")
	if later {
		r = strings.NewReplacer("%LATER%", laterHook, "%U%", ", u: {}", "%W2%", laterConsumer)
	}
	return strings.ReplaceAll(r.Replace(heldScript), "%SINK%", k.sink.URL)
}

// to signs a delivery to held/NAME as GitHub does.
func (k *keep) to(name, id, secret string) answer {
	body := []byte(fmt.Sprintf(`{"id": %q}`, id))
	return k.post("/hooks/held/"+name, body, map[string]string{"X-GitHub-Delivery": "d-" + id, "X-Hub-Signature-256": "sha256=" + hexMAC(secret, string(body))})
}

// heldView is the held part of `keep webhooks held --json`.
type heldView struct {
	Held []struct {
		Record   int64
		Webhook  string
		Delivery string
		HeldFor  string
		Reason   string
	} `json:"held"`
	Deliveries []struct {
		Webhook, Delivery, Status, Reason string
	} `json:"deliveries"`
}

func (k *keep) held() heldView { k.t.Helper(); return k.heldOf("held") }

// heldOf is `keep webhooks WF --json`'s held deliveries and records.
func (k *keep) heldOf(wf string) heldView {
	k.t.Helper()
	out, err := k.keep("", "webhooks", wf, "--json", "--limit", "1000")
	if err != nil {
		k.t.Fatalf("keep webhooks: %v\n%s", err, out)
	}
	var v heldView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		k.t.Fatalf("keep webhooks --json: %v\n%s", err, out)
	}
	return v
}

// statusOf is the status of the newest record of a delivery id.
func (v heldView) statusOf(delivery string) (status, reason string) {
	for _, d := range v.Deliveries {
		if d.Delivery == delivery {
			return d.Status, d.Reason
		}
	}
	return "", ""
}

// wantHeld expects a held to be answered 202 held with its record, under
// which the owner sees what it waits for (keep webhooks): the sender is
// not told why (the listener's rule: a sender learns nothing it did not send).
func (k *keep) wantHeld(a answer, waits string) { k.t.Helper(); k.wantHeldIn("held", a, waits) }

// wantHeldIn is wantHeld of a delivery to workflow wf.
func (k *keep) wantHeldIn(wf string, a answer, waits string) {
	k.t.Helper()
	k.expect(a, http.StatusAccepted, `"status":"held"`)
	var r struct{ Record int64 }
	if err := json.Unmarshal([]byte(a.body), &r); err != nil || r.Record == 0 {
		k.t.Fatalf("the sender was not given the held delivery's record (%v): %s", err, a.body)
	}
	for _, h := range k.heldOf(wf).Held {
		if h.Record == r.Record {
			if !strings.Contains(h.Reason, waits) {
				k.t.Fatalf("held record %d does not say what it waits for (%q): %s", r.Record, waits, h.Reason)
			}
			return
		}
	}
	k.t.Fatalf("keep webhooks does not list the held record %d the sender was given", r.Record)
}

// Issue 40 #1: a correctly signed delivery that comes before its secret is
// set, before the workflow's input source is granted, or before the
// version that declares its webhook is deployed is held (202) and taken
// once that is done, each exactly once (one write at the sink per
// delivery); a delivery with a bad signature, held unverified while the
// secret was not set, is refused once it is set, and recorded so.
func TestDeliveriesAreHeldUntilTheSecretTheGrantAndTheDeploy(t *testing.T) {
	heldUntilTheReasonIsGone(t, "")
}

// The same on PostgreSQL.
func TestDeliveriesAreHeldUntilTheReasonIsGoneOnPostgreSQL(t *testing.T) {
	heldUntilTheReasonIsGone(t, pgtest.FreshSchema(t))
}

func heldUntilTheReasonIsGone(t *testing.T, store string) {
	k := heldSetupOn(t, store)
	k.serve()
	good := secrets["GITHUB_SECRET"]

	// Before the secret: held, unverified, the good one and a forged one.
	k.wantHeld(k.to("gh", "s1", good), "keep secret set GITHUB_SECRET")
	k.wantHeld(k.to("gh", "forged", "not-the-secret"), "keep secret set GITHUB_SECRET")
	if out, err := k.keep(good, "secret", "set", "GITHUB_SECRET"); err != nil {
		t.Fatalf("keep secret set: %v\n%s", err, out)
	}
	// Verified once the secret is set: the forged one is refused and
	// recorded; the good one then waits for the grant.
	testbin.WaitFor(t, "the forged delivery to be refused once the secret is set", func() bool {
		st, _ := k.held().statusOf("d-forged")
		return st == "refused"
	}, k.logs)
	if _, reason := k.held().statusOf("d-forged"); !strings.Contains(reason, "held, then verified once the secret was set") || !strings.Contains(reason, "the signature does not match the body") {
		t.Fatalf("the forged delivery's record: %q", reason)
	}
	testbin.WaitFor(t, "the good one to wait for the grant", func() bool {
		v := k.held()
		return len(v.Held) == 1 && strings.HasPrefix(v.Held[0].HeldFor, "grant:source:http@")
	}, k.logs)

	// Before the grant: held.
	k.wantHeld(k.to("gh", "g1", good), "source:http")
	// Before the deploy that declares it: held.
	k.wantHeld(k.to("later", "p1", good), `declares no webhook "later"`)
	if n := len(k.sink.Writes()); n != 0 {
		t.Fatalf("%d writes at the sink before the grant", n)
	}

	if out, err := k.keep("", "grant", "held", "--yes"); err != nil {
		t.Fatalf("keep grant: %v\n%s", err, out)
	}
	testbin.WaitFor(t, "the deliveries held for the grant to be written", func() bool {
		return k.writesTo("/write/s1") == 1 && k.writesTo("/write/g1") == 1
	}, k.logs)
	if v := k.held(); len(v.Held) != 1 || v.Held[0].HeldFor != "deploy:later" {
		t.Fatalf("held after the grant: %+v", v.Held)
	}

	k.write("wf2.js", k.heldSource(true))
	if out, err := k.keep("", "deploy", k.path("wf2.js")); err != nil {
		t.Fatalf("keep deploy: %v\n%s", err, out)
	}
	testbin.WaitFor(t, "the delivery held for the deploy to be written", func() bool { return k.writesTo("/write/p1") == 1 }, k.logs)

	// Each taken once: a retry of one (GitHub's Redeliver) is a duplicate.
	k.expect(k.to("gh", "g1", good), http.StatusOK, `"status":"duplicate"`)
	v := k.held()
	if len(v.Held) != 0 {
		t.Fatalf("still held: %+v", v.Held)
	}
	for _, id := range []string{"d-s1", "d-g1", "d-p1"} {
		if st, reason := v.statusOf(id); st != "duplicate" && st != "accepted" {
			t.Errorf("delivery %s: %s %s", id, st, reason)
		}
	}
	for _, id := range []string{"s1", "g1", "p1"} {
		if n := k.writesTo("/write/" + id); n != 1 {
			t.Errorf("delivery %s written %d times", id, n)
		}
	}
	if n := k.writesTo("/write/forged"); n != 0 {
		t.Errorf("the forged delivery was written %d times", n)
	}
	if ins := k.inputsOf("held"); ins != 3 {
		t.Errorf("%d inputs, want 3", ins)
	}
}

// A kill -9 of keep serve between the hold and the take, and one inside
// the take's commit (CrashInsideDelivery), loses no held delivery and
// takes none twice.
func TestKill9BetweenHoldAndTakeLosesAndDoublesNothing(t *testing.T) {
	k := heldSetup(t)
	if out, err := k.keep(secrets["GITHUB_SECRET"], "secret", "set", "GITHUB_SECRET"); err != nil {
		t.Fatalf("keep secret set: %v\n%s", err, out)
	}
	k.serve()
	const n = 20
	for i := 0; i < n; i++ {
		k.wantHeld(k.to("gh", fmt.Sprint("k", i), secrets["GITHUB_SECRET"]), "source:http")
	}
	// Killed after the holds: each was committed before its 202.
	_ = k.cmd.Process.Signal(syscall.SIGKILL)
	_ = k.cmd.Wait()
	if out, err := k.keep("", "grant", "held", "--yes"); err != nil {
		t.Fatalf("keep grant: %v\n%s", err, out)
	}
	// Killed inside the first take's commit.
	// (Started by hand: it may stop before its listener answers.)
	crashing := exec.Command(keepBin, append(k.global(), "serve", "--addr", strings.TrimPrefix(k.api, "http://"), "--webhooks-addr", strings.TrimPrefix(k.hooks, "http://"))...)
	crashing.Env = append(os.Environ(), "KEEP_TEST_CRASH_AFTER="+engine.CrashInsideDelivery)
	var said bytes.Buffer
	crashing.Stdout, crashing.Stderr = &said, &said
	if err := crashing.Start(); err != nil {
		t.Fatal(err)
	}
	gone := make(chan struct{})
	go func() { _ = crashing.Wait(); close(gone) }()
	t.Cleanup(func() { _ = crashing.Process.Kill(); <-gone })
	testbin.WaitFor(t, "keep serve to stop inside a take's commit", func() bool {
		select {
		case <-gone:
			return true
		default:
			return false
		}
	}, &said)
	if !strings.Contains(said.String(), "test crash point "+engine.CrashInsideDelivery+" reached") {
		t.Fatalf("keep serve did not stop inside a take:\n%s", said.String())
	}
	if v := k.held(); len(v.Held) != n {
		t.Fatalf("%d held after the kill inside a take, want %d: %+v", len(v.Held), n, v.Held)
	}
	// And killed once more at a write's answer: mid-way through the takes.
	k.serve()
	testbin.WaitFor(t, "a first write", func() bool { return len(k.sink.Writes()) > 0 }, k.logs)
	_ = k.cmd.Process.Signal(syscall.SIGKILL)
	_ = k.cmd.Wait()
	k.serve()
	testbin.WaitFor(t, "every held delivery to be written", func() bool {
		for i := 0; i < n; i++ {
			if k.writesTo(fmt.Sprintf("/write/k%d", i)) == 0 {
				return false
			}
		}
		return true
	}, k.logs)
	for i := 0; i < n; i++ {
		if w := k.writesTo(fmt.Sprintf("/write/k%d", i)); w != 1 {
			t.Errorf("delivery k%d written %d times", i, w)
		}
	}
	if v := k.held(); len(v.Held) != 0 {
		t.Errorf("still held: %+v", v.Held)
	}
	if ins := k.inputsOf("held"); ins != n {
		t.Errorf("%d inputs, want %d", ins, n)
	}
}

// Past the bound (100 per webhook) the sender hears 503 with a reason, and
// the refusal is recorded; a person drops the held ones (keep webhooks
// --drop), after which deliveries are held again; --take takes one now.
func TestPastTheBoundTheSenderHearsAnError(t *testing.T) {
	k := heldSetup(t)
	k.serve()
	for i := 0; i < 100; i++ {
		k.expect(k.to("gh", fmt.Sprint("b", i), secrets["GITHUB_SECRET"]), http.StatusAccepted, `"status":"held"`)
	}
	a := k.to("gh", "over", secrets["GITHUB_SECRET"])
	k.expect(a, http.StatusServiceUnavailable, "holds as many deliveries waiting for it as it holds, so this one was not kept: send it again later")
	if strings.Contains(a.body, "GITHUB_SECRET") {
		t.Fatalf("the sender past the bound was told the secret's name: %s", a.body)
	}
	if st, reason := k.held().statusOf("d-over"); st != "refused" || !strings.Contains(reason, "keep holds 100 deliveries of webhook gh of held already (0.0 MiB; it holds at most 100, 64 MiB), so this one was not kept") {
		t.Fatalf("the refusal past the bound is not recorded: %s %q", st, reason)
	}
	v := k.held()
	if len(v.Held) != 100 {
		t.Fatalf("%d held, want 100", len(v.Held))
	}
	if out, err := k.keep("", "webhooks", "held", "--drop", "--yes", "--delivery", fmt.Sprint(v.Held[0].Record)); err != nil || !strings.Contains(out, "dropped 1 held webhook delivery") {
		t.Fatalf("keep webhooks --drop: %v\n%s", err, out)
	}
	if st, reason := k.held().statusOf(v.Held[0].Delivery); st != "refused" || !strings.Contains(reason, "dropped by") {
		t.Fatalf("the dropped delivery: %s %q", st, reason)
	}
	k.wantHeld(k.to("gh", "after-drop", secrets["GITHUB_SECRET"]), "keep secret set GITHUB_SECRET")
	// A person's take of one still blocked: tried now, held again saying why.
	rec := k.held().Held[0].Record
	if out, err := k.keep("", "webhooks", "held", "--take", "--delivery", fmt.Sprint(rec)); err != nil {
		t.Fatalf("keep webhooks --take: %v\n%s", err, out)
	}
	testbin.WaitFor(t, "the delivery a person asked to take to be tried", func() bool {
		for _, d := range k.held().Held {
			if d.Record == rec {
				return strings.HasPrefix(d.HeldFor, "secret:")
			}
		}
		return false
	}, k.logs)
	if out, err := k.keep("", "webhooks", "held"); err != nil || !strings.Contains(out, "HELD (100)") || !strings.Contains(out, "secret:GITHUB_SECRET") {
		t.Fatalf("keep webhooks does not list the held deliveries: %v\n%s", err, out)
	}
	// The page shows them, with a take and a drop for each and for all,
	// and its Drop drops the one it names.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	resp, err := browser.Get(k.api + "/w/held/webhooks")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"Held deliveries", `action="/w/held/webhooks/take-held"`, `action="/w/held/webhooks/drop-held"`, fmt.Sprintf(`name="record" value="%d"`, rec), "secret:GITHUB_SECRET"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the webhooks page (%d) does not show %q", resp.StatusCode, want)
		}
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(string(page))
	if csrf == nil {
		t.Fatalf("no form on the webhooks page:\n%s", page)
	}
	resp, err = browser.PostForm(k.api+"/w/held/webhooks/drop-held", url.Values{"csrf": {csrf[1]}, "record": {fmt.Sprint(rec)}})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(after), "dropped 1 held webhook delivery") {
		t.Errorf("after the page's Drop (%d %s):\n%s", resp.StatusCode, resp.Request.URL, after)
	}
	for _, d := range k.held().Held {
		if d.Record == rec {
			t.Errorf("delivery %d is still held after the page's Drop", rec)
		}
	}
}
