// Package slack runs keep and keep-fake slack as people would: the bot's
// token stored by keep connect slack, a workflow that answers each new
// message in its thread, under kill -9 and the fake's faults. What it
// checks is what a person sees in the channel: one answer per message.
package slack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testbin"
)

var keepBin string

func TestMain(m *testing.M) { testbin.Main(m, &keepBin) }

const script = `export default Keep.workflow({
  name: "answers",
  topics: { "asked": {} },
  producers: { poll: { publishes: ["asked"], schedule: { interval: "1m" }, handler: async (ctx, state) => {
    const msgs = await ctx.slack.history({ channel: "C1", after: state?.cursor })
    for (const m of msgs) {
      const inputId = ctx.registerInput({ source: "slack", type: "message", id: m.ts, title: "Question: " + m.text })
      await ctx.publish("asked", { messageId: m.ts, inputId, payload: { ts: m.ts, text: m.text } })
    }
    return { cursor: msgs.lastCursor }
  } } },
  consumers: { answer: Keep.consumer({ subscribe: ["asked"],
    async prepare(ctx) { const [e] = await ctx.peek("asked"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "asked", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.slack.postMessage({ channel: "C1", threadTs: p.data.ts, text: "On it: " + p.data.text }) },
  }) },
})`

func fake(t *testing.T) string {
	return testbin.StartFake(t, keepBin, "slack")
}

func keep(t *testing.T, dir string, env []string, args ...string) (int, string) {
	cmd := exec.Command(keepBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	}
	return 0, out.String()
}

func post(t *testing.T, url string, body any) {
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// answers counts the bot's answers per question in the channel.
func answers(t *testing.T, base string) map[string]int {
	resp, err := http.Get(base + "/_admin/channels/C1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Messages []map[string]any }
	json.NewDecoder(resp.Body).Decode(&out)
	got := map[string]int{}
	for _, m := range out.Messages {
		if m["user"] == "UKEEPBOT" {
			got[fmt.Sprint(m["thread_ts"])]++
		}
	}
	return got
}

func TestEachQuestionAnsweredOnce(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault string
		crash string
	}{
		{"drop after apply", "drop_after_apply", ""},
		{"500 after apply", "500_after_apply", ""},
		{"rate limited", "429", ""},
		{"killed after the call", "", "after-call"},
		{"killed after in-flight", "", "after-inflight"},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := fake(t)
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(fmt.Sprintf("[connectors.slack]\nendpoint = %q\n\n[policy]\ntool_timeout = \"2s\"\ntransient_backoff = \"20ms\"\nreconcile_backoff = \"20ms\"\n", base)), 0o644)
			os.WriteFile(filepath.Join(dir, "workflow.js"), []byte(script), 0o644)
			if code, out := keep(t, dir, nil, "connect", "slack", "--token", "xoxb-keep-fake"); code != 0 || !strings.Contains(out, "connected slack as keep@keep-fake") || strings.Contains(out, "xoxb") {
				t.Fatalf("keep connect slack: %d %s", code, out)
			}
			for _, q := range []string{"deploy?", "docs?"} {
				post(t, base+"/_admin/messages", map[string]string{"channel": "C1", "text": q})
			}
			if c.fault != "" {
				post(t, base+"/_admin/faults", map[string]any{"method": "slack.postMessage", "fault": c.fault})
			}
			if c.crash != "" {
				if code, out := keep(t, dir, []string{"KEEP_TEST_CRASH_AFTER=" + c.crash}, "run", "workflow.js"); code != 137 {
					t.Fatalf("keep run with a crash point: %d %s", code, out)
				}
			}
			if code, out := keep(t, dir, nil, "run", "workflow.js"); code != 0 {
				t.Fatalf("keep run: %d\n%s", code, out)
			}
			got := answers(t, base)
			if len(got) != 2 {
				t.Fatalf("answers per question: %v (want 2 questions answered)", got)
			}
			for q, n := range got {
				if n != 1 {
					t.Fatalf("question %s answered %d times", q, n)
				}
			}
		})
	}
}

// A busy channel named by name (#support), read in Slack's short pages (15
// a page), is answered completely and once, an answer lost on the way too:
// every question gets one reply in its thread.
func TestAPaginatedChannelByNameIsAnsweredCompletelyAndOnce(t *testing.T) {
	base := fake(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(fmt.Sprintf("[connectors.slack]\nendpoint = %q\n\n[policy]\ntool_timeout = \"2s\"\ntransient_backoff = \"20ms\"\nreconcile_backoff = \"20ms\"\n", base)), 0o644)
	os.WriteFile(filepath.Join(dir, "workflow.js"), []byte(strings.ReplaceAll(script, `channel: "C1"`, `channel: "#support"`)), 0o644)
	if code, out := keep(t, dir, nil, "connect", "slack", "--token", "xoxb-keep-fake"); code != 0 {
		t.Fatalf("keep connect slack: %d %s", code, out)
	}
	for i := 0; i < 40; i++ {
		post(t, base+"/_admin/messages", map[string]string{"channel": "#support", "text": fmt.Sprintf("question %d?", i)})
	}
	post(t, base+"/_admin/faults", map[string]any{"method": "slack.postMessage", "fault": "drop_after_apply", "count": 3})
	if code, out := keep(t, dir, nil, "run", "workflow.js"); code != 0 {
		t.Fatalf("keep run: %d\n%s", code, out)
	}
	resp, err := http.Get(base + "/_admin/channels/support")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Messages []map[string]any }
	json.NewDecoder(resp.Body).Decode(&out)
	got := map[string]int{}
	for _, m := range out.Messages {
		if m["user"] == "UKEEPBOT" {
			got[fmt.Sprint(m["thread_ts"])]++
		}
	}
	if len(got) != 40 {
		t.Fatalf("%d of 40 questions answered", len(got))
	}
	for q, n := range got {
		if n != 1 {
			t.Fatalf("question %s answered %d times", q, n)
		}
	}
}
