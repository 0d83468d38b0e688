package google

import (
	"encoding/json"
	"github.com/keep-run/keep/internal/testbin"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// writeScript publishes two jobs; the consumer does one Google write per job.
const writeScript = `export default Keep.workflow({
  name: "gw",
  topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    for (const id of ["a", "b"]) {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id, title: "Job " + id })
      await ctx.publish("job", { messageId: id, inputId, payload: { id } })
    }
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) {
      const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload }
    },
    async mutate(ctx, p) { %CALL% },
  }) },
})`

// writes is what each Google write looks like in a script, and where the
// test counts it at the fake.
var googleWrites = []struct {
	method string // the fake's name for it
	call   string
}{
	{"sheets.appendRow", `await ctx.sheets.appendRow({ spreadsheetId: "jobs", values: [p.data.id, "done"] })`},
	{"gmail.send", `await ctx.gmail.send({ to: "bob@example.com", subject: "Job " + p.data.id, text: "done" })`},
	{"calendar.createEvent", `await ctx.calendar.createEvent({ summary: "Job " + p.data.id, start: "2026-12-01T10:00:00Z", end: "2026-12-01T11:00:00Z" })`},
}

type output struct {
	Status string `json:"status"`
	Tool   string `json:"tool"`
}

func outputs(t *testing.T, dir string) []output {
	t.Helper()
	r := keep(t, dir, nil, "outputs", "gw", "--json")
	var out []output
	if err := json.Unmarshal([]byte(r.out), &out); err != nil {
		t.Fatalf("keep outputs: %v %s %s", err, r.out, r.err)
	}
	return out
}

// checkOnce asserts what a user must see: two writes at Google (one per
// job, none twice, none lost) and both outputs applied.
func checkOnce(t *testing.T, base, dir, method string) {
	t.Helper()
	if n := writes(t, base)[method]; n != 2 {
		t.Fatalf("%s applied %d times at Google for 2 jobs", method, n)
	}
	outs := outputs(t, dir)
	if len(outs) != 2 || outs[0].Status != "applied" || outs[1].Status != "applied" {
		t.Fatalf("outputs %+v", outs)
	}
}

func newProject(t *testing.T, call string) (base, dir string) {
	base = fake(t)
	dir = project(t, base, strings.ReplaceAll(writeScript, "%CALL%", call))
	if r := keep(t, dir, nil, "deploy", "--grant", "workflow.js"); r.code != 0 {
		t.Fatalf("deploy: %s", r.err)
	}
	connect(t, dir)
	return base, dir
}

// TestKillAfterTheRequestWasWritten kills keep (the process exits as if
// killed, at the durable step) after Google applied the write and before
// keep recorded it applied, and before the call at all; the next keep run
// finishes with each write applied exactly once.
func TestKillAfterTheRequestWasWritten(t *testing.T) {
	for _, w := range googleWrites {
		for _, point := range []string{"after-call", "after-inflight"} {
			t.Run(w.method+"/"+point, func(t *testing.T) {
				base, dir := newProject(t, w.call)
				r := keep(t, dir, []string{"KEEP_TEST_CRASH_AFTER=" + point}, "run", "workflow.js")
				if r.code != 137 {
					t.Fatalf("keep run with a crash point exited %d: %s", r.code, r.err)
				}
				want := 0
				if point == "after-call" {
					want = 1
				}
				if n := writes(t, base)[w.method]; n != want {
					t.Fatalf("at the crash Google had %d writes, want %d", n, want)
				}
				if r := keep(t, dir, nil, "run", "workflow.js"); r.code != 0 {
					t.Fatalf("keep run after the crash exited %d:\n%s%s", r.code, r.out, r.err)
				}
				checkOnce(t, base, dir, w.method)
			})
		}
	}
}

// TestEveryFaultOfTheFake arms each fault on the first write; keep ends
// with each write applied once, whatever Google answered.
func TestEveryFaultOfTheFake(t *testing.T) {
	faults := []string{"timeout_after_apply", "drop_after_apply", "500_after_apply", "timeout", "429", "500", "503", "401"}
	for _, w := range googleWrites {
		for _, f := range faults {
			t.Run(w.method+"/"+f, func(t *testing.T) {
				base, dir := newProject(t, w.call)
				admin(t, base, "POST", "/_admin/faults", map[string]any{"method": w.method, "fault": f, "count": 1}, nil)
				if r := keep(t, dir, nil, "run", "workflow.js"); r.code != 0 {
					t.Fatalf("keep run exited %d:\n%s%s", r.code, r.out, r.err)
				}
				checkOnce(t, base, dir, w.method)
				var armed struct{ Faults []any }
				admin(t, base, "GET", "/_admin/faults", nil, &armed)
				if len(armed.Faults) != 0 {
					t.Fatalf("the fault never fired: %v", armed.Faults)
				}
			})
		}
	}
}

// TestALookalikeRowIsNotKeeps: a person typed the very row keep is about
// to append; the append's answer is lost before it was applied (500), and
// reconcile must not take the person's row for keep's.
func TestALookalikeRowIsNotKeeps(t *testing.T) {
	base, dir := newProject(t, googleWrites[0].call)
	for _, id := range []string{"a", "b"} {
		admin(t, base, "POST", "/_admin/sheets/jobs/rows", map[string]any{"values": []string{id, "done"}}, nil)
	}
	admin(t, base, "POST", "/_admin/faults", map[string]any{"method": "sheets.appendRow", "fault": "500", "count": 2}, nil)
	if r := keep(t, dir, nil, "run", "workflow.js"); r.code != 0 {
		t.Fatalf("keep run exited %d:\n%s%s", r.code, r.out, r.err)
	}
	rows, notes := sheetRows(t, base, "jobs")
	marked := 0
	for _, n := range notes {
		if strings.HasPrefix(n, "keep:") {
			marked++
		}
	}
	if len(rows) != 4 || marked != 2 {
		t.Fatalf("rows %v notes %v: want the person's two rows and keep's two", rows, notes)
	}
	checkOnce(t, base, dir, "sheets.appendRow")
}

// TestARevokedGrantWaitsForReconnect: Google refuses keep's access; the run
// waits for a person with a card saying to reconnect, and after keep
// connect google and a retry the write happens once.
func TestARevokedGrantWaitsForReconnect(t *testing.T) {
	base, dir := newProject(t, googleWrites[0].call)
	admin(t, base, "POST", "/_admin/faults", map[string]any{"method": "sheets.appendRow", "fault": "revoke", "count": 1}, nil)
	r := keep(t, dir, nil, "run", "workflow.js")
	if r.code != 3 {
		t.Fatalf("keep run exited %d (want 3, a run needs a person):\n%s%s", r.code, r.out, r.err)
	}
	st := keep(t, dir, nil, "status", "gw", "--json")
	var statuses []struct {
		Card *struct {
			RunID     string   `json:"runId"`
			Reason    string   `json:"reason"`
			Reconnect string   `json:"reconnect"`
			Actions   []string `json:"actions"`
		} `json:"card"`
	}
	if err := json.Unmarshal([]byte(st.out), &statuses); err != nil || len(statuses) != 1 || statuses[0].Card == nil {
		t.Fatalf("keep status: %v %s", err, st.out)
	}
	status := statuses[0]
	if status.Card.Reconnect != "google" || !strings.Contains(status.Card.Reason, "keep connect google") {
		t.Fatalf("the card: %+v", status.Card)
	}
	r = keep(t, dir, nil, "connections")
	if !strings.Contains(r.out, "reconnect") {
		t.Fatalf("keep connections does not say the account needs reconnecting:\n%s", r.out)
	}
	connect(t, dir)
	if r := keep(t, dir, nil, "resolve", status.Card.RunID, "--try-again"); r.code != 0 {
		t.Fatalf("keep resolve retry: %d %s%s", r.code, r.out, r.err)
	}
	if r := keep(t, dir, nil, "run", "workflow.js"); r.code != 0 {
		t.Fatalf("keep run after reconnecting: %d\n%s%s", r.code, r.out, r.err)
	}
	checkOnce(t, base, dir, "sheets.appendRow")
}

// TestThePageReconnectsGoogle: keep serve shows the blocked card with a
// Reconnect Google button; pressing it runs the OAuth flow through keep
// serve's own address, and Try again on the card finishes the write once.
func TestThePageReconnectsGoogle(t *testing.T) {
	base, dir := newProject(t, googleWrites[0].call)
	admin(t, base, "POST", "/_admin/faults", map[string]any{"method": "sheets.appendRow", "fault": "revoke", "count": 1}, nil)
	addr := testbin.FreePort(t)
	serve := exec.Command(keepBin, "serve", "--addr", addr) // keep.toml of the folder: the fake's endpoint
	serve.Dir = dir
	logs := &strings.Builder{}
	serve.Stdout, serve.Stderr = logs, logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { serve.Process.Kill(); serve.Wait() })
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	page := func(path string) string {
		resp, err := browser.Get("http://" + addr + path)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var body string
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(body, "Reconnect Google") {
		if time.Now().After(deadline) {
			t.Fatalf("the card never offered Reconnect Google:\n%s\nkeep serve said:\n%s", body, logs)
		}
		time.Sleep(50 * time.Millisecond)
		body = page("/w/gw")
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	runID := regexp.MustCompile(`/w/gw/runs/([^/]+)/resolve`).FindStringSubmatch(body)
	if csrf == nil || runID == nil {
		t.Fatalf("no form on the card:\n%s", body)
	}
	resp, err := browser.PostForm("http://"+addr+"/connect/google", url.Values{"csrf": {csrf[1]}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "Connected Google as me@example.com") || !strings.HasSuffix(resp.Request.URL.Path, "/connections") {
		t.Fatalf("after Reconnect Google the browser is at %s:\n%s", resp.Request.URL, b)
	}
	if strings.Contains(string(b), ">reconnect<") {
		t.Fatalf("the accounts page still says reconnect:\n%s", b)
	}
	resp, err = browser.PostForm("http://"+addr+"/w/gw/runs/"+runID[1]+"/resolve", url.Values{"csrf": {csrf[1]}, "action": {"try-again"}, "do": {"try-again"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Wait for what the person waits for: both outputs applied (the write
	// at Google comes a moment before keep records it).
	applied := func() bool {
		outs := outputs(t, dir)
		return len(outs) == 2 && outs[0].Status == "applied" && outs[1].Status == "applied"
	}
	for !applied() {
		if time.Now().After(deadline) {
			t.Fatalf("the writes never finished after Try again; outputs %+v; keep serve said:\n%s", outputs(t, dir), logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	serve.Process.Kill()
	serve.Wait()
	checkOnce(t, base, dir, "sheets.appendRow")
}
