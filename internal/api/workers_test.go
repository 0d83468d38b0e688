package api_test

import (
	"fmt"
	"strings"
	"testing"

	sandbox "github.com/keep-run/keep/internal/script"
)

// Issue 25: GET …/topics read the declaration by compiling the script on
// every request, a sandbox worker each, and a deploy left an idle worker
// that no run used. The topics are now read from the declaration read at
// deploy, and the deploy ends its worker. Not parallel: it counts the
// process's workers.
func TestTopicsAndDeployKeepNoWorkers(t *testing.T) {
	// It counts workers: on the worker sandbox, whatever the default.
	t.Setenv("KEEP_SANDBOX", sandbox.SandboxWorker)
	r := newRig(t, "")
	// A source of its own, so that no other test read its declaration first.
	src := "// a source of its own\n" + strings.ReplaceAll(script, "%SINK%", r.sink.URL)
	started, _ := sandbox.WorkerStats()
	idle := sandbox.IdleWorkers()
	code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": src, "file": "hook.js", "grant": true}, nil)
	if code != 200 || obj["workflow"] != "hook" {
		t.Fatalf("deploy: %d %v", code, obj)
	}
	after, _ := sandbox.WorkerStats()
	if after != started+1 || sandbox.IdleWorkers() != idle {
		t.Fatalf("a deploy reads the declaration in one worker and keeps none: %d started (want 1), %d idle before, %d after", after-started, idle, sandbox.IdleWorkers())
	}
	for i := 0; i < 5; i++ {
		code, obj, _ = r.call("GET", "/api/v1/workflows/hook/topics", nil, nil)
		ts, _ := obj["topics"].([]any)
		if code != 200 || len(ts) != 1 || !strings.Contains(fmt.Sprint(ts), "job") {
			t.Fatalf("topics: %d %v", code, obj)
		}
	}
	if now, _ := sandbox.WorkerStats(); now != after || sandbox.IdleWorkers() != idle {
		t.Fatalf("GET topics started %d workers, and %d are idle (was %d)", now-after, sandbox.IdleWorkers(), idle)
	}
}
