package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/daemon"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// attacker is issue 23's attack: a workflow granted only http.request
// POSTs to keep serve's own API — deploy a workflow with grant: true,
// approve another workflow's held write, pause it — signing each with
// keep's client header and a name of its choosing. One event per call
// (a run writes once).
func attacker(addr, victimRun string) string {
	evil, _ := json.Marshal(map[string]any{"grant": true, "filesRoot": "/", "script": `export default Keep.workflow({ name: "evil", topics: {}, producers: { p: { schedule: { interval: "1h" }, handler: async (ctx) => { await ctx.files.read({ path: "etc/passwd" }) } } } })`})
	calls, _ := json.Marshal([]map[string]any{
		{"id": "deploy", "path": "/api/v1/workflows", "body": json.RawMessage(evil)},
		{"id": "approve", "path": "/api/v1/runs/" + victimRun + "/approve", "body": map[string]any{}},
		{"id": "pause", "path": "/api/v1/workflows/hook/pause", "body": map[string]any{}},
	})
	return `export default Keep.workflow({ name: "attacker", topics: { "call": {} },
  producers: { p: { publishes: ["call"], schedule: { interval: "1h" }, handler: async (ctx) => {
    for (const c of ` + string(calls) + `) {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id: c.id, title: "call " + c.id })
      await ctx.publish("call", { messageId: c.id, inputId, payload: c })
    } } } },
  consumers: { c: Keep.consumer({ subscribe: ["call"],
    async prepare(ctx) { const [e] = await ctx.peek("call"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "call", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) {
      await ctx.http.request({ method: "POST", url: "http://` + addr + `" + p.data.path, json: p.data.body,
        headers: { "X-Keep-Client": "cli", "X-Keep-Actor": "alice", "User-Agent": "keep-cli" } })
    } }) } })`
}

func (r *rig) openRun(wf string) kt.Run {
	r.t.Helper()
	var run kt.Run
	if err := r.k.Store.View(context.Background(), func(tx store.Tx) error {
		var err error
		run, err = tx.RunOpen(wf)
		return err
	}); err != nil {
		r.t.Fatalf("no blocked run of %s: %v", wf, err)
	}
	return run
}

func (r *rig) decisions(wf string) []kt.Decision {
	r.t.Helper()
	var ds []kt.Decision
	if err := r.k.Store.View(context.Background(), func(tx store.Tx) error {
		var err error
		ds, err = tx.DecisionList(wf, "")
		return err
	}); err != nil {
		r.t.Fatal(err)
	}
	return ds
}

func TestAScriptCannotActOnKeepThroughItsAPI(t *testing.T) {
	t.Parallel()
	for _, allowSelf := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep serve's address allowed=%v", allowSelf), func(t *testing.T) {
			t.Parallel()
			r := newRigWith(t, "", allowSelf)
			addr := r.srv.Listener.Addr().String()
			operator := map[string]string{"X-Keep-Actor": "operator"}
			// The victim: a workflow whose write waits for a person's approval.
			if code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": strings.ReplaceAll(script, "%SINK%", r.sink.URL), "grant": true}, operator); code != 200 {
				t.Fatalf("deploy hook: %d %v", code, obj)
			}
			r.settle()
			victim := r.openRun("hook")
			if code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": attacker(addr, victim.ID), "grant": true}, operator); code != 200 {
				t.Fatalf("deploy attacker: %d %v", code, obj)
			}
			// The attack's premise: http.request granted for every host
			// (the form grants had then), so the guard is what stops it.
			if code, obj, _ := r.call("POST", "/api/v1/workflows/attacker/grant", map[string]any{"items": []string{"http.request"}}, operator); code != 200 {
				t.Fatalf("grant the attacker http.request: %d %v", code, obj)
			}
			want := "keep refuses to connect to " + addr + ": a loopback address"
			if allowSelf {
				want = "answered 403 Forbidden"
			}
			for i := 0; i < 3; i++ {
				r.settle()
				run := r.openRun("attacker")
				if run.Status != kt.StatusApproval || !strings.Contains(run.ErrorMessage, want) {
					t.Fatalf("attacker's call %d: %s %q, want a card saying %q", i, run.Status, run.ErrorMessage, want)
				}
				if code, obj, _ := r.call("POST", "/api/v1/runs/"+run.ID+"/resolve", map[string]any{"action": "skip"}, operator); code != 200 {
					t.Fatalf("skip: %d %v", code, obj)
				}
			}
			r.settle()
			// Nothing the script asked for happened.
			if code, _, _ := r.call("GET", "/api/v1/workflows/evil", nil, nil); code != http.StatusNotFound {
				t.Fatalf("the script deployed a workflow: %d", code)
			}
			if run := r.openRun("hook"); run.ID != victim.ID || run.Status != kt.StatusApproval || len(r.sink.Writes()) != 0 {
				t.Fatalf("the held write was approved: %s %s, %d writes", run.ID, run.Status, len(r.sink.Writes()))
			}
			_, wf, _ := r.call("GET", "/api/v1/workflows/hook", nil, nil)
			if wf["paused"] == true {
				t.Fatalf("the script paused hook: %v", wf)
			}
			for _, d := range append(r.decisions("hook"), r.decisions("attacker")...) {
				if d.By != "operator" {
					t.Fatalf("a decision by %q (%s %s): only the operator decided", d.By, d.Action, d.Workflow)
				}
			}
			if n := len(r.decisions("attacker")); n != 5 { // deploy, the grant, three skips
				t.Fatalf("attacker's decisions: %d", n)
			}
		})
	}
}

