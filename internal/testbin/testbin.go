// Package testbin builds the real keep binary once per test package, for the
// tests that run it as a person or CI would (crash, torture, browser).
package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Main builds keep, runs the package's tests with *bin set to its path,
// and exits with their status. Use it as TestMain: testbin.Main(m, &keepBin).
func Main(m interface{ Run() int }, bin *string) { MainTags(m, bin) }

// MainTags is Main with a binary built with these build tags: the clock
// tests' keep has the hook that steps its wall clock (-tags keeptestclock,
// internal/clock), which no other binary has.
//
// The binary is linked once for all the test packages that run it (issue
// 41: nineteen packages each linked their own keep, most of a newcomer's
// `go test ./...` on two cores): it is kept in the user's cache under the
// build IDs of the packages it is built from, which change with any of
// their sources, and a package that finds it there uses it.
func MainTags(m interface{ Run() int }, bin *string, tags ...string) {
	path, err := built("./cmd/keep", "keep", tags)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = path
	os.Exit(m.Run())
}

// Fake builds keep-fake (call it from TestMain after Main has set up, or
// lazily from a test) and returns its path; keepBin is unused and stays
// for its callers.
func Fake(keepBin string) (string, error) {
	_ = keepBin
	return built("./cmd/keep-fake", "keep-fake", nil)
}

// built links the main package pkg (tagged) once per build ID into the
// user's cache, under a lock, and returns the binary's path.
func built(pkg, name string, tags []string) (string, error) {
	_, here, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(here), "..", "..")
	flags := []string{}
	if len(tags) > 0 {
		flags = append(flags, "-tags", strings.Join(tags, ","))
	}
	// -export compiles what it must (from go's own cache) and reports each
	// package's build ID, which changes with its compiled code: the list
	// of them covers every source the binary is built from.
	list := exec.Command("go", append(append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}} {{.BuildID}}"}, flags...), pkg)...)
	list.Dir = root
	id, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("go list %s: %v", pkg, err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(string(id)) + " " + strings.Join(tags, ",") + " " + runtime.Version()))
	dir := filepath.Join(cache, "keep-testbin", hex.EncodeToString(sum[:12]))
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err == nil {
		now := time.Now()
		return bin, os.Chtimes(dir, now, now) // in use: prune leaves it
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// One package links while the others wait for its binary.
	lock, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %v", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	prune(filepath.Dir(dir), dir)
	tmp := bin + ".tmp"
	cmd := exec.Command("go", append(append([]string{"build", "-o", tmp}, flags...), pkg)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", name, err, out)
	}
	return bin, os.Rename(tmp, bin)
}

// prune removes the binaries of other builds not used for a day, so that
// the cache holds about one keep per day of changes.
func prune(root, keep string) {
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		p := filepath.Join(root, e.Name())
		if info, err := e.Info(); err == nil && p != keep && time.Since(info.ModTime()) > 24*time.Hour {
			os.RemoveAll(p)
		}
	}
}
