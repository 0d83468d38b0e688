package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TypeScript returns node and the tsc of TypeScript 5, installed from the
// npm registry once (npm install --prefix) into a cache that outlives the
// test, as Go's build cache does: $KEEP_TSC_CACHE, or keep-test/typescript5
// in the user's cache directory. Without node or npm the test skips,
// saying why, unless KEEP_REQUIRE_TSC=1 (CI), where it fails.
func TypeScript(t testing.TB) (node, tsc string) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("KEEP_REQUIRE_TSC") == "1" {
			t.Fatalf(format+" (KEEP_REQUIRE_TSC=1: TypeScript must run here)", args...)
		}
		t.Skipf(format+"; set KEEP_REQUIRE_TSC=1 to make this a failure", args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("no node on PATH to run TypeScript's tsc")
	}
	dir := os.Getenv("KEEP_TSC_CACHE")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir = filepath.Join(cache, "keep-test", "typescript5")
	}
	tsc = filepath.Join(dir, "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err == nil {
		return node, tsc
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		missing("no npm on PATH to install TypeScript from the npm registry")
	}
	// Installed beside the cache and renamed into place, so that two test
	// processes installing at once never see half an installation.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command(npm, "install", "--prefix", tmp, "--no-audit", "--no-fund", "--loglevel=error", "typescript@5")
	if out, err := cmd.CombinedOutput(); err != nil {
		missing("npm install typescript@5 failed: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(tsc); serr != nil {
			t.Fatalf("put TypeScript into %s: %v", dir, err)
		}
	}
	return node, tsc
}