// The API's state changes need the instance secret or the token; a shared
// header is no proof, and X-Keep-Actor names the actor only beside the
// secret.
func TestStateChangesNeedTheInstanceSecret(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, "tok-123", false)
	if code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": strings.ReplaceAll(script, "%SINK%", r.sink.URL), "grant": true}, nil); code != 200 {
		t.Fatalf("deploy: %d %v", code, obj)
	}
	code, obj, _ := r.call("POST", "/api/v1/workflows/hook/pause", nil, map[string]string{"Authorization": "", "X-Keep-Client": "cli", "X-Keep-Actor": "alice"})
	msg, _ := obj["error"].(map[string]any)["message"].(string)
	if code != http.StatusUnauthorized || !strings.Contains(msg, "api.secret") {
		t.Fatalf("a shared header: %d %v", code, obj)
	}
	// The secret, even with keep's connector's User-Agent: refused.
	if code, obj, _ := r.call("POST", "/api/v1/workflows/hook/pause", nil, map[string]string{"User-Agent": "keep"}); code != http.StatusForbidden || errorCode(obj) != "connector" {
		t.Fatalf("from keep's connector: %d %v", code, obj)
	}
	for _, c := range []struct{ auth, actor, verb, want string }{
		{"secret", "alice", "pause", "alice"},         // the CLI's --by, at the data directory's terminal
		{"token", "mallory", "resume", "api (token)"}, // the token proves access, not a name
	} {
		h := map[string]string{"X-Keep-Actor": c.actor}
		if c.auth == "token" {
			h["Authorization"] = "Bearer tok-123"
		}
		if code, obj, _ := r.call("POST", "/api/v1/workflows/hook/"+c.verb, nil, h); code != 200 {
			t.Fatalf("%s with the %s: %d %v", c.verb, c.auth, code, obj)
		}
		ds := r.decisions("hook")
		if d := ds[len(ds)-1]; d.Action != c.verb || d.By != c.want {
			t.Fatalf("%s with the %s: the decision log says %s by %q, want %q", c.verb, c.auth, d.Action, d.By, c.want)
		}
	}
	// The secret lives in the data directory, readable by its owner only.
	secret, err := daemon.ReadAPISecret(r.k.DataDir)
	if err != nil || len(secret) < 32 {
		t.Fatalf("api.secret: %v", err)
	}
}

// The page shows a flash message only when keep itself put it in the link
// (signed): a link of someone else's cannot make keep's page say anything.
func TestThePageShowsOnlyItsOwnFlashMessages(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	get := func(path string) string {
		resp, err := http.Get(r.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	forged := "Your session expired: sign in again at evil.example"
	if page := get("/?flash=" + url.QueryEscape(forged)); strings.Contains(page, "evil.example") {
		t.Fatalf("the page shows a flash text from the link")
	}
	// keep's own message, from a real action through the page's form.
	if code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": strings.ReplaceAll(script, "%SINK%", r.sink.URL), "grant": true}, nil); code != 200 {
		t.Fatalf("deploy: %d %v", code, obj)
	}
	csrf := r.pageCSRF()
	req, _ := http.NewRequest("POST", r.srv.URL+"/w/hook/pause", strings.NewReader(url.Values{"csrf": {csrf.Value}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(csrf)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	msg := loc.Query().Get("flash")
	if msg == "" || !strings.Contains(get(loc.RequestURI()), html.EscapeString(msg)) {
		t.Fatalf("keep's own flash %q is not shown (%s)", msg, loc)
	}
	// The same signature on another text is no signature.
	q := loc.Query()
	q.Set("flash", forged)
	if strings.Contains(get(loc.Path+"?"+q.Encode()), "evil.example") {
		t.Fatalf("a signature of another message let a forged text through")
	}
}
