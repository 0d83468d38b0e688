// Package clock is keep's time (issue 44: time that cannot jump).
//
// Three readings, each for one purpose:
//
//   - Mono: how long this process has run, on the monotonic clock. Every
//     duration inside one process (a call's timeout, the settle window
//     before a "not found" is believed, a lease's local end) is measured
//     on it: a step of the wall clock (NTP, a resumed virtual machine, a
//     person's date command) does not move it.
//   - Now: keep's time, what keep stamps and compares (due times, a call's
//     send time, a run's updated_at). It never goes backward: it follows
//     the reference clock forward at once (a clock that was behind, a
//     machine that slept: the time really is later), and when the
//     reference steps back it goes on at nine tenths of the monotonic rate
//     until the reference has caught up, so that a check due in 10 s comes
//     in at most 11 s instead of an hour later. The reference is the wall
//     clock, or, once Follow was called (PostgreSQL), the database's clock:
//     the one clock every node sharing that database compares by.
//   - Wall: the system's wall clock, for what is compared with clocks
//     outside keep (a webhook's signed timestamp).
//
// Tests step the wall clock of a keep binary built with the build tag
// keeptestclock only (testhook.go): no binary built without it has a way
// to move its clock.
package clock

import (
	"sync"
	"time"
)

// slew is how fast keep's time goes while it waits for a reference that
// stepped back: nine tenths of real time.
const slewNum, slewDen = 9, 10

var (
	start = time.Now() // carries the monotonic reading every Mono counts from

	mu sync.Mutex
	// last is keep's time (ns since the epoch) when it was last read, at
	// lastMono.
	last     int64
	lastMono time.Duration
	// following: the reference is refAt (ns since the epoch, the
	// database's clock) at refMono, moved on by Mono since.
	following bool
	refAt     int64
	refMono   time.Duration

	// readWall and readMono are the clocks Now reads (a unit test moves them).
	readWall = wall
	readMono = Mono
)

// Mono is how long this process has run, on the monotonic clock.
func Mono() time.Duration { return time.Since(start) }

// MonoMs is Mono in milliseconds.
func MonoMs() int64 { return Mono().Milliseconds() }

// Wall is the system's wall clock (a test build's, moved by its hook).
func Wall() time.Time { return wall() }

// Now is keep's time: see the package's comment.
func Now() time.Time {
	mono := readMono()
	mu.Lock()
	defer mu.Unlock()
	var ref int64
	if following {
		ref = refAt + int64(mono-refMono)
	} else {
		ref = readWall().UnixNano()
	}
	k := ref
	if last != 0 && ref < last+int64(mono-lastMono) {
		// The reference is behind keep's time: it stepped back (or the
		// database's clock was read late). Go on, slower, until it catches
		// up; never back.
		k = max(ref, last+int64(mono-lastMono)*slewNum/slewDen)
	}
	k = max(k, last)
	last, lastMono = k, mono
	return time.Unix(0, k)
}

// Lead is how far keep's time is ahead of its reference now: more than
// zero only after the reference stepped back, while keep's time waits for
// it.
func Lead() time.Duration {
	mono := readMono()
	mu.Lock()
	defer mu.Unlock()
	ref := readWall().UnixNano()
	if following {
		ref = refAt + int64(mono-refMono)
	}
	if last == 0 {
		return 0
	}
	return time.Duration(last + int64(mono-lastMono) - ref)
}

// Follow makes the database's clock keep's reference: at was read from it
// by a statement sent at sent and answered at answered (Mono readings);
// the database read it about halfway between. The first call sets keep's
// time to it, back too (keep serve calls it before it stamps anything);
// later ones are followed as any reference is.
func Follow(at time.Time, sent, answered time.Duration) {
	mu.Lock()
	defer mu.Unlock()
	if !following {
		last = 0
	}
	following, refAt, refMono = true, at.UnixNano(), sent+(answered-sent)/2
}
