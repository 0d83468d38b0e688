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
