//go:build keeptestclock

package clock

import (
	"os"
	"strings"
	"sync"
	"time"
)

// TestBuild says this binary has the test hook that moves its wall clock.
//
// The hook: KEEP_TEST_CLOCK_FILE names a file holding a Go duration
// ("1h", "-1h", "0s"), the step of this process's wall clock from the
// system's; a test rewrites it to step the clock while keep runs. The
// monotonic clock does not move, as with a real step. It exists only in a
// binary built with -tags keeptestclock (the clock tests build one), so
// that no production binary can have its clock moved by an environment
// variable left set by accident.
const TestBuild = true

var (
	hookMu   sync.Mutex
	hookRead time.Duration = -1
	offset   time.Duration
)

// offsetNow reads the step from the file, at most every 10 ms.
func offsetNow() time.Duration {
	path := os.Getenv("KEEP_TEST_CLOCK_FILE")
	if path == "" {
		return 0
	}
	hookMu.Lock()
	defer hookMu.Unlock()
	if m := Mono(); hookRead < 0 || m-hookRead >= 10*time.Millisecond {
		hookRead = m
		if b, err := os.ReadFile(path); err == nil {
			if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil {
				offset = d
			}
		}
	}
	return offset
}

func wall() time.Time { return time.Now().Round(0).Add(offsetNow()) }
