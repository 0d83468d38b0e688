package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadOnlyDataDir: every command that must write says so clearly and
// exits non-zero; reads still work; nothing changes.
func TestReadOnlyDataDir(t *testing.T) {
	t.Parallel()
	dir, _ := quickstart(t)
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16M", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v %s", err, out)
	}
	defer exec.Command("umount", "-l", mnt).Run()
	data := filepath.Join(mnt, "data")
	if r := keep(t, "run", "--data", data, filepath.Join(dir, "workflow.js")); r.code != 0 {
		t.Fatalf("run: %d %s", r.code, r.err)
	}
	before := keep(t, "outputs", "--data", data, "quickstart-orders", "--json").out
	if out, err := exec.Command("mount", "-o", "remount,ro", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount ro: %v %s", err, out)
	}
	defer exec.Command("mount", "-o", "remount,rw", mnt).Run()
	for _, args := range [][]string{
		{"run", filepath.Join(dir, "workflow.js")},
		{"serve"},
		{"deploy", "--grant", "--minor", filepath.Join(dir, "workflow.js")},
		{"pause", "quickstart-orders"},
		{"run-now", "quickstart-orders"},
	} {
		r := keep(t, append(args, "--data", data)...)
		if r.code == 0 || !strings.Contains(strings.ToLower(r.err), "read-only") {
			t.Errorf("keep %v on a read-only data dir: exit %d, %q (want a non-zero exit that says read-only)", args, r.code, r.err)
		}
	}
	// Reads still work on the read-only directory.
	for _, args := range [][]string{{"status", "--json"}, {"inputs", "quickstart-orders"}, {"outputs", "quickstart-orders", "--json"}} {
		if r := keep(t, append(args, "--data", data)...); r.code != 0 || !strings.Contains(r.out, "order") && !strings.Contains(r.out, "quickstart") {
			t.Errorf("keep %v on a read-only data dir: exit %d %s %s", args, r.code, r.out, r.err)
		}
	}
	exec.Command("mount", "-o", "remount,rw", mnt).Run()
	if after := keep(t, "outputs", "--data", data, "quickstart-orders", "--json").out; after != before {
		t.Fatalf("the stored state changed:\n%s\n%s", before, after)
	}
}

func TestInvalidConfigChangesNothing(t *testing.T) {
	t.Parallel()
	dir, data := quickstart(t)
	cfg := filepath.Join(dir, "keep.toml")
	os.WriteFile(cfg, []byte("[policy]\ntransient_retries = \"five\"\n"), 0o644)
	r := keep(t, "run", "--data", data, "--config", cfg, filepath.Join(dir, "workflow.js"))
	if r.code != 1 || !strings.Contains(r.err, "[policy] transient_retries") || !strings.Contains(r.err, "keep.toml") {
		t.Fatalf("exit %d: %s", r.code, r.err)
	}
	if _, err := os.Stat(filepath.Join(data, "keep.db")); err == nil {
		t.Fatal("a run with a bad config created a database")
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
		t.Fatal("a run with a bad config wrote outputs")
	}
}

// Issue 11 #15: a corrupt page makes keep stop with a clear error, instead
// of logging "malformed" every half second for ever.
func TestACorruptDatabaseStopsKeepWithAClearError(t *testing.T) {
	t.Parallel()
	dir, data := quickstart(t)
	if r := keep(t, "run", "--data", data, filepath.Join(dir, "workflow.js")); r.code != 0 {
		t.Fatalf("first run: %d %s", r.code, r.err)
	}
	db := filepath.Join(data, "keep.db")
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	if len(b) < 6*page {
		t.Fatalf("keep.db is only %d bytes", len(b))
	}
	// The last pages (ledger rows, not the schema keep reads at start)
	// become garbage.
	for i := len(b) - 3*page; i < len(b); i++ {
		b[i] = byte(i*7 + 3)
	}
	if err := os.WriteFile(db, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := keep(t, "run", "--data", data, filepath.Join(dir, "workflow.js"))
	t.Logf("stderr: %s", r.err)
	if r.code == 0 || !strings.Contains(r.err, "corrupt") {
		t.Fatalf("want a clear error about a corrupt database, got exit %d\nstdout: %s\nstderr: %s", r.code, r.out, r.err)
	}
}
