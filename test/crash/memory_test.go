package crash

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// oom registers an input and publishes, then pushes 1 MiB strings until
// QuickJS refuses one, catches that and returns success.
const oom = `export default Keep.workflow({
  name: "oom",
  topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: { id: "a" } })
    let caught = false
    try { const a = []; for (;;) a.push("x".repeat(1 << 20) + Math.random()) } catch (e) { caught = true }
    return { caught }
  } } },
})`

// Issue 40 #4: through keep run, under [policy] memory_limit = "32MiB", a
// producer that caught its out-of-memory error and returned committed: the
// sandbox worker judged its growth by a peak of resident memory it had
// inherited from keep's larger process. The run fails as a logic error
// that names the memory limit, and nothing it registered or published is
// kept, nor its state.
func TestACaughtOutOfMemoryFailsTheRunThroughKeepRun(t *testing.T) {
	dir := t.TempDir()
	wf, cfg := filepath.Join(dir, "wf.js"), filepath.Join(dir, "keep.toml")
	if err := os.WriteFile(wf, []byte(oom), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("[policy]\nmemory_limit = \"32MiB\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	keep := func(args ...string) string {
		out, _ := exec.Command(keepBin, append([]string{"--data", filepath.Join(dir, "data"), "--config", cfg}, args...)...).CombinedOutput()
		return string(out)
	}
	said := keep("run", wf)
	if !strings.Contains(said, "memory limit of 32 MiB") {
		t.Fatalf("keep run does not say the producer went over its memory limit of 32 MiB:\n%s", said)
	}
	var runs []struct {
		Status string `json:"status"`
		Error  *struct {
			Class   string `json:"class"`
			Message string `json:"message"`
		} `json:"error"`
	}
	out := keep("runs", "oom", "--json")
	if err := json.Unmarshal([]byte(out), &runs); err != nil {
		t.Fatalf("keep runs --json: %v\n%s", err, out)
	}
	for _, r := range runs {
		if r.Status == "committed" {
			t.Fatalf("a run of the producer committed: %s", out)
		}
	}
	if len(runs) == 0 || runs[0].Error == nil || runs[0].Error.Class != "logic" || !strings.Contains(runs[0].Error.Message, "memory limit") {
		t.Fatalf("want the producer's run failed as a logic error naming the memory limit:\n%s", out)
	}
	if inputs := keep("inputs", "oom"); strings.Contains(inputs, "Job a") {
		t.Fatalf("the input the run registered was kept:\n%s", inputs)
	}
}
