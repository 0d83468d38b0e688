package webhooks

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/testbin"
)

// TestSignedDeliveriesFromGitHubStripeAndSlack: each sender's delivery,
// signed as that sender signs, is accepted once: sent twice, it is one
// input and one write at the sink, and the second answer says duplicate.
// A bad signature is refused (401), counted and recorded, and stores
// nothing; a missing secret says what to run; a body over the bound is 413.
func TestSignedDeliveriesFromGitHubStripeAndSlack(t *testing.T) {
	k := setup(t)
	k.serve()
	now := time.Now()

	k.expect(k.github("d-100", "refs/heads/main", secrets["GITHUB_SECRET"]), http.StatusOK, `"status":"accepted"`)
	k.expect(k.github("d-100", "refs/heads/main", secrets["GITHUB_SECRET"]), http.StatusOK, `"status":"duplicate"`)
	k.expect(k.stripe("evt_1", now, secrets["STRIPE_SECRET"]), http.StatusOK, `"status":"accepted"`)
	k.expect(k.stripe("evt_1", now, secrets["STRIPE_SECRET"]), http.StatusOK, `"status":"duplicate"`)
	k.expect(k.slack("Ev01", "deploy please", now, secrets["SLACK_SECRET"]), http.StatusOK, `"status":"accepted"`)
	k.expect(k.slack("Ev01", "deploy please", now, secrets["SLACK_SECRET"]), http.StatusOK, `"status":"duplicate"`)
	for _, topic := range []string{"gh.push", "stripe.event", "slack.event"} {
		testbin.WaitFor(t, "the consumer of "+topic+" to write", func() bool { return k.writes(topic) >= 1 }, k.logs)
	}
	if n := k.inputs(); n != 3 {
		t.Fatalf("3 deliveries, each sent twice: %d inputs, want 3", n)
	}
	// What the handler saw: lower-case headers, the query, the method, the JSON.
	var gh string
	for _, w := range k.sink.Writes() {
		if w.Path == "/write/gh.push" {
			gh = string(w.Body)
		}
	}
	for _, want := range []string{`"event":"push"`, `"via":"test"`, `"method":"POST"`, `"ref":"refs/heads/main"`} {
		if !strings.Contains(gh, want) {
			t.Fatalf("the GitHub event written: %s, want %s in it", gh, want)
		}
	}

	// Slack checks the URL with a signed challenge first: keep answers it
	// (a handshake: no input, no delivery recorded); unsigned, it is refused.
	challenge := []byte(`{"token": "legacy", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"}`)
	ts := fmt.Sprint(now.Unix())
	k.expect(k.post("/hooks/hooks/slack", challenge, map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": "v0=" + hexMAC(secrets["SLACK_SECRET"], "v0:", ts, ":", string(challenge))}),
		http.StatusOK, `{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}`)
	k.expect(k.post("/hooks/hooks/slack", challenge, map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": "v0=00"}), http.StatusUnauthorized, "signature does not match")

	// Refused: the wrong secret, a changed body, a stale timestamp.
	k.expect(k.github("d-101", "refs/heads/evil", "not-the-secret"), http.StatusUnauthorized, "the signature does not match the body")
	k.expect(k.stripe("evt_2", now.Add(-10*time.Minute), secrets["STRIPE_SECRET"]), http.StatusUnauthorized, "more than the tolerance of 5m0s")
	k.expect(k.stripe("evt_3", now, "whsec_other"), http.StatusUnauthorized, "no v1 signature matches the body")
	k.expect(k.slack("Ev02", "rm -rf", now, "wrong"), http.StatusUnauthorized, "the signature does not match the body")
	k.expect(k.post("/hooks/hooks/github", []byte(`{"ref":"x"}`), map[string]string{"X-GitHub-Delivery": "d-102"}), http.StatusUnauthorized, "no X-Hub-Signature-256 header")
	// The secret to verify it with is not set: held, unverified (202,
	// issue 40), the record says what to run (below), the sender is not
	// told the secret's name.
	k.expect(k.post("/hooks/hooks/ops", []byte(`{"id": "a1"}`), map[string]string{"X-Ops-Token": "anything"}), http.StatusAccepted, `"status":"held"`)
	// Over webhook_max_body (8 KiB here): 413, never read.
	big := []byte(`{"ref": "` + strings.Repeat("x", 9000) + `"}`)
	k.expect(k.post("/hooks/hooks/github", big, map[string]string{"X-GitHub-Delivery": "d-103"}), http.StatusRequestEntityTooLarge, "webhook_max_body")
	// The handler fails: 500, the sender retries; nothing of it is stored.
	failing := []byte(`{"ref": "x", "fail": true}`)
	k.expect(k.post("/hooks/hooks/github", failing, map[string]string{"X-GitHub-Delivery": "d-104", "X-Hub-Signature-256": "sha256=" + hexMAC(secrets["GITHUB_SECRET"], string(failing))}),
		http.StatusInternalServerError, "told to fail")
	// A webhook the active version does not declare yet is held until one
	// that does is deployed (issue 40); an unknown workflow is not found.
	k.expect(k.post("/hooks/hooks/gitlab", []byte(`{}`), nil), http.StatusAccepted, `"status":"held"`)
	k.expect(k.post("/hooks/nope/gitlab", []byte(`{}`), nil), http.StatusNotFound, "there is no webhook nope/gitlab here")

	if n := k.inputs(); n != 3 {
		t.Fatalf("after refused and failed deliveries: %d inputs, want still 3", n)
	}
	v := k.view()
	if !v.Served {
		t.Fatalf("keep webhooks says no webhooks are served: %+v", v)
	}
	want := map[string]map[string]int{
		"github": {"accepted": 1, "duplicate": 1, "refused": 3, "failed": 1},
		"stripe": {"accepted": 1, "duplicate": 1, "refused": 2, "failed": 0},
		"slack":  {"accepted": 1, "duplicate": 1, "refused": 2, "failed": 0},
		"ops":    {"accepted": 0, "duplicate": 0, "held": 1, "refused": 0, "failed": 0},
	}
	for name, c := range want {
		got := v.counts(name)
		for st, n := range c {
			if got[st] != n {
				t.Errorf("keep webhooks: %s %s %d, want %d (all: %v)", name, st, got[st], n, got)
			}
		}
	}
	for _, h := range v.Webhooks {
		if h.Name == "github" && (h.URL != k.hooks+"/hooks/hooks/github" || h.Secret != "GITHUB_SECRET" || h.Verify != "hmac") {
			t.Errorf("keep webhooks shows github as %+v", h)
		}
	}
	// The last deliveries, with their reasons, as a person reads them.
	out, err := k.keep("", "webhooks", "hooks", "--limit", "100")
	if err != nil {
		t.Fatalf("keep webhooks: %v\n%s", err, out)
	}
	for _, want := range []string{"POST " + k.hooks + "/hooks/hooks/github", "GITHUB_SECRET", "header X-GitHub-Delivery", "refused", "the signature does not match the body", "keep secret set OPS_TOKEN", "duplicate", "failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("keep webhooks does not show %q:\n%s", want, out)
		}
	}
	// The page shows the same, to a person at keep serve's address.
	resp, err := http.Get(k.api + "/w/hooks/webhooks")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"POST " + k.hooks + "/hooks/hooks/github", "GITHUB_SECRET", "STRIPE_SECRET", "refused", "the signature does not match the body", "keep secret set OPS_TOKEN"} {
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), want) {
			t.Errorf("the webhooks page (%d) does not show %q", resp.StatusCode, want)
		}
	}
	// Counted for an operator's Prometheus too.
	resp, err = http.Get(k.api + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`keep_webhook_deliveries_total{status="refused",webhook="github",workflow="hooks"} 3`, `keep_webhook_deliveries_total{status="accepted",webhook="stripe",workflow="hooks"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics does not show %s", want)
		}
	}
	// Each consumer wrote once: the duplicates changed nothing.
	for _, topic := range []string{"gh.push", "stripe.event", "slack.event"} {
		if n := k.writes(topic); n != 1 {
			t.Errorf("%s: %d writes at the sink, want 1", topic, n)
		}
	}
	// No secret appears in what keep shows.
	for name, value := range secrets {
		if strings.Contains(out, value) {
			t.Errorf("keep webhooks shows the value of %s", name)
		}
	}
}

// TestTheWebhooksListenerServesNoAPI: the webhooks' address answers no
// API route and no page, even to a request that carries the data
// directory's instance secret; a state change cannot be made through it.
func TestTheWebhooksListenerServesNoAPI(t *testing.T) {
	k := setup(t)
	k.serve()
	secret, err := os.ReadFile(k.path("data/api.secret"))
	if err != nil {
		t.Fatalf("the instance secret: %v", err)
	}
	auth := map[string]string{"Authorization": "Bearer " + strings.TrimSpace(string(secret))}
	for _, path := range []string{"/api/v1/workflows/hooks/topics/gh.push/events", "/api/v1/workflows/hooks/pause", "/api/v1/workflows", "/hooks/../api/v1/workflows/hooks/pause", "/"} {
		a := k.post(path, []byte(`{"id": "1", "title": "t"}`), auth)
		if a.err != nil || (a.code != http.StatusNotFound && a.code != http.StatusMethodNotAllowed) || strings.Contains(a.body, `"ok":true`) {
			t.Fatalf("POST %s on the webhooks address: %d %s (%v)", path, a.code, a.body, a.err)
		}
	}
	resp, err := http.Get(k.hooks + "/api/v1/workflows")
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /api/v1/workflows on the webhooks address: %v %v", resp, err)
	}
	resp.Body.Close()
	out, err := k.keep("", "status", "--json")
	if err != nil || strings.Contains(out, `"paused"`) || k.inputs() != 0 {
		t.Fatalf("after requests to the webhooks address: status %s (%v), %d inputs", out, err, k.inputs())
	}
}

// TestAKillBeforeTheCommitLosesNothing: keep serve dies inside a
// delivery's commit (the crash point inside-delivery, as kill -9 there):
// the sender gets no 2xx, its retry to the restarted keep is accepted, and
// the event exists once.
func TestAKillBeforeTheCommitLosesNothing(t *testing.T) {
	k := setup(t)
	k.serve("KEEP_TEST_CRASH_AFTER=inside-delivery")
	a := k.github("d-7", "refs/heads/main", secrets["GITHUB_SECRET"])
	if a.err == nil && a.code >= 200 && a.code < 300 {
		t.Fatalf("the sender got %d %s from a keep that died before its commit", a.code, a.body)
	}
	died := make(chan struct{})
	go func() { _ = k.cmd.Wait(); close(died) }()
	testbin.WaitFor(t, "keep serve to die at the crash point", func() bool {
		select {
		case <-died:
			return true
		default:
			return false
		}
	}, k.logs)
	if !strings.Contains(k.logs.String(), "test crash point inside-delivery reached") {
		t.Fatalf("keep serve did not stop at the crash point:\n%s", k.logs)
	}
	if n := k.inputs(); n != 0 {
		t.Fatalf("a delivery that was not committed left %d inputs", n)
	}
	k.serve()
	k.expect(k.github("d-7", "refs/heads/main", secrets["GITHUB_SECRET"]), http.StatusOK, `"status":"accepted"`)
	k.expect(k.github("d-7", "refs/heads/main", secrets["GITHUB_SECRET"]), http.StatusOK, `"status":"duplicate"`)
	testbin.WaitFor(t, "the consumer to write the push", func() bool { return k.writes("gh.push") >= 1 }, k.logs)
	if n, w := k.inputs(), k.writes("gh.push"); n != 1 || w != 1 {
		t.Fatalf("after the crash and two retries: %d inputs, %d writes; want 1 and 1", n, w)
	}
}

// TestScriptsDocWebhookExampleWorks: the webhook docs/scripts.md shows
// passes keep validate, deploys, and takes a push signed as GitHub signs.
func TestScriptsDocWebhookExampleWorks(t *testing.T) {
	doc, err := os.ReadFile("../../docs/scripts.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "<!-- docs example: webhook -->\n```js\n")
	if !ok {
		t.Fatal("docs/scripts.md has no example marked webhook")
	}
	code, _, _ := strings.Cut(after, "```\n")
	k := &keep{t: t, dir: t.TempDir()}
	k.write("github-pushes.js", code)
	k.write("keep.toml", "")
	for _, args := range [][]string{{"validate", k.path("github-pushes.js")}, {"deploy", "--grant", k.path("github-pushes.js")}} {
		if out, err := k.keep("", args...); err != nil {
			t.Fatalf("keep %s: %v\n%s", args[0], err, out)
		}
	}
	if out, err := k.keep("doc-secret", "secret", "set", "GITHUB_WEBHOOK_SECRET"); err != nil {
		t.Fatalf("keep secret set: %v\n%s", err, out)
	}
	k.serve()
	push := []byte(`{"ref": "refs/heads/main", "after": "c0ffee", "commits": [{"id": "c0ffee"}]}`)
	sign := func(event, delivery string, body []byte) map[string]string {
		return map[string]string{"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": "sha256=" + hexMAC("doc-secret", string(body))}
	}
	k.expect(k.post("/hooks/github-pushes/github", push, sign("push", "g-1", push)), http.StatusOK, `"inputs":1,"events":1`)
	ping := []byte(`{"zen": "Keep it logically awesome."}`)
	k.expect(k.post("/hooks/github-pushes/github", ping, sign("ping", "g-2", ping)), http.StatusOK, `"inputs":0,"events":0`)
}

