package wasmjs

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestANativeLoopLetsGoRunTheTimer (aw43's attack): Go cannot preempt a
// goroutine inside wazero's machine code, so a native loop that calls no
// import holds its P. With one P (GOMAXPROCS=1, a one-CPU container) the
// timer that sets keep_stop never runs, and with many a garbage
// collection's stop-the-world waits for the loop while the timer waits for
// the stop-the-world: keep's whole process stood still for good. The
// instrumented checks now call out to Go every so many passes, where the
// goroutine can be preempted. Run in a process of its own with
// GOMAXPROCS=1 (a hang there cannot hang this one); before the fix the
// child never ended (checked).
func TestANativeLoopLetsGoRunTheTimer(t *testing.T) {
	if os.Getenv("WASMJS_ONE_P") == "1" {
		runtime.GOMAXPROCS(1)
		in := instance(t, 64<<20, nil, `function f() { return Array.prototype.includes.call({ length: 2 ** 53 }, 1) }`)
		done := make(chan struct{})
		go func() { // the collector's stop-the-world, as keep's other goroutines cause
			for {
				select {
				case <-done:
					return
				default:
					runtime.GC()
				}
			}
		}()
		_, err := in.Call(context.Background(), "f", json.RawMessage(`null`), 300*time.Millisecond)
		close(done)
		var te *TimeoutError
		if !errors.As(err, &te) {
			t.Fatalf("got %v, want the time limit", err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second) // a hang, not a slow machine
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestANativeLoopLetsGoRunTheTimer$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WASMJS_ONE_P=1")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the process running a native loop never ended: its time limit of 300ms was never enforced\n%s", out)
	}
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("%v\n%s", err, out)
	}
}
