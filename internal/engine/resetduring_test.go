package engine_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A person's reset of a producer's state taken while a run of that
// producer is under way stands: the producer runs again from scratch, as
// the reset's message says, and the run under way does not write back the
// state it computed from the old one (an attack found the reset accepted
// and then undone: the run is not stored until its commit, so the reset's
// check for a run of the handler did not see it).
func TestAStateResetDuringAProducerRunStands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var reads atomic.Int32
	var once sync.Once
	reset := make(chan error, 1)
	e.sink.OnRead = func(path string) {
		// The second run of p waits on its read: a person resets p's state.
		if path != "/read" || reads.Add(1) != 2 {
			return
		}
		once.Do(func() {
			_, err := resetState(e.ctx(), e.k.Store, "counter", "p", time.Now())
			reset <- err
		})
	}
	wf := e.deploy(`export default Keep.workflow({ name: "counter", topics: { "tick": {} },
  producers: { p: { publishes: ["tick"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    await ctx.http.request({ method: "GET", url: "%SINK%/read" })
    return { runs: ((state && state.runs) || 0) + 1 }
  } } },
})`)
	e.settle()
	if got := e.handlerState(wf, "p"); !strings.Contains(got, `"runs":1`) {
		t.Fatalf("state after the first run: %s", got)
	}
	if _, err := runNow(e, wf); err != nil {
		t.Fatal(err)
	}
	e.settle()
	select {
	case err := <-reset:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("the second run never read: the test did not reset")
	}
	// After the reset, p ran from scratch: its state counts that one run.
	if got := e.handlerState(wf, "p"); !strings.Contains(got, `"runs":1`) {
		t.Fatalf("state after the reset: %s, want {\"runs\":1} (a run from scratch after the reset)", got)
	}
}