// TestAKill9WhileTheHandlerRunsLosesNothing: keep serve is killed (SIGKILL)
// while a delivery's handler waits on a read, between receipt and commit:
// the sender gets no answer, nothing is stored, and the sender's retry to
// the restarted keep is accepted once.
func TestAKill9WhileTheHandlerRunsLosesNothing(t *testing.T) {
	k := setup(t)
	k.serve()
	body := []byte(`{"id": "job-1"}`)
	sent := make(chan answer, 1)
	go func() {
		sent <- k.post("/hooks/hooks/slow", body, map[string]string{"X-Token": secrets["GITHUB_SECRET"]})
	}()
	testbin.WaitFor(t, "the handler to be reading", func() bool {
		select {
		case <-k.reading:
			return true
		default:
			return false
		}
	}, k.logs)
	if err := k.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = k.cmd.Wait()
	if a := <-sent; a.err == nil {
		t.Fatalf("the sender got %d %s from a keep killed before its commit", a.code, a.body)
	}
	if n := k.inputs(); n != 0 {
		t.Fatalf("a delivery killed before its commit left %d inputs", n)
	}
	k.unblock()
	k.serve()
	k.expect(k.post("/hooks/hooks/slow", body, map[string]string{"X-Token": secrets["GITHUB_SECRET"]}), http.StatusOK, `"status":"accepted"`)
	k.expect(k.post("/hooks/hooks/slow", body, map[string]string{"X-Token": secrets["GITHUB_SECRET"]}), http.StatusOK, `"status":"duplicate"`)
	testbin.WaitFor(t, "the consumer to write the job", func() bool { return k.writes("slow.job") >= 1 }, k.logs)
	if n, w := k.inputs(), k.writes("slow.job"); n != 1 || w != 1 {
		t.Fatalf("after the kill and two retries: %d inputs, %d writes; want 1 and 1", n, w)
	}
}
