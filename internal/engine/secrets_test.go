package engine_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/account"
	"github.com/keep-run/keep/internal/daemon"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/testsink"
)

const secretScript = `export default Keep.workflow({ name: "sig", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: { id: "a" } })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) {
      const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }
      const seen = await ctx.http.request({ method: "GET", url: "%SINK%/echo?key={secret:sig}", headers: { "X-Custom-Sig": "{secret:sig}" } })
      ctx.log("the script saw " + JSON.stringify(seen.json))
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: { seen: seen.json.headers, query: seen.json.query } }
    },
    async mutate(ctx, p) {
      await ctx.http.request({ method: "POST", url: "%SINK%/write/a", json: p.data,
        headers: { "X-Custom-Sig": "{secret:sig}", "Authorization": "Bearer {secret:tok}" } })
    },
  }) },
})`

// storeText is every byte of the SQLite store on disk ("" on PostgreSQL).
func storeText(e *env) string {
	var b strings.Builder
	for _, f := range []string{"keep.db", "keep.db-wal"} {
		raw, _ := os.ReadFile(filepath.Join(e.dir, "data", f))
		b.Write(raw)
	}
	return b.String()
}

// Issue 22 "no credentials in scripts" and issue 23's low finding: a
// script names secrets kept in keep; the host fills them in at the call
// (the server gets them), the script never sees them (an echoing read
// shows it the mask), and a server that quotes them back in an error body
// leaves them nowhere: not in the run's error, its trace, its prepare
// result, keep show run, the ledger, nor anywhere in keep.db. A name keep
// does not have waits for a person, with a card saying keep secret set.
func TestSecretsAreFilledAtTheCallAndShownNowhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const sig, tok = "sig-7Hq2-custom-value", "tok-9Zp4-bearer-value"
	wf := e.deploy(secretScript)
	e.settle()

	r := e.open(wf)
	if r.Status != kt.StatusApproval || !strings.Contains(r.ErrorMessage, "{secret:sig}") || !strings.HasSuffix(r.ErrorMessage, "keep secret set sig --host "+e.sink.Host()) {
		t.Fatalf("a run naming an unknown secret: %s: %s (want it waiting for a person, saying keep secret set sig --host HOST)", r.Status, r.ErrorMessage)
	}
	if n := e.sink.Requests(); n != 0 {
		t.Fatalf("%d requests went out naming a secret keep does not have", n)
	}

	accts, err := daemon.Accounts(filepath.Join(e.dir, "data"), e.k.Store)
	if err != nil {
		t.Fatal(err)
	}
	secrets := &account.Secrets{Store: e.k.Store, Box: accts.Box}
	for name, v := range map[string]string{"sig": sig, "tok": tok} {
		if err := secrets.SetScoped(e.ctx(), name, v, []string{e.sink.Host()}); err != nil {
			t.Fatal(err)
		}
	}
	e.sink.Queue(testsink.EchoHeaders)
	e.resolve(r.ID, kt.ResolveTryAgain)
	e.settle()

	r = e.open(wf)
	if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, "400 Bad Request: bad signature [redacted]") {
		t.Fatalf("after the server quoted the headers back: %s: %s", r.Status, r.ErrorMessage)
	}
	if len(e.sink.Headers) != 1 || e.sink.Headers[0].Get("X-Custom-Sig") != sig || e.sink.Headers[0].Get("Authorization") != "Bearer "+tok {
		t.Fatalf("the server got %v; want the secrets filled in", e.sink.Headers)
	}
	detail, err := report.ShowRun(e.ctx(), e.k.Store, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	shown, _ := json.Marshal(detail)
	card, _ := json.Marshal(r)
	for what, text := range map[string]string{"keep show run": string(shown), "the run": string(card), "keep.db": storeText(e)} {
		for _, v := range []string{sig, tok} {
			if strings.Contains(text, v) {
				t.Errorf("%s holds the secret %q", what, v)
			}
		}
	}
	if !strings.Contains(string(shown), "X-Custom-Sig") || !strings.Contains(string(shown), "{secret:sig}") || !strings.Contains(string(shown), "[redacted]") {
		t.Errorf("keep show run should show the call with its placeholder and the echo masked: %s", shown)
	}
	if !strings.Contains(string(r.PrepareResult), `"X-Custom-Sig":["[redacted]"]`) || !strings.Contains(string(r.PrepareResult), `"query":"key=[redacted]"`) {
		t.Errorf("the script saw the echo unmasked, or not at all: %s", r.PrepareResult)
	}
}

// Issue 38 #4 in a consumer's mutate: a write whose header names a secret
// the workflow was not granted sends nothing — the ledger's row is
// certainly not applied — and its run waits with the card's grant; once
// granted, the run tries again by itself and the write goes once, with
// the value and the same idempotency key.
func TestAWriteWaitsForItsSecretsGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	accts, err := daemon.Accounts(filepath.Join(e.dir, "data"), e.k.Store)
	if err != nil {
		t.Fatal(err)
	}
	secrets := &account.Secrets{Store: e.k.Store, Box: accts.Box}
	for name, v := range map[string]string{"sig": "sig-value-0a1b2c", "tok": "tok-value-3d4e5f"} {
		if err := secrets.SetScoped(e.ctx(), name, v, []string{e.sink.Host()}); err != nil {
			t.Fatal(err)
		}
	}
	wf := e.deploy(strings.Replace(secretScript, `const seen = await ctx.http.request({ method: "GET", url: "%SINK%/echo?key={secret:sig}", headers: { "X-Custom-Sig": "{secret:sig}" } })`, `const seen = { json: {} }`, 1))
	if _, err := revoke(e.ctx(), e.k.Store, wf, []string{"secret:tok"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusApproval || kt.NeededGrant(r.ErrorMessage) != "secret:tok" || len(e.sink.Writes()) != 0 || len(e.sink.Headers) != 0 {
		t.Fatalf("a write naming an ungranted secret: %s %q, %d writes", r.Status, r.ErrorMessage, len(e.sink.Headers))
	}
	if _, err := grant(e.ctx(), e.k.Store, wf, []string{"secret:tok"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.settle()
	e.noOpenRun(wf)
	if ws := e.sink.Writes(); len(ws) != 1 || len(e.sink.Headers) != 1 || e.sink.Headers[0].Get("Authorization") != "Bearer tok-value-3d4e5f" {
		t.Fatalf("after the grant: %d writes, headers %v", len(ws), e.sink.Headers)
	}
}
