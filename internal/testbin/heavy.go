package testbin

import (
	"os"
	"testing"
)

// HeavyEnv names the environment variable that runs the heavy cases of
// the suite (issue 41): more variants of an attack whose promise a lighter
// case of the same package already tests, longer tortures. .ci/run sets
// it; `go test ./...` alone runs the lighter cases, so a newcomer's run
// still covers every package's own promise.
const HeavyEnv = "KEEP_TEST_HEAVY"

// HeavyRun says the heavy cases run (KEEP_TEST_HEAVY=1).
func HeavyRun() bool { return os.Getenv(HeavyEnv) == "1" }

// Heavy skips t unless the heavy cases run; like names the lighter case of
// the same promise that always runs.
func Heavy(t testing.TB, like string) {
	t.Helper()
	if !HeavyRun() {
		t.Skipf("one more case of the promise %s tests: %s=1 runs it (.ci/run does)", like, HeavyEnv)
	}
}
