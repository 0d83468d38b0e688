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
	out, err := exec.Command(keepBin, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("keep %v: %v", args, err)
	}
	return 0, string(out)
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
	if err := os.WriteFile(filepath.Join(dir, "wf.js"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := keep(t, "run", "--data", data, filepath.Join(dir, "wf.js"))
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
