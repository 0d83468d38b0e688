package script

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// A dry run that compares two versions (issue 39) moves the script's own
// clock and fixes its chance: Date.now, Date() and new Date() read the
// clock moved on, Math.random gives the seed's sequence, the same for the
// same seed; an invocation without them on the same VM has the real ones.
func TestADryRunMovesTheScriptsClockAndFixesItsChance(t *testing.T) {
	p := compile(t, handlerScript(`return { now: Date.now(), made: new Date().getTime(), called: Date(), r: [Math.random(), Math.random()] }`))
	run := func(shift, seed int64) (out struct {
		Now, Made int64
		Called    string
		R         []float64
	}) {
		o, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{nil},
			Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil }, Limits: Limits{Timeout: 2 * time.Second, MemoryLimit: 32 << 20, ClockShift: shift, ChanceSeed: seed}})
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(o.Value, &out); err != nil {
			t.Fatalf("%s: %v", o.Value, err)
		}
		return out
	}
	year := int64(400 * 24 * time.Hour / time.Millisecond)
	before := time.Now().UnixMilli()
	moved := run(year, 39)
	for _, at := range []int64{moved.Now, moved.Made} {
		if at < before+year || at > time.Now().UnixMilli()+year {
			t.Fatalf("the clock was not moved a year on: %d (now %d)", at, before)
		}
	}
	if y := time.UnixMilli(before + year).UTC().Year(); !containsYear(moved.Called, y) {
		t.Fatalf("Date() is not the moved clock: %s", moved.Called)
	}
	again := run(year, 39)
	if again.R[0] != moved.R[0] || again.R[1] != moved.R[1] || moved.R[0] == moved.R[1] {
		t.Fatalf("the same seed gave another sequence: %v, %v", moved.R, again.R)
	}
	if other := run(year, 7919); other.R[0] == moved.R[0] {
		t.Fatalf("another seed gave the same sequence: %v", other.R)
	}
	real := run(0, 0)
	if real.Now > time.Now().UnixMilli() || real.Made > time.Now().UnixMilli() || real.R[0] == moved.R[0] {
		t.Fatalf("without a dry run's clock and chance, the real ones: %+v", real)
	}
}

func containsYear(s string, y int) bool {
	for i := 0; i+4 <= len(s); i++ {
		if s[i:i+4] == strconv.Itoa(y) {
			return true
		}
	}
	return false
}
