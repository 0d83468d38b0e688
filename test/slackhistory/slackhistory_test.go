// Package slackhistory runs keep against keep-fake slack rate limited as
// Slack limits conversations.history for apps outside its Marketplace (one
// call a window), with a backlog many pages long (issue 40 #6).
package slackhistory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/fake/slackfake"
	"github.com/keep-run/keep/internal/testbin"
)

var keepBin string

func TestMain(m *testing.M) { testbin.Main(m, &keepBin) }

const script = `export default Keep.workflow({
  name: "chat",
  topics: { "said": {} },
  producers: { p: { publishes: ["said"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    const msgs = await ctx.slack.history({ channel: "C7", after: state?.cursor ?? "0", limit: 999 })
    for (const m of msgs) {
      const inputId = ctx.registerInput({ source: "slack", type: "message", id: m.ts, title: m.text })
      await ctx.publish("said", { messageId: m.ts, inputId, payload: { text: m.text } })
    }
    return { cursor: msgs.lastCursor }
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["said"],
    async prepare(ctx) {
      const [e] = await ctx.peek("said"); if (!e) return { reservations: [] }
      return { reservations: [{ topic: "said", ids: [e.messageId] }], data: {} }
    },
  }) },
})`

func post(t *testing.T, url string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
}

// A backlog of 100 messages in pages of 15 at one call a second: every
// page after the first comes after a 429, so the producer's run fails
// transiently six times, more than its five retries. Each of those
// failures kept where the read stopped and got a page further, so keep
// does not count them: the run completes, every message is an input once,
// and each page was fetched once (the calls are the pages and the 429s).
// It restarted at page 1 on every 429, and blocked after its retries.
func TestABacklogLongerThanTheRetriesCompletesThroughKeep(t *testing.T) {
	fake := slackfake.New()
	srv := httptest.NewServer(fake.Handler())
	defer srv.Close()
	for i := 0; i < 100; i++ {
		post(t, srv.URL+"/_admin/messages", map[string]any{"channel": "C7", "text": fmt.Sprintf("m%d", i)})
	}
	post(t, srv.URL+"/_admin/rate_limit", map[string]any{"method": "conversations.history", "calls": 1, "windowSeconds": 1})

	dir := t.TempDir()
	cfg := fmt.Sprintf("[connectors.slack]\nendpoint = %q\n\n[policy]\ntransient_backoff = \"20ms\"\ntransient_backoff_max = \"20ms\"\n", srv.URL)
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(cfg), 0o644)
	os.WriteFile(filepath.Join(dir, "chat.js"), []byte(script), 0o644)
	keep := func(args ...string) (int, string) {
		cmd := exec.Command(keepBin, args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), out.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, out.String()
	}
	if code, out := keep("connect", "slack", "--token", slackfake.Token); code != 0 {
		t.Fatalf("keep connect slack: %d %s", code, out)
	}
	code, out := keep("run", "chat.js")
	if code != 0 {
		t.Fatalf("keep run exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, "not counted") {
		t.Fatalf("keep run does not say the rate-limited retries are not counted:\n%s", out)
	}
	_, jout := keep("inputs", "chat", "--all", "--json")
	var inputs []struct{ Title string }
	if err := json.Unmarshal([]byte(jout), &inputs); err != nil {
		t.Fatalf("keep inputs: %v %s", err, jout)
	}
	seen := map[string]int{}
	for _, in := range inputs {
		seen[in.Title]++
	}
	if len(inputs) != 100 || len(seen) != 100 || seen["m0"] != 1 || seen["m99"] != 1 {
		t.Fatalf("%d inputs (%d distinct) for 100 messages:\n%s", len(inputs), len(seen), out)
	}
	var calls, limited map[string]int
	for path, v := range map[string]*map[string]int{"/_admin/calls": &calls, "/_admin/ratelimited": &limited} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(v)
		resp.Body.Close()
	}
	// 7 pages of 15 for the 100 messages: each once.
	if n, l := calls["conversations.history"], limited["conversations.history"]; n != 7+l || l < 6 {
		t.Fatalf("%d calls of conversations.history, %d answered 429: want the 7 pages once each and the 429s", n, l)
	}
}
