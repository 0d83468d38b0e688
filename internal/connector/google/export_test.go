package google

import (
	"context"
	"time"
)

// SetPaceClock makes the Sheets pacer of a read its time from now and
// wait with sleep (tests that run a minute of calls by a clock of their own).
func SetPaceClock(a *Auth, now func() time.Time, sleep func(ctx context.Context, d time.Duration) error) {
	a.sheetsPace.now, a.sheetsPace.sleep = now, sleep
}

// UntilPacificMidnight is how long a daily quota's retry waits at now.
func UntilPacificMidnight(now time.Time) time.Duration { return untilPacificMidnight(now) }
