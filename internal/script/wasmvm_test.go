package script

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// TestWasmSandboxRunsInvocationsInAnInstance: with KEEP_SANDBOX=wasm an
// invocation runs in a wasmjs instance (kept idle afterwards, as a clean
// end allows), through the prelude: the host call, the result, a throw
// reported as the worker path reports it, and a runaway loop stopped.
func TestWasmSandboxRunsInvocationsInAnInstance(t *testing.T) {
	t.Setenv(isolationEnv, "wasm")
	p, err := Compile("wf.js", okScript)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	host := func(m string, a json.RawMessage) (json.RawMessage, error) {
		if m == "files.read" {
			return json.RawMessage(`{"content":"hello"}`), nil
		}
		return nil, nil
	}
	lim := Limits{Timeout: 10 * time.Second, MemoryLimit: 64 << 20}
	o, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`{"n":1}`)},
		Tools: map[string][]string{"files": {"read"}}, Host: host, Limits: lim})
	if err != nil || string(o.Value) != `{"n":2,"content":"hello"}` {
		t.Fatalf("got %s, %v", o.Value, err)
	}
	if Default().idleVMs.count(func(v *sandboxVM) bool { return v.prog == p && v.wasm != nil }) != 1 {
		t.Fatal("the invocation did not leave a wasm instance idle: it did not run in one")
	}

	bad, err := Compile("wf.js", strings.Replace(okScript, `const n = (state?.n ?? 0) + 1`, `if (state?.loop) for (;;) {}; if (state?.boom) throw new TypeError("boom"); const n = 1`, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Release()
	_, err = bad.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`{"boom":true}`)},
		Tools: map[string][]string{"files": {"read"}}, Host: host, Limits: lim})
	if err == nil || !strings.Contains(err.Error(), "TypeError: boom") {
		t.Fatalf("a throw: %v", err)
	}
	lim.Timeout = 300 * time.Millisecond
	_, err = bad.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`{"loop":true}`)},
		Tools: map[string][]string{"files": {"read"}}, Host: host, Limits: lim})
	if err == nil || !strings.Contains(err.Error(), "ran longer than its time limit of 300ms") {
		t.Fatalf("a loop: %v", err)
	}
}

// TestTheSandboxIsWasmUnlessChosen: with KEEP_SANDBOX unset, a script is
// declared and invoked in wasm instances and no worker process starts;
// [policy] sandbox = "worker" (SetSandbox) brings the workers back;
// KEEP_SANDBOX wins over both; anything else is refused.
func TestTheSandboxIsWasmUnlessChosen(t *testing.T) {
	t.Setenv(isolationEnv, "")
	t.Cleanup(func() { sandboxChoice.Store("") })
	run := func(src string) {
		t.Helper()
		p, err := Compile("wf.js", src)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release()
		host := func(m string, a json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{"content":"hello"}`), nil
		}
		o, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`{"n":1}`)},
			Tools: map[string][]string{"files": {"read"}}, Host: host, Limits: Limits{Timeout: 10 * time.Second, MemoryLimit: 64 << 20}})
		if err != nil || string(o.Value) != `{"n":2,"content":"hello"}` {
			t.Fatalf("got %s, %v", o.Value, err)
		}
	}
	started := func() int64 { n, _ := WorkerStats(); return n }
	// A source no test declared before: Declare remembers by source.
	before := started()
	run(okScript + "\n// the default")
	if !Wasm() || started() != before {
		t.Fatalf("by default: Wasm() = %v, %d workers started", Wasm(), started()-before)
	}
	if err := SetSandbox(SandboxWorker); err != nil {
		t.Fatal(err)
	}
	run(okScript + "\n// worker")
	if Wasm() || started() == before {
		t.Fatal(`with sandbox = "worker" no worker started`)
	}
	t.Setenv(isolationEnv, "wasm")
	if !Wasm() {
		t.Fatal("KEEP_SANDBOX=wasm does not win over the policy")
	}
	if err := SetSandbox("docker"); err == nil || !strings.Contains(err.Error(), `want "wasm" or "worker"`) {
		t.Fatalf("SetSandbox(docker): %v", err)
	}
}

// TestStopEndsAWasmInvocationInANativeLoop: keep stopping (Runtime.Stop)
// ends an invocation spinning in a native loop at once with ErrStopping,
// not at its time limit of an hour; the runtime resumed runs again.
func TestStopEndsAWasmInvocationInANativeLoop(t *testing.T) {
	t.Setenv(isolationEnv, "wasm")
	rt := NewRuntime()
	defer rt.Close()
	p, err := Compile("wf.js", strings.Replace(okScript, `const n = (state?.n ?? 0) + 1`, `if (state?.spin) Array.prototype.indexOf.call({ length: 2 ** 53 }, 1); const n = 1`, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	inv := Invocation{Runtime: rt, Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`{"spin":true}`)},
		Tools: map[string][]string{"files": {"read"}}, Host: func(string, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"content":"x"}`), nil },
		Limits: Limits{Timeout: time.Hour, MemoryLimit: 64 << 20}}
	done := make(chan error, 1)
	go func() { _, err := p.Invoke(inv); done <- err }()
	for busy := false; !busy; {
		rt.busyWasm.Range(func(any, any) bool { busy = true; return false })
		time.Sleep(time.Millisecond)
	}
	rt.Stop()
	if err := <-done; err != ErrStopping {
		t.Fatalf("got %v, want ErrStopping", err)
	}
	rt.Resume()
	inv.Args = []json.RawMessage{json.RawMessage(`{"spin":false}`)}
	if o, err := p.Invoke(inv); err != nil || string(o.Value) != `{"n":1,"content":"x"}` {
		t.Fatalf("after Resume: %s, %v", o.Value, err)
	}
}

// TestAGetterThatThrowsNothingIsNotOutOfMemory: an error whose message
// getter throws undefined (what QuickJS throws when out of memory leaves it
// nothing to throw) is said as a getter that threw while the heap has
// room; the run that fills its heap says out of memory
// (testdata/hostile/promise-flood.js, through the engine).
func TestAGetterThatThrowsNothingIsNotOutOfMemory(t *testing.T) {
	p, err := Compile("wf.js", strings.Replace(okScript, `const n = (state?.n ?? 0) + 1`, `const e = new Error("x"); Object.defineProperty(e, "message", { get() { throw undefined } }); throw e`, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	_, err = p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
		Tools: map[string][]string{"files": {"read"}}, Limits: Limits{Timeout: 10 * time.Second, MemoryLimit: 64 << 20}})
	if err == nil || !strings.Contains(err.Error(), "could not be read (a getter or a Proxy threw: undefined)") || strings.Contains(err.Error(), "out of memory") {
		t.Fatalf("got %v", err)
	}
}
