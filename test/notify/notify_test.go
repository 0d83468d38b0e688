// Package notify runs keep serve with [notify] and checks what a person
// gets: one notice per blocked run on each channel (a webhook, an email),
// none again after keep is killed and restarted, and a failing webhook
// that never holds a workflow up.
package notify

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/fake/slackfake"
	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testmail"
	_ "modernc.org/sqlite"
)

var keepBin string

func TestMain(m *testing.M) { testbin.Main(m, &keepBin) }

// flow publishes one job whose write goes to url: a 403 there blocks the
// run for a person (paused:approval); a 200 completes it.
func flow(name, url string) string {
	return `export default Keep.workflow({
  name: "` + name + `",
  topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "` + name + ` job" })
    await ctx.publish("job", { messageId: "1", inputId, payload: {} })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: {} } },
    async mutate(ctx) { await ctx.http.request({ method: "POST", url: "` + url + `" }) },
  }) },
})`
}

type hook struct {
	mu        sync.Mutex
	failFirst int
	got       []map[string]any
	refused   int
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failFirst > 0 {
		h.failFirst--
		h.refused++
		http.Error(w, "down", http.StatusBadGateway)
		return
	}
	var n map[string]any
	json.Unmarshal(b, &n)
	h.got = append(h.got, n)
}

// runsNotified counts the blocked notices per run id.
func (h *hook) runsNotified() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, n := range h.got {
		if n["kind"] != "blocked" {
			continue
		}
		for _, c := range n["cards"].([]any) {
			out[c.(map[string]any)["workflow"].(string)+" "+c.(map[string]any)["runId"].(string)]++
		}
	}
	return out
}

// slackNotices counts the block notices the bot posted into C9.
func slackNotices(t *testing.T, base string) int {
	resp, err := http.Get(base + "/_admin/channels/C9")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Messages []map[string]any }
	json.NewDecoder(resp.Body).Decode(&out)
	n := 0
	for _, m := range out.Messages {
		if strings.Contains(fmt.Sprint(m["text"]), "needs you") {
			n++
		}
	}
	return n
}

