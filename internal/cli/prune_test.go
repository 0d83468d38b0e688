package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPruneCommand: keep prune --dry-run says what it would prune per
// kind and prunes nothing; keep prune says what it pruned and keep.db's
// size; a bad [retention] is refused naming the key.
func TestPruneCommand(t *testing.T) {
	dir, data := quickstart(t)
	if r := keep(t, "run", "--data", data, filepath.Join(dir, "workflow.js")); r.code != 0 {
		t.Fatal(r.err)
	}
	cfg := filepath.Join(dir, "keep.toml")
	if err := os.WriteFile(cfg, []byte("[retention]\ndays = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := keep(t, "prune", "--dry-run", "--data", data, "--config", cfg)
	if r.code != 0 || !strings.Contains(r.out, "would prune the bodies of work finished before") || !strings.Contains(r.out, "runs") ||
		!strings.Contains(r.out, "events") || !strings.Contains(r.out, "mutations") || strings.Contains(r.out, "keep.db:") {
		t.Fatalf("keep prune --dry-run: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	r = keep(t, "prune", "--data", data, "--config", cfg)
	if r.code != 0 || !strings.Contains(r.out, "pruned the bodies") || !strings.Contains(r.out, "keep.db:") {
		t.Fatalf("keep prune: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	t.Log(r.out)
	if err := os.WriteFile(cfg, []byte("[retention]\ndays = -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = keep(t, "prune", "--data", data, "--config", cfg)
	if r.code == 0 || !strings.Contains(r.err, "retention") || !strings.Contains(r.err, "days") {
		t.Fatalf("a negative [retention] days: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
}
