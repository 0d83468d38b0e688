// Package testbin builds the real keep binary once per test package, for the
// tests that run it as a person or CI would (crash, torture, browser).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Main builds keep, runs the package's tests with *bin set to its path,
// and exits with their status. Use it as TestMain: testbin.Main(m, &keepBin).
func Main(m interface{ Run() int }, bin *string) { MainTags(m, bin) }

// MainTags is Main with a binary built with these build tags: the clock
// tests' keep has the hook that steps its wall clock (-tags keeptestclock,
// internal/clock), which no other binary has.
func MainTags(m interface{ Run() int }, bin *string, tags ...string) {
	dir, err := os.MkdirTemp("", "keep-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = filepath.Join(dir, "keep")
	_, here, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(here), "..", "..")
	args := []string{"build", "-o", *bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, "./cmd/keep")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build keep: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Fake builds keep-fake beside keep (call it from TestMain after Main has
// set up, or lazily from a test) and returns its path.
func Fake(keepBin string) (string, error) {
	bin := filepath.Join(filepath.Dir(keepBin), "keep-fake")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	_, here, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/keep-fake")
	cmd.Dir = filepath.Join(filepath.Dir(here), "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build keep-fake: %v\n%s", err, out)
	}
	return bin, nil
}
