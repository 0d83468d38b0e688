package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/inproc"
	"github.com/keep-run/keep/internal/testsink"
)

type rig struct {
	t    *testing.T
	k    *daemon.Keep
	srv  *httptest.Server
	sink *testsink.Sink
}

func newRig(t *testing.T, token string) *rig { return newRigWith(t, token, false) }

// newRigWith is newRig; allowSelf puts keep serve's own address in
// keep.toml's [connectors.http] allow (a person who declared it).
func newRigWith(t *testing.T, token string, allowSelf bool) *rig {
	t.Helper()
	return newRigOn(t, token, allowSelf, "")
}

// newRigOn is newRigWith on the store at storeURL ("": SQLite in the data
// directory).
func newRigOn(t *testing.T, token string, allowSelf bool, storeURL string) *rig {
	t.Helper()
	dir := t.TempDir()
	sink := testsink.New()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	allow := fmt.Sprintf("%q", sink.Host())
	if allowSelf {
		allow += fmt.Sprintf(", %q", ln.Addr().String())
	}
	cfg := filepath.Join(dir, "keep.toml")
	if err := os.WriteFile(cfg, []byte("[connectors.http]\nallow = ["+allow+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := daemon.Open(daemon.Options{DataDir: filepath.Join(dir, "data"), Store: storeURL, ConfigFile: cfg, FilesRoot: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(k.HTTPHandler(token))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() { srv.Close(); sink.Close(); k.Close() })
	return &rig{t: t, k: k, srv: srv, sink: sink}
}

// call sends a request as keep's CLI would (the data directory's instance
// secret) unless headers say otherwise ("" removes a header).
func (r *rig) call(method, path string, body any, headers map[string]string) (int, map[string]any, []any) {
	r.t.Helper()
	var rd io.Reader
	if body != nil {
		if s, ok := body.(string); ok {
			rd = strings.NewReader(s)
		} else {
			b, _ := json.Marshal(body)
			rd = strings.NewReader(string(b))
		}
	}
	req, _ := http.NewRequest(method, r.srv.URL+path, rd)
	secret, err := daemon.ReadAPISecret(r.k.DataDir)
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var obj map[string]any
	var arr []any
	if json.Unmarshal(raw, &obj) != nil {
		_ = json.Unmarshal(raw, &arr)
	}
	return resp.StatusCode, obj, arr
}

// pageCSRF is the CSRF cookie the page sets, as a browser keeps it
// (cookies: what the browser sends with it, a session).
func (r *rig) pageCSRF(cookies ...*http.Cookie) *http.Cookie {
	r.t.Helper()
	req, _ := http.NewRequest("GET", r.srv.URL+"/", nil)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	return r.cookie(http.DefaultClient.Do(req))("keep_csrf")
}

// login signs in to the page with keep serve's token: its session cookie.
func (r *rig) login(token string) *http.Cookie {
	r.t.Helper()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return r.cookie(noRedirect.PostForm(r.srv.URL+"/login", url.Values{"token": {token}, "next": {"/"}}))("keep_session")
}

// cookie reads a response's cookie by name; the test stops if there is none.
func (r *rig) cookie(resp *http.Response, err error) func(name string) *http.Cookie {
	r.t.Helper()
	if err != nil {
		r.t.Fatal(err)
	}
	resp.Body.Close()
	return func(name string) *http.Cookie {
		r.t.Helper()
		for _, c := range resp.Cookies() {
			if c.Name == name {
				return c
			}
		}
		r.t.Fatalf("%s %s answered %d without the cookie %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, name)
		return nil
	}
}

func (r *rig) settle() {
	r.t.Helper()
	if err := r.k.Scheduler.RunUntilIdle(r.t.Context()); err != nil {
		r.t.Fatal(err)
	}
}

const script = `export default Keep.workflow({
  name: "hook", requireApproval: ["http.request"],
  topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "<script>alert(1)</script> Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: {} })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: {} } },
    async mutate(ctx) { await ctx.http.request({ method: "POST", url: "%SINK%/write/a", json: { hello: "world" } }) } }) } })`

func errorCode(obj map[string]any) string {
	e, _ := obj["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func TestEveryEndpoint(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	src := strings.ReplaceAll(script, "%SINK%", r.sink.URL)

	// Deploy: a bad script is refused with its problems, nothing stored.
	code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": "export default Keep.workflow({ name: 'x' })"}, nil)
	if code != http.StatusUnprocessableEntity || errorCode(obj) != "invalid_script" {
		t.Fatalf("invalid deploy: %d %v", code, obj)
	}
	code, obj, _ = r.call("POST", "/api/v1/workflows", map[string]any{"script": src, "file": "hook.js", "grant": true}, nil)
	if code != 200 || obj["workflow"] != "hook" || obj["version"] != "1.0" {
		t.Fatalf("deploy: %d %v", code, obj)
	}
	r.settle()

	code, _, arr := r.call("GET", "/api/v1/workflows", nil, nil)
	if code != 200 || len(arr) != 1 || arr[0].(map[string]any)["status"] != "blocked" {
		t.Fatalf("workflows: %d %v", code, arr)
	}
	code, obj, _ = r.call("GET", "/api/v1/workflows/hook", nil, nil)
	blocked := obj["blocked"].([]any)
	if code != 200 || len(blocked) != 1 {
		t.Fatalf("workflow: %d %v", code, obj)
	}
	card := blocked[0].(map[string]any)
	runID := card["runId"].(string)
	if m := card["mutation"].(map[string]any); m["tool"] != "http" || !strings.Contains(m["target"].(string), "/write/a") {
		t.Fatalf("card %v", card)
	}
	for _, p := range []string{"/versions", "/inputs", "/outputs", "/runs", "/runs?limit=1000", "/items", "/items?orphaned=1", "/blocked"} {
		if code, obj, arr := r.call("GET", "/api/v1/workflows/hook"+p, nil, nil); code != 200 || obj != nil && errorCode(obj) != "" || arr == nil {
			t.Fatalf("%s: %d %v", p, code, obj)
		}
	}
	_, _, inputs := r.call("GET", "/api/v1/workflows/hook/inputs", nil, nil)
	in := inputs[0].(map[string]any)
	for _, f := range []string{"id", "source", "type", "externalId", "title", "status", "attempt", "createdAt"} {
		if _, ok := in[f]; !ok {
			t.Errorf("input lacks %s", f)
		}
	}
	if code, obj, _ := r.call("GET", "/api/v1/runs/"+runID, nil, nil); code != 200 || obj["card"] == nil || obj["blocked"] != true {
		t.Fatalf("run: %d %v", code, obj)
	}
	if code, obj, _ := r.call("GET", "/api/v1/runs/"+runID+"/trace", nil, nil); code != 200 || len(obj["trace"].([]any)) == 0 {
		t.Fatalf("trace: %d %v", code, obj)
	}
	// Actions: a wrong one is refused with 409, then approve works once.
	if code, obj, _ := r.call("POST", "/api/v1/runs/"+runID+"/resolve", map[string]string{"action": "didnt-happen"}, nil); code != http.StatusConflict || errorCode(obj) != "not_applicable" {
		t.Fatalf("didnt-happen on an approval: %d %v", code, obj)
	}
	if code, obj, _ := r.call("POST", "/api/v1/runs/"+runID+"/approve", nil, nil); code != 200 || obj["ok"] != true {
		t.Fatalf("approve: %d %v", code, obj)
	}
	if code, _, _ := r.call("POST", "/api/v1/runs/"+runID+"/approve", nil, nil); code != http.StatusConflict {
		t.Fatalf("second approve: %d", code)
	}
	r.settle()
	if n := len(r.sink.Writes()); n != 1 {
		t.Fatalf("writes %d", n)
	}
	_, _, outs := r.call("GET", "/api/v1/workflows/hook/outputs", nil, nil)
	if outs[0].(map[string]any)["status"] != "applied" {
		t.Fatalf("outputs %v", outs)
	}
	// Items.
	key := url.PathEscape("system:schedule:a")
	if code, obj, _ := r.call("GET", "/api/v1/items/"+key, nil, nil); code != 200 || len(obj["attempts"].([]any)) != 1 {
		t.Fatalf("item: %d %v", code, obj)
	}
	if code, obj, _ := r.call("POST", "/api/v1/items/"+key+"/reprocess", nil, nil); code != 200 || !strings.Contains(obj["message"].(string), "attempt 2") {
		t.Fatalf("reprocess: %d %v", code, obj)
	}
	if code, obj, _ := r.call("POST", "/api/v1/items/"+key+"/skip", nil, nil); code != 200 {
		t.Fatalf("skip: %d %v", code, obj)
	}
	// Workflow actions.
	for _, verb := range []string{"pause", "resume"} {
		if code, obj, _ := r.call("POST", "/api/v1/workflows/hook/"+verb, nil, nil); code != 200 || obj["ok"] != true {
			t.Fatalf("%s: %d %v", verb, code, obj)
		}
	}
	// The decision log, newest first, as the page's topics view shows it.
	if code, _, ds := r.call("GET", "/api/v1/workflows/hook/decisions?limit=1", nil, nil); code != 200 || len(ds) != 1 || ds[0].(map[string]any)["action"] != "resume" {
		t.Fatalf("decisions: %d %v", code, ds)
	}
	r.settle()
	if code, obj, _ := r.call("POST", "/api/v1/workflows/hook/run-now", nil, nil); code != 200 || obj["queued"] != float64(1) {
		t.Fatalf("run-now: %d %v", code, obj)
	}
	// Topics and events (issue 12 #8): counts, a page of events with their
	// causes, the controls; bad parameters are refused.
	code, obj, _ = r.call("GET", "/api/v1/workflows/hook/topics", nil, nil)
	if ts, _ := obj["topics"].([]any); code != 200 || len(ts) == 0 || obj["producers"] == nil {
		t.Fatalf("topics: %d %v", code, obj)
	}
	code, obj, _ = r.call("GET", "/api/v1/workflows/hook/events?limit=1", nil, nil)
	evs, _ := obj["events"].([]any)
	if code != 200 || len(evs) != 1 || obj["next"] == nil {
		t.Fatalf("events page: %d %v", code, obj)
	}
	if ev := evs[0].(map[string]any); ev["payload"] == nil || len(ev["causedBy"].([]any)) == 0 {
		t.Fatalf("event %v", ev)
	}
	for _, bad := range []string{"?status=lost", "?limit=0", "?after=x"} {
		if code, obj, _ := r.call("GET", "/api/v1/workflows/hook/events"+bad, nil, nil); code/100 != 4 || errorCode(obj) == "" {
			t.Fatalf("events%s: %d %v", bad, code, obj)
		}
	}
	if code, obj, _ := r.call("POST", "/api/v1/workflows/hook/topics/job/skip-pending", nil, nil); code != 200 || !strings.Contains(obj["message"].(string), "pending events skipped") {
		t.Fatalf("skip-pending: %d %v", code, obj)
	}
	if code, obj, _ := r.call("POST", "/api/v1/workflows/hook/handlers/nope/reset-state", nil, nil); code != http.StatusNotFound {
		t.Fatalf("reset-state of an unknown handler: %d %v", code, obj)
	}
	// Nodes: none on SQLite, an empty list.
	if code, _, arr := r.call("GET", "/api/v1/nodes", nil, nil); code != 200 || arr == nil || len(arr) != 0 {
		t.Fatalf("nodes: %d %v", code, arr)
	}
	// Metrics.
	resp, err := http.Get(r.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"keep_runs{", "keep_mutations{", "keep_pending_events", "keep_run_duration_seconds_bucket", "keep_sandbox_call_seconds_bucket",
		"keep_store_commits_total", "keep_store_transactions_total", "keep_sandbox_vms_created_total", "keep_sandbox_vms_discarded_total"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("metrics lack %s", m)
		}
	}
}

// TestAnUnknownVerbIsNoAction: a verb that names no action, wherever a
// route or a body names one, gets the same answer — 404 not_found saying
// which verbs there are under that noun (issue 41: the verb becomes an
// action once, through Control's table) — and nothing is logged.
func TestAnUnknownVerbIsNoAction(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.call("POST", "/api/v1/workflows", map[string]any{"script": strings.ReplaceAll(script, "%SINK%", r.sink.URL), "grant": true}, nil)
	r.settle()
	before := len(r.decisions("hook"))
	cases := []struct {
		path string
		body any
		want string
	}{
		{"/api/v1/workflows/hook/explode", nil, `no workflow action "explode" (pause, resume, run-now, grant, revoke)`},
		{"/api/v1/items/x/explode?workflow=hook", nil, `no item action "explode" (skip, reprocess)`},
		{"/api/v1/workflows/hook/repairs/x/explode", nil, `no repair action "explode" (approve, reject)`},
		{"/api/v1/runs/x/resolve", map[string]string{"action": "explode"}, `no run action "explode" (try-again, didnt-happen, skip, reprocess, approve)`},
	}
	for _, c := range cases {
		code, obj, _ := r.call("POST", c.path, c.body, nil)
		msg, _ := obj["error"].(map[string]any)["message"].(string)
		if code != 404 || errorCode(obj) != "not_found" || msg != c.want {
			t.Errorf("%s: %d %s %q, want 404 not_found %q", c.path, code, errorCode(obj), msg, c.want)
		}
	}
	if n := len(r.decisions("hook")) - before; n != 0 {
		t.Errorf("unknown verbs logged %d decisions", n)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	cases := []struct {
		method, path string
		body         any
		status       int
		code         string
	}{
		{"GET", "/api/v1/workflows/nope", nil, 404, "not_found"},
		{"GET", "/api/v1/workflows/nope/inputs", nil, 404, "not_found"},
		{"GET", "/api/v1/workflows/nope/versions", nil, 404, "not_found"},
		{"GET", "/api/v1/runs/nope", nil, 404, "not_found"},
		{"GET", "/api/v1/items/nope", nil, 404, "not_found"},
		{"POST", "/api/v1/runs/nope/resolve", map[string]string{"action": "skip"}, 404, "not_found"},
		{"POST", "/api/v1/runs/nope/resolve", map[string]string{"action": "explode"}, 404, "not_found"},
		{"POST", "/api/v1/runs/nope/resolve", `{"action":`, 400, "bad_request"},
		{"POST", "/api/v1/runs/nope/resolve", map[string]any{"action": "skip", "extra": 1}, 400, "bad_request"},
		{"POST", "/api/v1/workflows", map[string]any{}, 400, "bad_request"},
		{"POST", "/api/v1/workflows", map[string]any{"script": "x", "kind": "huge"}, 400, "bad_request"},
		{"POST", "/api/v1/workflows", map[string]any{"script": "export default {", "kind": "minor"}, 422, "invalid_script"},
		{"POST", "/api/v1/workflows/nope/pause", nil, 404, "not_found"},
		{"GET", "/api/v1/workflows/hook/decisions?limit=0", nil, 400, "bad_request"},
		{"POST", "/api/v1/workflows/nope/explode", nil, 404, "not_found"},
		{"GET", "/api/v1/workflows/x/runs?limit=lots", nil, 400, "bad_request"},
		{"GET", "/api/v1/nothing", nil, 404, "not_found"},
		{"POST", "/api/v1/items/nope/skip", nil, 404, "not_found"},
	}
	for _, c := range cases {
		code, obj, _ := r.call(c.method, c.path, c.body, nil)
		if code != c.status || errorCode(obj) != c.code {
			t.Errorf("%s %s: %d %v, want %d %s", c.method, c.path, code, obj, c.status, c.code)
		}
		if msg, _ := obj["error"].(map[string]any)["message"].(string); msg == "" {
			t.Errorf("%s %s: no message", c.method, c.path)
		}
	}
}

func TestTokenAndCSRF(t *testing.T) {
	t.Parallel()
	r := newRig(t, "s3cret-token")
	// No token: 401 for the API, a redirect to the login page for pages.
	if code, obj, _ := r.call("GET", "/api/v1/workflows", nil, map[string]string{"Authorization": ""}); code != 401 || errorCode(obj) != "unauthorized" {
		t.Fatalf("no token: %d %v", code, obj)
	}
	if code, _, _ := r.call("GET", "/api/v1/workflows", nil, map[string]string{"Authorization": "Bearer wrong"}); code != 401 {
		t.Fatalf("wrong token: %d", code)
	}
	if code, _, _ := r.call("GET", "/api/v1/workflows", nil, map[string]string{"Authorization": "Bearer s3cret-token"}); code != 200 {
		t.Fatalf("token: %d", code)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, _ := noRedirect.Get(r.srv.URL + "/w/hook")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Fatalf("page without a session: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp.Body.Close()
	// Logging in sets a session cookie that opens the pages.
	resp, _ = noRedirect.PostForm(r.srv.URL+"/login", url.Values{"token": {"wrong"}})
	if resp.StatusCode != 401 {
		t.Fatalf("bad login: %d", resp.StatusCode)
	}
	for _, evil := range []string{"//evil.example/", "/\\evil.example/", "https://evil.example/"} {
		resp, _ := noRedirect.PostForm(r.srv.URL+"/login", url.Values{"token": {"s3cret-token"}, "next": {evil}})
		if loc := resp.Header.Get("Location"); loc != "/" {
			t.Fatalf("login with next=%q redirects to %q", evil, loc)
		}
	}
	resp, _ = noRedirect.PostForm(r.srv.URL+"/login", url.Values{"token": {"s3cret-token"}, "next": {"/"}})
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "keep_session" {
			session = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || session == nil || !session.HttpOnly {
		t.Fatalf("login: %d %v", resp.StatusCode, resp.Cookies())
	}
	req, _ := http.NewRequest("GET", r.srv.URL+"/", nil)
	req.AddCookie(session)
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("page with a session: %d %v", resp.StatusCode, resp.Header)
	}
	// CSRF: a state change with the session cookie but without proof is
	// refused: the API's needs a bearer, the page's its CSRF token.
	req, _ = http.NewRequest("POST", r.srv.URL+"/api/v1/workflows/hook/pause", nil)
	req.AddCookie(session)
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("cookie-only POST to the API: %d", resp.StatusCode)
	}
	req, _ = http.NewRequest("POST", r.srv.URL+"/w/hook/pause", nil)
	req.AddCookie(session)
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cookie-only POST to the page: %d", resp.StatusCode)
	}
	// A cross-site form post is refused even with keep's header.
	code, obj, _ := r.call("POST", "/api/v1/workflows/hook/pause", nil, map[string]string{"Authorization": "", "Origin": "http://evil.example"})
	if code != 401 && code != 403 {
		t.Fatalf("cross-site: %d %v", code, obj)
	}
}

func TestLoopbackCSRFWithoutToken(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	// A page on another site posting to keep on localhost: no cookie, no header.
	code, obj, _ := r.call("POST", "/api/v1/workflows/x/pause", nil, map[string]string{"Authorization": "", "Origin": "http://evil.example"})
	if code != http.StatusForbidden || errorCode(obj) != "csrf" {
		t.Fatalf("cross-site post to loopback: %d %v", code, obj)
	}
	code, obj, _ = r.call("POST", "/api/v1/workflows/x/pause", nil, map[string]string{"Authorization": "", "Content-Type": "application/x-www-form-urlencoded"})
	if code != http.StatusUnauthorized {
		t.Fatalf("form post to the API without the secret: %d %v", code, obj)
	}
	code, obj, _ = r.call("POST", "/w/x/pause", nil, map[string]string{"Authorization": "", "Content-Type": "application/x-www-form-urlencoded"})
	if code != http.StatusForbidden || errorCode(obj) != "csrf" {
		t.Fatalf("form post to the page without its CSRF token: %d %v", code, obj)
	}
	// keep's own page: the CSRF cookie and field match.
	csrf := r.pageCSRF()
	req, _ := http.NewRequest("POST", r.srv.URL+"/w/x/pause", strings.NewReader(url.Values{"csrf": {csrf.Value}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(csrf)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	if err != nil || resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "flash=") {
		t.Fatalf("form with the CSRF token: %v %d", err, resp.StatusCode)
	}
	// A verb that is no action is refused by the API's one table, in its
	// words, shown as the page's flash (the page names no list of verbs).
	req, _ = http.NewRequest("POST", r.srv.URL+"/w/x/explode", strings.NewReader(url.Values{"csrf": {csrf.Value}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(csrf)
	resp, err = noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || loc == nil || !strings.Contains(loc.Query().Get("flash"), `no workflow action "explode"`) {
		t.Fatalf("unknown page action: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestScriptTitlesAreEscaped(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.call("POST", "/api/v1/workflows", map[string]any{"script": strings.ReplaceAll(script, "%SINK%", r.sink.URL), "grant": true}, nil)
	r.settle()
	for _, path := range []string{"/", "/w/hook", "/w/hook?runs=1", "/items/" + url.PathEscape("system:schedule:a")} {
		resp, err := http.Get(r.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "<script>alert(1)</script>") {
			t.Fatalf("%s renders the planted <script> unescaped", path)
		}
		if path != "/" && !strings.Contains(string(body), "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Fatalf("%s does not show the title at all:\n%s", path, body)
		}
	}
}

func TestEventsStreamChanges(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.call("POST", "/api/v1/workflows", map[string]any{"script": strings.ReplaceAll(script, "%SINK%", r.sink.URL), "grant": true}, nil)
	resp, err := http.Get(r.srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		var all strings.Builder
		for {
			n, err := resp.Body.Read(buf)
			all.Write(buf[:n])
			if strings.Contains(all.String(), "event: change\ndata: hook") {
				got <- all.String()
				return
			}
			if err != nil {
				got <- all.String()
				return
			}
		}
	}()
	r.call("POST", "/api/v1/workflows/hook/pause", nil, nil)
	select {
	case s := <-got:
		if !strings.Contains(s, "event: change\ndata: hook") {
			t.Fatalf("stream: %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no change event after an action")
	}
}

// DNS rebinding (issue 11 #6): a page on evil.example whose name resolves to
// 127.0.0.1 sends Host: evil.example. A tokenless keep serve refuses it, and
// nothing is deployed.
func TestTokenlessServeAnswersOnlyLoopbackHostNames(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	wfSrc := `export default Keep.workflow({ name: "rebound", topics: { a: {} }, producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async () => ({}) } } })`
	for _, host := range []string{"evil.example", "evil.example:8347", "127.0.0.1.evil.example", "10.0.0.1"} {
		code, body, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": wfSrc}, map[string]string{"Host": host})
		if code != http.StatusMisdirectedRequest || !strings.Contains(fmt.Sprint(body["error"]), "localhost") {
			t.Fatalf("Host %s: %d %v", host, code, body)
		}
		if code, _, _ := r.call("GET", "/api/v1/workflows", nil, map[string]string{"Host": host}); code != http.StatusMisdirectedRequest {
			t.Fatalf("GET with Host %s: %d", host, code)
		}
	}
	if code, _, arr := r.call("GET", "/api/v1/workflows", nil, nil); code != 200 || len(arr) != 0 {
		t.Fatalf("after the refused deploys: %d %v", code, arr)
	}
	for _, host := range []string{"localhost:8347", "127.0.0.1:1", "[::1]:8347", "LOCALHOST", "127.0.0.2"} {
		if code, _, _ := r.call("GET", "/api/v1/workflows", nil, map[string]string{"Host": host}); code != 200 {
			t.Fatalf("Host %s refused: %d", host, code)
		}
	}
}

// With a token, a write that names another site's origin is refused even
// with the bearer token (issue 11 #6).
func TestWritesFromAnotherOriginAreRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t, "s3cret")
	code, body, _ := r.call("POST", "/api/v1/workflows/x/pause", nil, map[string]string{"Authorization": "Bearer s3cret", "Origin": "https://evil.example"})
	if code != http.StatusForbidden {
		t.Fatalf("cross-origin write with a token: %d %v", code, body)
	}
}

// The event streams are capped: the next one gets a clear 503 (issue 11 #14).
func TestEventStreamsAreCapped(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	var open []*http.Response
	defer func() {
		for _, resp := range open {
			resp.Body.Close()
		}
	}()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 1}}
	for i := 0; i < api.MaxStreams; i++ {
		resp, err := client.Get(r.srv.URL + "/events")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("stream %d: %d", i, resp.StatusCode)
		}
		open = append(open, resp)
	}
	resp, err := client.Get(r.srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "at most") {
		t.Fatalf("stream over the cap: %d %s", resp.StatusCode, b)
	}
}

// A deploy without a grant: the page asks for it, the first call waits
// with a card offering Grant; POST …/grant allows it and the run goes on.
func TestTheGrantThePageAndTheAPIOffer(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	sinkHost := strings.TrimPrefix(r.sink.URL, "http://")
	if code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": strings.ReplaceAll(script, "%SINK%", r.sink.URL)}, nil); code != 200 ||
		fmt.Sprint(obj["ungranted"]) != "[http.request POST "+sinkHost+" source:system]" {
		t.Fatalf("deploy without a grant: %d %v", code, obj)
	}
	r.settle()
	page := func() string {
		resp, err := http.Get(r.srv.URL + "/w/hook")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if p := page(); !strings.Contains(p, "This workflow needs your permission") || !strings.Contains(p, `action="/w/hook/grant"`) || !strings.Contains(p, "is not granted to hook") {
		t.Fatalf("the page before the grant:\n%s", p)
	}
	// The card's Grant names exactly what its run was refused.
	_, blocked, _ := r.call("GET", "/api/v1/workflows/hook", nil, nil)
	if !strings.Contains(fmt.Sprint(blocked["blocked"]), "grantItem:source:system") {
		t.Fatalf("the card does not name the grant it offers: %v", blocked["blocked"])
	}
	if p := page(); !strings.Contains(p, `<input type="hidden" name="item" value="source:system"><button class="primary grant">Grant <code>source:system</code></button>`) {
		t.Fatalf("the card's Grant does not carry what it grants:\n%s", p)
	}
	code, obj, _ := r.call("POST", "/api/v1/workflows/hook/grant", nil, nil)
	if code != 200 || !strings.Contains(fmt.Sprint(obj["message"]), "granted hook: http.request POST "+sinkHost+", source:system") {
		t.Fatalf("grant: %d %v", code, obj)
	}
	r.settle()
	// The run went on to its write, which this script has a person approve.
	p := page()
	if strings.Contains(p, "needs your permission") || strings.Contains(p, "is not granted") || !strings.Contains(p, "Waiting for your approval") {
		t.Fatalf("the page after the grant:\n%s", p)
	}
	// The page lists the grants, each with Revoke; the API revokes one
	// as it was granted, and refuses one the workflow does not have.
	if !strings.Contains(p, "<code>http.request POST "+sinkHost+"</code>") || !strings.Contains(p, `action="/w/hook/revoke"`) {
		t.Fatalf("the page does not list the grants with Revoke:\n%s", p)
	}
	code, obj, _ = r.call("POST", "/api/v1/workflows/hook/revoke", map[string]any{"items": []string{"http.request GET " + sinkHost}}, nil)
	if code != 409 || !strings.Contains(fmt.Sprint(obj["error"]), "has no grant 'http.request GET "+sinkHost+"'") {
		t.Fatalf("revoking a grant the workflow lacks: %d %v", code, obj)
	}
	code, obj, _ = r.call("POST", "/api/v1/workflows/hook/revoke", map[string]any{"items": []string{"http.request POST " + sinkHost}}, nil)
	if code != 200 || !strings.Contains(fmt.Sprint(obj["message"]), "revoked hook: http.request POST "+sinkHost) {
		t.Fatalf("revoke: %d %v", code, obj)
	}
	_, obj, _ = r.call("GET", "/api/v1/workflows/hook", nil, nil)
	if st := fmt.Sprint(obj["status"]); strings.Contains(st, "grants:[http.request POST") || !strings.Contains(st, "ungranted:[http.request POST "+sinkHost+"]") {
		t.Fatalf("the status after the revoke: %s", st)
	}
}

// TestTheReadsTheCLIPrints: the reads added for the CLI's commands (keep
// status's cards of every workflow, keep run's schedule, keep grant's
// preview, keep show input, keep connections, keep secret list) answer
// what a person sees, and an unknown name is a 404 saying so.
func TestTheReadsTheCLIPrints(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	src := strings.ReplaceAll(script, "%SINK%", r.sink.URL)
	if code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": src, "file": "hook.js"}, nil); code != 200 {
		t.Fatalf("deploy: %d %v", code, obj)
	}
	// Not granted yet: the grant's preview lists what the version uses.
	code, obj, _ := r.call("GET", "/api/v1/workflows/hook/grants", nil, nil)
	toGrant, _ := obj["toGrant"].([]any)
	if code != 200 || len(toGrant) == 0 || len(obj["grants"].([]any)) != 0 {
		t.Fatalf("grants before: %d %v", code, obj)
	}
	if code, obj, _ := r.call("POST", "/api/v1/workflows/hook/grant", nil, nil); code != 200 {
		t.Fatalf("grant: %d %v", code, obj)
	}
	code, obj, _ = r.call("GET", "/api/v1/workflows/hook/grants", nil, nil)
	if code != 200 || len(obj["toGrant"].([]any)) != 0 || len(obj["grants"].([]any)) != len(toGrant) {
		t.Fatalf("grants after: %d %v (before: %v)", code, obj, toGrant)
	}
	r.settle()
	// Blocked on the approval: every workflow's cards list it.
	_, _, cards := r.call("GET", "/api/v1/blocked", nil, nil)
	if len(cards) != 1 || cards[0].(map[string]any)["workflow"] != "hook" {
		t.Fatalf("cards of every workflow: %v", cards)
	}
	_, _, sched := r.call("GET", "/api/v1/workflows/hook/schedule", nil, nil)
	if len(sched) != 1 || sched[0].(map[string]any)["handler"] != "p" || sched[0].(map[string]any)["nextRunAt"] == "" {
		t.Fatalf("schedule: %v", sched)
	}
	code, obj, _ = r.call("GET", "/api/v1/inputs/"+url.PathEscape("system:schedule:a"), nil, nil)
	if in, _ := obj["input"].(map[string]any); code != 200 || in["title"] != "<script>alert(1)</script> Job a" || obj["outputs"] == nil {
		t.Fatalf("input: %d %v", code, obj)
	}
	// A secret's name and when it was set; never its value.
	d := &inproc.Direct{DataDir: r.k.DataDir, Create: true}
	defer d.Close()
	secrets, err := d.Secrets()
	if err != nil {
		t.Fatal(err)
	}
	if err := secrets.Set(t.Context(), "crm", "s3cret-value"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(r.srv.URL + "/api/v1/secrets")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"name": "crm"`) || !strings.Contains(string(raw), `"setAt"`) || strings.Contains(string(raw), "s3cret") {
		t.Fatalf("secrets: %d %s", resp.StatusCode, raw)
	}
	if code, _, arr := r.call("GET", "/api/v1/connections", nil, nil); code != 200 || arr == nil || len(arr) != 0 {
		t.Fatalf("connections: %d %v", code, arr)
	}
	for _, p := range []string{"/api/v1/workflows/nope/grants", "/api/v1/workflows/nope/schedule", "/api/v1/workflows/nope/blocked", "/api/v1/inputs/nope"} {
		code, obj, _ := r.call("GET", p, nil, nil)
		if e, _ := obj["error"].(map[string]any); code != http.StatusNotFound || !strings.Contains(fmt.Sprint(e["message"]), "nope") {
			t.Errorf("%s: %d %v", p, code, obj)
		}
	}
}