// recorded counts the notices keep's store says went out.
func recorded(t *testing.T, db string) int {
	d, err := sql.Open("sqlite", "file:"+db+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var n int
	d.QueryRow(`SELECT count(*) FROM notices`).Scan(&n)
	return n
}

func TestOneNoticePerBlockEvenAfterAKill(t *testing.T) {
	service := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/forbidden") {
			http.Error(w, "no", http.StatusForbidden)
		}
	}))
	defer service.Close()
	h := &hook{failFirst: 2} // the webhook is down at first
	hooks := httptest.NewServer(h)
	defer hooks.Close()
	mail := testmail.Start(t, true)
	slackSrv := httptest.NewServer(slackfake.New().Handler())
	defer slackSrv.Close()

	dir := t.TempDir()
	// The service the workflows write to and the webhook are on 127.0.0.1: declared.
	cfg := mail.Config() + fmt.Sprintf("\n[connectors.http]\nallow = [%q, %q]\n", service.Listener.Addr().String(), hooks.Listener.Addr().String()) + fmt.Sprintf("\n[connectors.slack]\nendpoint = %q\n\n[notify]\nwebhook = %q\nemail = \"owner@example.com\"\nslack = \"C9\"\ndigest = \"00:00\"\n", slackSrv.URL, hooks.URL)
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(cfg), 0o644)
	connect := exec.Command(keepBin, "connect", "slack", "--token", "xoxb-notices", "--data", filepath.Join(dir, "data"))
	connect.Dir = dir
	if out, err := connect.CombinedOutput(); err != nil {
		t.Fatalf("keep connect slack: %v %s", err, out)
	}
	for name, url := range map[string]string{"stuck": service.URL + "/forbidden/1", "fine": service.URL + "/ok"} {
		os.WriteFile(filepath.Join(dir, name+".js"), []byte(flow(name, url)), 0o644)
		if out, err := exec.Command(keepBin, "deploy", "--grant", "--data", filepath.Join(dir, "data"), filepath.Join(dir, name+".js")).CombinedOutput(); err != nil {
			t.Fatalf("deploy: %v %s", err, out)
		}
	}
	addr := testbin.FreePort(t)
	serve := func() (*exec.Cmd, *strings.Builder) {
		cmd := exec.Command(keepBin, "serve", "--data", filepath.Join(dir, "data"), "--addr", addr)
		cmd.Dir = dir
		logs := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, logs
	}
	cmd, logs := serve()
	status := func(wf string) string {
		out, _ := exec.Command(keepBin, "status", wf, "--data", filepath.Join(dir, "data"), "--json").Output()
		return string(out)
	}
	// The webhook failing does not hold anything up: the other workflow finishes.
	testbin.WaitFor(t, "the fine workflow to be idle", func() bool { return strings.Contains(status("fine"), `"status": "idle"`) }, logs)
	testbin.WaitFor(t, "the notice of the blocked run", func() bool { return len(h.runsNotified()) == 1 }, logs)
	h.mu.Lock()
	n := h.got[0]
	refused := h.refused
	h.mu.Unlock()
	card := n["cards"].([]any)[0].(map[string]any)
	if refused != 2 || !strings.Contains(n["text"].(string), "403") || !strings.Contains(n["link"].(string), "http://"+addr+"/runs/"+card["runId"].(string)) ||
		!strings.Contains(n["text"].(string), "keep resolve "+card["runId"].(string)) {
		t.Fatalf("after %d refusals the webhook got %v", refused, n)
	}
	needsYou := func() (n int) {
		for _, s := range mail.Subjects() {
			if strings.Contains(s, "needs you") {
				n++
			}
		}
		return n
	}
	testbin.WaitFor(t, "the email notice", func() bool { return needsYou() == 1 }, logs)
	if s := strings.Join(mail.Subjects(), "|"); !strings.Contains(s, "keep: stuck needs you: http.request → POST") {
		t.Fatalf("the emails' subjects: %q", s)
	}

	// kill -9 and start again: what keep recorded as told is not told
	// again. (A notice sent and not yet recorded when keep dies is sent
	// again — a person told twice beats one never told — so the kill waits
	// for the records: the block's and the digest's, on both channels.)
	testbin.WaitFor(t, "the notices to be recorded", func() bool { return recorded(t, filepath.Join(dir, "data", "keep.db")) >= 6 }, logs)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	os.WriteFile(filepath.Join(dir, "later.js"), []byte(flow("later", service.URL+"/forbidden/2")), 0o644)
	if out, err := exec.Command(keepBin, "deploy", "--grant", "--data", filepath.Join(dir, "data"), filepath.Join(dir, "later.js")).CombinedOutput(); err != nil {
		t.Fatalf("deploy: %v %s", err, out)
	}
	_, logs = serve()
	testbin.WaitFor(t, "the notice of the second blocked run", func() bool { return len(h.runsNotified()) == 2 }, logs)
	for run, times := range h.runsNotified() {
		if times != 1 {
			t.Fatalf("%s was notified %d times", run, times)
		}
	}
	// The Slack channel got each block's notice once too.
	testbin.WaitFor(t, "the second Slack notice", func() bool { return slackNotices(t, slackSrv.URL) == 2 }, logs)
	// The daily digest (due since 00:00 UTC) went out once, restart or not
	// — unless this test ran across midnight, when a second day's is due.
	if now := time.Now().UTC(); now.Hour() != 0 || now.Minute() > 2 {
		h.mu.Lock()
		digests := 0
		for _, n := range h.got {
			if n["kind"] == "digest" {
				digests++
				if !strings.Contains(n["text"].(string), "still wait") || len(n["cards"].([]any)) == 0 {
					t.Errorf("digest %v", n)
				}
			}
		}
		h.mu.Unlock()
		if digests != 1 {
			t.Fatalf("%d digests", digests)
		}
	}
	testbin.WaitFor(t, "the second email", func() bool { return needsYou() == 2 }, logs)
}
