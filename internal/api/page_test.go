package api_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// pagePost presses a button of the page as a browser does — the form with
// its CSRF token, the cookies the page set (and the session, when keep
// serve has a token) — and answers the status and the flash message the
// page sends the person back with.
func (r *rig) pagePost(path string, form url.Values, cookies ...*http.Cookie) (int, string) {
	r.t.Helper()
	csrf := r.pageCSRF(cookies...)
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", csrf.Value)
	req, _ := http.NewRequest("POST", r.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range append(cookies, csrf) {
		req.AddCookie(c)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.StatusCode, loc.Query().Get("flash")
}

// apiSays is what the API answers a POST, as keep's CLI sends it: its
// status and its message (the reply's, or the refusal's).
func (r *rig) apiSays(path string, body any) (int, string) {
	r.t.Helper()
	code, obj, _ := r.call("POST", path, body, map[string]string{"X-Keep-Actor": "operator"})
	if e, ok := obj["error"].(map[string]any); ok {
		return code, fmt.Sprint(e["message"])
	}
	return code, fmt.Sprint(obj["message"])
}

// A button of the page is the API's POST (issue 24: the CLI and the page
// are clients of one API): whatever the API refuses — a decision on a
// card already decided or gone stale, an approval a run blocked for a
// grant cannot take, a grant the workflow does not have, a workflow,
// topic, handler, item or repair that is not there — the page refuses
// too, with the API's words, and changes nothing. Every action of the
// page is tried.
func TestThePageAndTheAPIRefuseAlike(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	sinkHost := strings.TrimPrefix(r.sink.URL, "http://")
	src := strings.ReplaceAll(script, "%SINK%", r.sink.URL)
	if code, msg := r.apiSays("/api/v1/workflows", map[string]any{"script": src}); code != 200 {
		t.Fatalf("deploy: %d %s", code, msg)
	}
	r.settle()
	grantRun := r.openRun("hook").ID

	type action struct {
		name      string
		page      string
		form      url.Values
		api       string
		body      any
		wantInMsg string // a piece of the refusal, so that the case tests what it says
	}
	agree := func(cases ...action) {
		t.Helper()
		for _, c := range cases {
			before := len(r.decisions("hook"))
			apiCode, apiMsg := r.apiSays(c.api, c.body)
			pageCode, pageMsg := r.pagePost(c.page, c.form)
			if apiCode < 400 || !strings.Contains(apiMsg, c.wantInMsg) {
				t.Errorf("%s: the API answered %d %q; the case expects a refusal saying %q", c.name, apiCode, apiMsg, c.wantInMsg)
			}
			if pageCode != http.StatusSeeOther || pageMsg != apiMsg {
				t.Errorf("%s: the page answered %d %q, the API %d %q", c.name, pageCode, pageMsg, apiCode, apiMsg)
			}
			if after := len(r.decisions("hook")); after != before {
				t.Errorf("%s: a refused action logged %d decisions", c.name, after-before)
			}
		}
	}
	run := func(id string) string { return "/api/v1/runs/" + id }
	card := func(id string) string { return "/w/hook/runs/" + id }
	agree(
		action{"approve a run blocked for a grant", card(grantRun) + "/approve", nil, run(grantRun) + "/approve", nil, "is not waiting for approval"},
		action{"an unknown resolution", card(grantRun) + "/resolve", url.Values{"action": {"explode"}}, run(grantRun) + "/resolve", map[string]string{"action": "explode"}, `action "explode"`},
		action{"run now beside a blocked run", "/w/hook/run-now", nil, "/api/v1/workflows/hook/run-now", nil, "has a blocked run"},
		action{"resume a workflow not paused", "/w/hook/resume", nil, "/api/v1/workflows/hook/resume", nil, "is not paused"},
		action{"pause a workflow that is not there", "/w/nope/pause", nil, "/api/v1/workflows/nope/pause", nil, `no workflow "nope"`},
		action{"revoke a grant the workflow does not have", "/w/hook/revoke", url.Values{"item": {"http.request GET " + sinkHost}}, "/api/v1/workflows/hook/revoke", map[string]any{"items": []string{"http.request GET " + sinkHost}}, "has no grant"},
		action{"grant what is no grant", "/w/hook/grant", url.Values{"item": {"http.request POST"}}, "/api/v1/workflows/hook/grant", map[string]any{"items": []string{"http.request POST"}}, "http.request POST"},
		action{"skip the pending events of no topic", "/w/hook/topics/nope/skip-pending", url.Values{"confirm": {"yes"}}, "/api/v1/workflows/hook/topics/nope/skip-pending", nil, "nope"},
		action{"reset the state of no handler", "/w/hook/handlers/nope/reset-state", url.Values{"confirm": {"yes"}}, "/api/v1/workflows/hook/handlers/nope/reset-state", nil, "nope"},
		action{"skip no item", "/items/nope/skip", nil, "/api/v1/items/nope/skip", nil, "nope"},
		action{"reprocess no item", "/items/nope/reprocess", nil, "/api/v1/items/nope/reprocess", nil, "nope"},
		action{"approve no repair", "/w/hook/repairs/nope/approve", nil, "/api/v1/workflows/hook/repairs/nope/approve", nil, "nope"},
		action{"reject no repair", "/w/hook/repairs/nope/reject", nil, "/api/v1/workflows/hook/repairs/nope/reject", nil, "nope"},
		// The page names no list of verbs: an unknown one is refused by
		// the API's one table, in its words (issue 41).
		action{"an unknown workflow action", "/w/hook/explode", nil, "/api/v1/workflows/hook/explode", nil, `no workflow action "explode" (pause, resume, run-now, grant, revoke)`},
		action{"an unknown item action", "/items/nope/explode", nil, "/api/v1/items/nope/explode", nil, `no item action "explode"`},
	)

	// The card's Grant, through the page: the run goes on to the write it
	// holds for a person's approval.
	if code, msg := r.pagePost("/w/hook/grant", nil); code != http.StatusSeeOther || !strings.Contains(msg, "granted hook: http.request POST "+sinkHost) {
		t.Fatalf("the page's Grant: %d %q", code, msg)
	}
	r.settle()
	held := r.openRun("hook").ID
	agree(action{"try again a write waiting for approval", card(held) + "/resolve", url.Values{"action": {"try-again"}}, run(held) + "/resolve", map[string]string{"action": "try-again"}, "is not offered"})

	// Someone approved at keep's terminal; the page's card, rendered
	// before, is stale: its buttons get the refusal the CLI gets.
	if code, msg := r.apiSays(run(held)+"/approve", nil); code != 200 {
		t.Fatalf("approve: %d %s", code, msg)
	}
	for _, what := range []string{"approve", "skip", "reprocess"} {
		body := map[string]string{"action": what}
		path := "/resolve"
		if what == "approve" {
			body, path = nil, "/approve"
		}
		agree(action{what + " a run whose decision waits to be carried out", card(held) + path, url.Values{"action": {what}}, run(held) + path, body, "already has a decision waiting"})
	}
	r.settle()
	agree(action{"approve a run already done", card(held) + "/approve", nil, run(held) + "/approve", nil, "is not blocked"})
	if n := len(r.sink.Writes()); n != 1 {
		t.Fatalf("the sink saw %d writes, want the one approved", n)
	}
	// Pause, twice: the page and the API refuse the second alike.
	if code, msg := r.pagePost("/w/hook/pause", nil); code != http.StatusSeeOther || msg == "" {
		t.Fatalf("the page's Pause: %d %q", code, msg)
	}
	agree(action{"pause a paused workflow", "/w/hook/pause", nil, "/api/v1/workflows/hook/pause", nil, "already paused"})
}

// What the page does, it does as the page: its decisions are logged as
// "web page" ("web page (signed in)" behind a token) and its message is
// the API's for the same action.
func TestThePageActsAsItselfThroughTheAPI(t *testing.T) {
	t.Parallel()
	for _, token := range []string{"", "s3cret-token"} {
		t.Run(fmt.Sprintf("token=%v", token != ""), func(t *testing.T) {
			t.Parallel()
			r := newRig(t, token)
			if code, msg := r.apiSays("/api/v1/workflows", map[string]any{"script": strings.ReplaceAll(script, "%SINK%", r.sink.URL), "grant": true}); code != 200 {
				t.Fatalf("deploy: %d %s", code, msg)
			}
			var cookies []*http.Cookie
			who := "web page"
			if token != "" {
				cookies, who = append(cookies, r.login(token)), "web page (signed in)"
			}
			code, pageMsg := r.pagePost("/w/hook/pause", nil, cookies...)
			if code != http.StatusSeeOther || pageMsg == "" {
				t.Fatalf("the page's Pause: %d %q", code, pageMsg)
			}
			if code, msg := r.apiSays("/api/v1/workflows/hook/resume", nil); code != 200 {
				t.Fatalf("resume: %d %s", code, msg)
			}
			if code, apiMsg := r.apiSays("/api/v1/workflows/hook/pause", nil); code != 200 || apiMsg != pageMsg {
				t.Fatalf("the API's pause said %d %q, the page's %q", code, apiMsg, pageMsg)
			}
			var by []string
			for _, d := range r.decisions("hook") {
				if d.Action == "pause" || d.Action == "resume" {
					by = append(by, d.Action+" by "+d.By)
				}
			}
			if got, want := strings.Join(by, ", "), "pause by "+who+", resume by operator, pause by operator"; got != want {
				t.Fatalf("the decision log says %q, want %q", got, want)
			}
		})
	}
}
