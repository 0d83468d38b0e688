// Package decide runs the keep binary against a real sink to check what
// issue 24 promises: a person's decision is never lost or ignored, and a
// write a script asked for is never dropped without a word.
package decide

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testsink"
)

var keepBin string

func TestMain(m *testing.M) { testbin.Main(m, &keepBin) }

// keep runs the binary and returns its exit code and output.
func keep(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return keepIn(t, "", args...)
}

// consumerScript is a workflow whose consumer writes with mutate's body.
func consumerScript(sink *testsink.Sink, mutate string) string {
	return strings.ReplaceAll(`export default Keep.workflow({ name: "decide", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: { id: "a" } }) } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { `+mutate+` } }) } })`, "%SINK%", sink.URL)
}

// blockedRun is what `keep status --json` says of the one workflow.
func blockedRun(t *testing.T, data string) string {
	t.Helper()
	_, out := keep(t, "status", "--data", data, "--json")
	var st []struct {
		Blocked      bool
		BlockedRunID string
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 || !st[0].Blocked {
		t.Fatalf("status: %v %s", err, out)
	}
	return st[0].BlockedRunID
}

// TestASecondWriteInMutateFailsTheRun: `await a(); await b();` in mutate
// once committed with exit 0 and b never sent, without a word (issue 24
// #2). Now the run fails as a logic error naming both calls before either
// is sent, and the card says to fix the script.
func TestASecondWriteInMutateFailsTheRun(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	src := consumerScript(sink, `await ctx.http.request({ method: "POST", url: "%SINK%/write/a", json: {} })
      await ctx.http.request({ method: "POST", url: "%SINK%/write/b", json: {} })`)
	if err := os.WriteFile(filepath.Join(dir, "plain.js"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// Where the reading sees both writes, keep validate (and so keep run
	// and deploy) refuses the script, naming both calls.
	code, out := keep(t, "validate", filepath.Join(dir, "plain.js"))
	if code != 2 || !strings.Contains(out, "consumers.c.mutate can write twice: ctx.http.request") || !strings.Contains(out, "/write/b") {
		t.Fatalf("keep validate: exit %d\n%s", code, out)
	}
	// Where it cannot (the second write called through an array), the
	// run fails at the second call.
	src = consumerScript(sink, `const later = [async () => ctx.http.request({ method: "POST", url: "%SINK%/write/b", json: {} })]
      await ctx.http.request({ method: "POST", url: "%SINK%/write/a", json: {} })
      await later[0]()`)
	if err := os.WriteFile(filepath.Join(dir, "wf.js"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out = keep(t, "run", "--data", data, filepath.Join(dir, "wf.js"))
	if code != 3 || !strings.Contains(out, "ctx.http.request after ctx.http.request: a second mutation in mutate") {
		t.Fatalf("keep run: exit %d\n%s", code, out)
	}
	if n := sink.Requests(); n != 0 {
		t.Fatalf("requests at the sink: %d (want 0: neither write is sent)", n)
	}
	run := blockedRun(t, data)
	_, show := keep(t, "show", "run", "--data", data, run)
	if !strings.Contains(show, "failed:logic") || !strings.Contains(show, "second mutation") {
		t.Fatalf("show run:\n%s", show)
	}
}

// run is one run of `keep runs --json`.
type run struct {
	ID, Status string
}

func runs(t *testing.T, data string) []run {
	t.Helper()
	_, out := keep(t, "runs", "--data", data, "--json", "decide")
	var rs []run
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("keep runs: %v %s", err, out)
	}
	return rs
}

// TestADecisionWhileServeChecksAWriteIsHonoured is issue 24 #1 as people
// met it: keep serve re-checks a write in the background (its probe is held
// at the sink while the person decides) and the person chooses Skip, or It
// didn't happen, with the CLI. A Skip that stands never sends the write;
// when the probe then proves the write applied, that proof wins over "it
// didn't happen" and the write is not sent again. The decision log keeps
// the person's decision and what became of it.
func TestADecisionWhileServeChecksAWriteIsHonoured(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, flag     string
		post           testsink.Fault
		requests, apps int
		show           string // in keep show run after it settled
	}{
		// The write never reached the sink: Skip must keep it that way.
		{"skip", "--skip", testsink.Status503, 1, 0, "skip"},
		// The write reached the sink: the held probe finds it.
		{"didnt-happen", "--didnt-happen", testsink.Status500, 1, 1, "proof wins"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sink := testsink.New()
			defer sink.Close()
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			src := consumerScript(sink, `await ctx.http.request({ method: "POST", url: "%SINK%/write/a", json: {}, timeoutMs: 30000, reconcile: { url: "%SINK%/writes/{idempotencyKey}" } })`)
			os.WriteFile(filepath.Join(dir, "wf.js"), []byte(src), 0o644)
			cfg := "[policy]\nreconcile_backoff = \"50ms\"\nreconcile_backoff_max = \"50ms\"\nreconcile_attempts = 50\n" + sink.AllowTOML()
			os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(cfg), 0o644)
			if code, out := keep(t, "deploy", "--grant", "--data", data, filepath.Join(dir, "wf.js")); code != 0 {
				t.Fatalf("deploy: %s", out)
			}
			sink.Queue(c.post)           // an answer that leaves the outcome unknown
			sink.QueueProbe(503)         // the check right after the call cannot tell
			release := sink.HoldProbe(2) // the first background check waits for the person
			defer release()
			serve := exec.Command(keepBin, "serve", "--addr", "127.0.0.1:0", "--data", data, "--config", filepath.Join(dir, "keep.toml"))
			var logs strings.Builder
			serve.Stdout, serve.Stderr = &logs, &logs
			if err := serve.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { serve.Process.Kill(); serve.Wait() }()
			testbin.WaitFor(t, "keep serve to check the write in the background", func() bool { return sink.Probes() == 2 })
			var blocked string
			for _, r := range runs(t, data) {
				if r.Status == "paused:reconciliation" {
					blocked = r.ID
				}
			}
			if blocked == "" {
				t.Fatalf("no run waits on the check: %+v", runs(t, data))
			}
			code, out := keep(t, "resolve", "--data", data, blocked, c.flag)
			if code != 0 {
				t.Fatalf("keep resolve %s: exit %d %s", c.flag, code, out)
			}
			release()
			testbin.WaitFor(t, "the run to finish", func() bool {
				rs := runs(t, data)
				return len(rs) > 0 && !strings.HasPrefix(rs[0].Status, "paused") && rs[0].Status != "active" && func() bool {
					for _, r := range rs {
						if r.Status != "committed" && r.Status != "retried" && r.Status != "skipped" {
							return false
						}
					}
					return true
				}()
			})
			if n := sink.Requests(); n != c.requests {
				t.Fatalf("POSTs at the sink: %d, want %d\n%s", n, c.requests, logs.String())
			}
			if n := len(sink.Writes()); n != c.apps {
				t.Fatalf("writes applied at the sink: %d, want %d", n, c.apps)
			}
			_, show := keep(t, "show", "run", "--data", data, blocked)
			if !strings.Contains(show, strings.TrimPrefix(c.flag, "--")) || !strings.Contains(show, c.show) {
				t.Fatalf("keep show run %s: the decision log does not say %q:\n%s", blocked, c.show, show)
			}
		})
	}
}
