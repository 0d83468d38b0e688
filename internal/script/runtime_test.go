package script

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// Two keeps in one process each own a Runtime and share nothing (issue
// 41): stopping one, with an invocation of its own under way, ends that
// invocation with ErrStopping and leaves the other's idle worker and its
// next invocation alone; each counts only its own workers.
func TestTwoRuntimesShareNothing(t *testing.T) {
	workersOnly(t)
	a, b := NewRuntime(), NewRuntime()
	defer a.Stop()
	defer b.Stop()
	p := compile(t, isolationScript(`return await ctx.files.read({ path: "x" })`))
	defer p.Release()
	call := func(rt *Runtime, host HostFunc) (Outcome, error) {
		return p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
			Tools: map[string][]string{"files": {"read"}}, Limits: Limits{Timeout: time.Minute, MemoryLimit: 32 << 20}, Host: host, Runtime: rt})
	}
	read := func(string, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"content":"hello"}`), nil
	}
	if _, err := call(b, read); err != nil {
		t.Fatalf("b's first invocation: %v", err)
	}
	if b.IdleWorkers() != 1 {
		t.Fatalf("b keeps %d idle workers after an invocation, want 1", b.IdleWorkers())
	}
	// The spare b starts after its first invocation, in the background.
	for !b.spareReady() {
		time.Sleep(10 * time.Millisecond)
	}
	bBefore, _ := b.WorkerStats()
	stdStarted, _ := WorkerStats()
	// a is stopped while its invocation waits on the host.
	_, err := call(a, func(string, json.RawMessage) (json.RawMessage, error) {
		a.Stop()
		return json.RawMessage(`{"content":"late"}`), nil
	})
	if !errors.Is(err, ErrStopping) {
		t.Fatalf("a's invocation under way when a stopped: %v, want ErrStopping", err)
	}
	if _, err := call(a, read); !errors.Is(err, ErrStopping) {
		t.Fatalf("a stopped still runs an invocation: %v", err)
	}
	if b.IdleWorkers() != 1 {
		t.Fatalf("stopping a took b's idle worker: b keeps %d", b.IdleWorkers())
	}
	o, err := call(b, read)
	if err != nil || string(o.Value) != `{"content":"hello"}` {
		t.Fatalf("b after a stopped: %s %v", o.Value, err)
	}
	aStarted, aKilled := a.WorkerStats()
	bStarted, bKilled := b.WorkerStats()
	if bStarted != bBefore || bKilled != 0 || !b.spareReady() {
		t.Fatalf("b started %d workers (%d before a stopped) and killed %d, its spare ready: %v; want its idle worker reused, its spare kept, none killed", bStarted, bBefore, bKilled, b.spareReady())
	}
	if aStarted < 1 || aKilled < 1 {
		t.Fatalf("a started %d workers and killed %d; want its own, killed by its stop", aStarted, aKilled)
	}
	if a.WorkerRoundTrips() == 0 || b.WorkerRoundTrips() == 0 {
		t.Fatalf("round trips a %d b %d: each counts its own", a.WorkerRoundTrips(), b.WorkerRoundTrips())
	}
	if now, _ := WorkerStats(); now != stdStarted {
		t.Fatalf("the default runtime started %d workers for a's and b's invocations", now-stdStarted)
	}
}

func (r *Runtime) spareReady() bool {
	r.spare.mu.Lock()
	defer r.spare.mu.Unlock()
	return r.spare.wk != nil
}
