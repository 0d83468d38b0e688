package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A version never gets more than a person granted (issue 16): deployed
// without --grant, the quick start's first call waits with a card that
// says what to grant; keep grant allows it and the run goes on by itself;
// a later version that uses something new waits for that one only.
func TestAWorkflowCallsOnlyWhatWasGranted(t *testing.T) {
	dir, data := quickstart(t)
	wf := filepath.Join(dir, "workflow.js")
	r := keep(t, "deploy", "--data", data, wf)
	if r.code != 0 || !strings.Contains(r.out, "not yet granted: files.list, files.read, files.write, source:files") || !strings.Contains(r.out, "keep grant quickstart-orders") {
		t.Fatalf("deploy: %d %s %s", r.code, r.out, r.err)
	}
	r = keep(t, "status", "quickstart-orders", "--data", data)
	if !strings.Contains(r.out, "not yet granted: files.list") {
		t.Fatalf("status does not say what waits for a grant:\n%s", r.out)
	}
	r = keep(t, "run-now", "quickstart-orders", "--data", data)
	if r.code != ExitBlocked || !strings.Contains(r.out, "ctx.files.list is not granted to quickstart-orders") || !strings.Contains(r.out, "keep grant quickstart-orders") {
		t.Fatalf("the first call: %d\n%s%s", r.code, r.out, r.err)
	}
	if files, _ := os.ReadDir(filepath.Join(dir, "out")); len(files) != 0 {
		t.Fatalf("%d files written before anything was granted", len(files))
	}
	r = keep(t, "grant", "quickstart-orders", "--data", data)
	if r.code == 0 || !strings.Contains(r.err, "pass --yes") || !strings.Contains(r.out, "files.write") {
		t.Fatalf("keep grant without a terminal or --yes: %d %s %s", r.code, r.out, r.err)
	}
	r = keep(t, "grant", "quickstart-orders", "--yes", "--by", "ann", "--data", data)
	if r.code != 0 || !strings.Contains(r.out, "granted quickstart-orders: files.list, files.read, files.write, source:files") {
		t.Fatalf("keep grant: %d %s %s", r.code, r.out, r.err)
	}
	if files, _ := os.ReadDir(filepath.Join(dir, "out")); len(files) != 3 {
		t.Fatalf("%d confirmations after the grant, want 3 (the blocked run tries again by itself)", len(files))
	}
	// A new version that also calls http waits for that one only.
	src, _ := os.ReadFile(wf)
	os.WriteFile(wf, []byte(strings.Replace(string(src), "async mutate(ctx, prepared) {", "async mutate(ctx, prepared) {\n    if (false) await ctx.http.request({ url: \"http://127.0.0.1:9/x\", method: \"POST\" });", 1)), 0o644)
	r = keep(t, "deploy", "--data", data, wf)
	if r.code != 0 || !strings.Contains(r.out, "not yet granted: http.request —") {
		t.Fatalf("the new version: %d %s %s", r.code, r.out, r.err)
	}
}
