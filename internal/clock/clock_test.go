package clock

import (
	"testing"
	"time"
)

// fake moves Now's clocks by hand for one test.
type fake struct{ wall, mono time.Duration }

func (f *fake) install(t *testing.T) {
	mu.Lock()
	saved := []any{readWall, readMono, last, lastMono, following, refAt, refMono}
	base := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	readWall = func() time.Time { return base.Add(f.wall) }
	readMono = func() time.Duration { return f.mono }
	last, lastMono, following = 0, 0, false
	mu.Unlock()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		readWall, readMono = saved[0].(func() time.Time), saved[1].(func() time.Duration)
		last, lastMono, following = saved[2].(int64), saved[3].(time.Duration), saved[4].(bool)
		refAt, refMono = saved[5].(int64), saved[6].(time.Duration)
	})
}

func (f *fake) pass(d time.Duration) { f.wall += d; f.mono += d }

// A step back: keep's time does not go back, goes on at 9/10 of real
// time, and meets the wall clock again; a step forward is followed at once.
func TestKeepsTimeNeverStepsBack(t *testing.T) {
	f := &fake{}
	f.install(t)
	t0 := Now()
	f.pass(time.Second)
	if d := Now().Sub(t0); d != time.Second {
		t.Fatalf("a second later keep's time moved %s", d)
	}
	f.wall -= time.Hour // the step back
	before := Now()
	if d := before.Sub(t0); d != time.Second {
		t.Fatalf("right after a step back keep's time is %s from the start, want 1s (no move back)", d)
	}
	if Lead() != time.Hour {
		t.Fatalf("lead %s, want 1h", Lead())
	}
	f.pass(10 * time.Second)
	if d := Now().Sub(before); d != 9*time.Second {
		t.Fatalf("10 s of real time after the step moved keep's time %s, want 9s", d)
	}
	// The wall clock catches up after 10 h (the lead shrinks a tenth of
	// real time); then keep's time is the wall's again.
	for i := 0; i < 10*60; i++ {
		f.pass(time.Minute)
		Now()
	}
	if l := Lead(); l > 0 {
		t.Fatalf("after 10 h the lead is still %s", l)
	}
	f.pass(time.Second)
	w := readWall()
	if n := Now(); !n.Equal(w) {
		t.Fatalf("keep's time %s, the wall clock %s", n, w)
	}
	f.wall += time.Hour // a step forward
	if n := Now(); !n.Equal(readWall()) {
		t.Fatalf("a step forward is not followed: %s, the wall clock %s", n, readWall())
	}
}

// The database's clock: the first Follow sets keep's time to it, back too;
// then it is moved on by the monotonic clock, not the wall clock.
func TestFollowTakesTheDatabasesClock(t *testing.T) {
	f := &fake{wall: time.Hour} // this node an hour ahead
	f.install(t)
	Now()
	db := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	Follow(db, f.mono, f.mono)
	if n := Now(); !n.Equal(db) {
		t.Fatalf("after Follow keep's time is %s, the database's %s", n, db)
	}
	f.wall += 2 * time.Hour // the node's clock steps; the database's does not
	f.mono += time.Second
	if n := Now(); !n.Equal(db.Add(time.Second)) {
		t.Fatalf("keep's time followed the node's wall clock: %s, want %s", n, db.Add(time.Second))
	}
}
