package cli

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testsink"
)

// A POST that gets "connection refused" is retried by the policy; keep run
// says so as each retry is scheduled instead of waiting in silence, and
// the run, its card and its list show what the run is about (ui.title) and
// where its retries stand (issue 12).
func TestKeepRunSaysEachRetryAndWhatARunIsAbout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A port nothing listens on: connection refused, before anything is sent.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String() + "/orders"
	l.Close()
	script := `export default Keep.workflow({
  name: "post-ticks",
  topics: { "t": {} },
  producers: { p: { publishes: ["t"], schedule: { interval: "1h" }, handler: async (ctx, s) => {
    const id = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "Tick 1" });
    await ctx.publish("t", { inputId: id, payload: { n: 1 } });
    return s; } } },
  consumers: { c: Keep.consumer({ subscribe: ["t"],
    async prepare(ctx) { const [e] = await ctx.peek("t"); if (!e) return { reservations: [] };
      return { reservations: [{ topic: "t", ids: [e.messageId] }], data: e.payload, ui: { title: "Send tick " + e.payload.n } }; },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "` + url + `", json: p.data }); },
  }) },
});`
	cfg := "[policy]\ntransient_backoff = \"100ms\"\ntransient_backoff_max = \"200ms\"\ntransient_retries = 2\n"
	cfg += "[connectors.http]\nallow = [\"" + l.Addr().String() + "\"]\n" // a local service, declared
	for name, body := range map[string]string{"wf.js": script, "keep.toml": cfg} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	r := keep(t, "run", "--data", data, "--config", filepath.Join(dir, "keep.toml"), "--json", filepath.Join(dir, "wf.js"))
	if r.code != ExitBlocked {
		t.Fatalf("exit %d, want %d (blocked)\n%s\n%s", r.code, ExitBlocked, r.out, r.err)
	}
	for _, want := range []string{"connection refused; retry 1 of 2 in 100ms", "connection refused; retry 2 of 2 in 200ms", "keep retried 2 times and gave up; try again or skip"} {
		if !strings.Contains(r.err, want) {
			t.Errorf("keep run did not say %q while it waited:\n%s", want, r.err)
		}
	}
	var sum struct {
		Blocked []struct {
			RunID, Title, Reason string
		}
	}
	if err := json.Unmarshal([]byte(r.out), &sum); err != nil || len(sum.Blocked) != 1 {
		t.Fatalf("--json is not one document with the blocked card: %v\n%s", err, r.out)
	}
	card := sum.Blocked[0]
	if card.Title != "Send tick 1" || strings.Contains(card.Reason, "it will be sent again") {
		t.Fatalf("card %+v", card)
	}
	r = keep(t, "status", "--data", data, "--json")
	var ss []struct {
		Status string
		Card   *struct{ RunID, Title string }
	}
	if err := json.Unmarshal([]byte(r.out), &ss); err != nil || len(ss) != 1 || ss[0].Card == nil || ss[0].Card.RunID != card.RunID || ss[0].Card.Title != "Send tick 1" {
		t.Fatalf("status --json lacks the blocked card: %v\n%s", err, r.out)
	}
	r = keep(t, "show", "run", "--data", data, card.RunID)
	for _, want := range []string{"title:    Send tick 1", "(automatic retry 2)", "about:   Send tick 1"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("show run lacks %q:\n%s", want, r.out)
		}
	}
	r = keep(t, "runs", "--data", data, "post-ticks")
	if !strings.Contains(r.out, "ABOUT") || strings.Count(r.out, "Send tick 1") < 3 {
		t.Errorf("runs do not show what each is about:\n%s", r.out)
	}
}

// A run waiting for approval says so (no empty error class), and keep
// approve without keep serve sends the write at once, exactly once (issue 12 #6, #9).
func TestApproveWithoutServeSendsAtOnce(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	src := `export default Keep.workflow({ name: "needs-ok", requireApproval: true, topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const id = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" });
    await ctx.publish("job", { messageId: "a", inputId: id, payload: {} }); } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: {} }; },
    async mutate(ctx) { await ctx.http.request({ method: "POST", url: "` + sink.URL + `/write/a", json: { a: 1 } }); },
  }) } });`
	if err := os.WriteFile(filepath.Join(dir, "wf.js"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := keep(t, "run", "--data", data, "--config", sinkConfig(t, dir, sink), filepath.Join(dir, "wf.js"))
	if r.code != ExitBlocked || !strings.Contains(r.out, "keep approve ") {
		t.Fatalf("run: %d\n%s\n%s", r.code, r.out, r.err)
	}
	var st []struct{ BlockedRunID string }
	json.Unmarshal([]byte(keep(t, "status", "--data", data, "--json").out), &st)
	runID := st[0].BlockedRunID
	r = keep(t, "show", "run", "--data", data, runID)
	if !strings.Contains(r.out, "waiting:  waiting for approval: POST") || strings.Contains(r.out, "error:    : ") {
		t.Fatalf("show run of an approval wait:\n%s", r.out)
	}
	r = keep(t, "approve", "--data", data, "--config", filepath.Join(dir, "keep.toml"), runID)
	if r.code != 0 || !strings.Contains(r.out, "approved") || !strings.Contains(r.out, "carried out; needs-ok is idle") {
		t.Fatalf("approve: %d\n%s\n%s", r.code, r.out, r.err)
	}
	if n := len(sink.Writes()); n != 1 {
		t.Fatalf("%d writes at the sink after approve, want 1", n)
	}
}
