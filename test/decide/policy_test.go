package decide

import (
	"encoding/json"
	"github.com/keep-run/keep/internal/testbin"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testsink"
)

// keepIn runs the binary in folder dir, as a person typing in it.
func keepIn(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(keepBin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("keep %v: %v", args, err)
	}
	return 0, string(out)
}

// TestADecisionRunsUnderTheWorkflowsPolicy is issue 24 #5: a decision the
// CLI carries out itself ran under the keep.toml of the folder it was
// typed in, not the one the workflow runs with. The workflow's folder says
// a transient failure gets no automatic retry (transient_retries = 0); the
// other folder's keep.toml has the defaults (five retries). A Try again
// typed in the other folder, with no keep serve running and then beside a
// keep serve started in a third folder without any keep.toml, meets a
// second 429: under the workflow's policy the run is blocked again at
// once, with its card, instead of waiting for an automatic retry.
func TestADecisionRunsUnderTheWorkflowsPolicy(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	root := t.TempDir()
	data := filepath.Join(root, "data")
	wfDir, otherDir, bareDir := filepath.Join(root, "wf"), filepath.Join(root, "other"), filepath.Join(root, "bare")
	for _, d := range []string{wfDir, otherDir, bareDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := consumerScript(sink, `await ctx.http.request({ method: "POST", url: "%SINK%/write/a", json: {} })`)
	must(t, os.WriteFile(filepath.Join(wfDir, "wf.js"), []byte(src), 0o644))
	must(t, os.WriteFile(filepath.Join(wfDir, "keep.toml"), []byte("[policy]\ntransient_retries = 0\n"+sink.AllowTOML()), 0o644))
	// The other folder allows the sink too: only the policy differs.
	must(t, os.WriteFile(filepath.Join(otherDir, "keep.toml"), []byte(sink.AllowTOML()), 0o644))

	sink.Queue(testsink.Status(429))
	code, out := keepIn(t, wfDir, "run", "--data", data, "wf.js")
	if code != 3 || sink.Requests() != 1 {
		t.Fatalf("keep run (transient_retries = 0): exit %d, %d requests\n%s", code, sink.Requests(), out)
	}
	run := blockedRun(t, data)

	// No keep serve: the CLI carries the decision out itself.
	sink.Queue(testsink.Status(429))
	code, out = keepIn(t, otherDir, "resolve", "--data", data, run, "--try-again")
	if code != 3 || !strings.Contains(out, "blocked again") || !strings.Contains(out, "keep retried 0 times") || sink.Requests() != 2 {
		t.Fatalf("keep resolve --try-again from another folder: exit %d, %d requests (want 3 and 2: blocked again under the workflow's transient_retries = 0)\n%s", code, sink.Requests(), out)
	}
	run = blockedRun(t, data)

	// Beside a keep serve started where there is no keep.toml: it runs
	// under the data directory's recorded config too, and carries out the
	// decision typed in the other folder.
	serve := exec.Command(keepBin, "serve", "--addr", "127.0.0.1:0", "--data", data)
	serve.Dir = bareDir
	var logs strings.Builder
	serve.Stdout, serve.Stderr = &logs, &logs
	must(t, serve.Start())
	defer func() { serve.Process.Kill(); serve.Wait() }()
	testbin.WaitFor(t, "keep serve to record its address", func() bool {
		_, err := os.Stat(filepath.Join(data, "serve.addr"))
		return err == nil
	})
	sink.Queue(testsink.Status(429))
	code, out = keepIn(t, otherDir, "resolve", "--data", data, run, "--try-again")
	if code != 0 {
		t.Fatalf("keep resolve beside keep serve: exit %d\n%s", code, out)
	}
	testbin.WaitFor(t, "the run to be blocked again by its third 429", func() bool {
		if sink.Requests() < 3 {
			return false
		}
		_, out := keep(t, "status", "--data", data, "--json")
		var st []struct {
			Blocked      bool
			BlockedRunID string
		}
		return json.Unmarshal([]byte(out), &st) == nil && len(st) == 1 && st[0].Blocked && st[0].BlockedRunID != run
	})
	if n := len(sink.Writes()); n != 0 {
		t.Fatalf("writes applied: %d, want 0 (every attempt met a 429)\n%s", n, logs.String())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestADecisionRunsUnderItsOwnWorkflowsPolicy: the policy a decision runs
// under is the workflow's, recorded with it at its deploy — not the data
// directory's last recorded config, which another workflow's deploy from
// another folder replaced, nor the caller's folder's (issue 24 #5).
func TestADecisionRunsUnderItsOwnWorkflowsPolicy(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	root := t.TempDir()
	data := filepath.Join(root, "data")
	wfDir, secondDir, otherDir := filepath.Join(root, "wf"), filepath.Join(root, "second"), filepath.Join(root, "other")
	for _, d := range []string{wfDir, secondDir, otherDir} {
		must(t, os.MkdirAll(d, 0o755))
	}
	src := consumerScript(sink, `await ctx.http.request({ method: "POST", url: "%SINK%/write/a", json: {} })`)
	must(t, os.WriteFile(filepath.Join(wfDir, "wf.js"), []byte(src), 0o644))
	must(t, os.WriteFile(filepath.Join(wfDir, "keep.toml"), []byte("[policy]\ntransient_retries = 0\n"+sink.AllowTOML()), 0o644))
	second := strings.Replace(src, `name: "decide"`, `name: "second"`, 1)
	must(t, os.WriteFile(filepath.Join(secondDir, "second.js"), []byte(second), 0o644))
	// The second workflow's folder and the caller's have the default
	// policy (five automatic retries of a transient failure).
	must(t, os.WriteFile(filepath.Join(secondDir, "keep.toml"), []byte(sink.AllowTOML()), 0o644))
	must(t, os.WriteFile(filepath.Join(otherDir, "keep.toml"), []byte(sink.AllowTOML()), 0o644))

	sink.Queue(testsink.Status(429))
	code, out := keepIn(t, wfDir, "run", "--data", data, "wf.js")
	if code != 3 || sink.Requests() != 1 {
		t.Fatalf("keep run (transient_retries = 0): exit %d, %d requests\n%s", code, sink.Requests(), out)
	}
	run := blockedRun(t, data)
	// Another workflow deployed from another folder: the data directory's
	// recorded config is now that folder's.
	if code, out := keepIn(t, secondDir, "deploy", "--grant", "--data", data, "second.js"); code != 0 {
		t.Fatalf("deploy second: exit %d\n%s", code, out)
	}
	recorded, err := os.ReadFile(filepath.Join(data, "keep.toml"))
	if err != nil || strings.Contains(string(recorded), "transient_retries") {
		t.Fatalf("the data directory's recorded config is not the second folder's: %v\n%s", err, recorded)
	}
	sink.Queue(testsink.Status(429))
	code, out = keepIn(t, otherDir, "resolve", "--data", data, run, "--try-again")
	if code != 3 || !strings.Contains(out, "blocked again") || !strings.Contains(out, "keep retried 0 times") || sink.Requests() != 2 {
		t.Fatalf("keep resolve --try-again: exit %d, %d requests (want 3 and 2: blocked again under decide's own transient_retries = 0)\n%s", code, sink.Requests(), out)
	}
}
