//go:build !keeptestclock

package clock

import "time"

// TestBuild says this binary has the test hook that moves its wall clock:
// never, in a binary built without the tag keeptestclock.
const TestBuild = false

func wall() time.Time { return time.Now().Round(0) }
