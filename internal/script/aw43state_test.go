package script

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// TestAWasmInstanceCarriesNothingToTheNextInvocation (aw43's attack): an
// invocation that ends cleanly leaves its instance to the next one of the
// same workflow; what it wrote to globals, to the global object's
// properties, to the built-ins, and through a promise left pending, must
// not be seen there.
func TestAWasmInstanceCarriesNothingToTheNextInvocation(t *testing.T) {
	t.Setenv(isolationEnv, "wasm")
	body := `
      if (state?.write) {
        try { globalThis.leak = 1 } catch (e) {}
        try { Object.prototype.polluted = 1 } catch (e) {}
        try { Array.prototype.push = () => 0 } catch (e) {}
        try { JSON.parse = () => "forged" } catch (e) {}
        try { counter = (typeof counter === "number" ? counter : 0) + 1 } catch (e) {}
        Promise.resolve().then(() => { try { globalThis.late = 1 } catch (e) {} })
        return {}
      }
      const a = []; a.push(1)
      return { leak: typeof leak, late: typeof late, polluted: ({}).polluted ?? null, push: a.length, parse: JSON.parse("1"), counter: typeof counter }`
	p := compile(t, handlerScript(body))
	defer p.Release()
	inv := func(arg string) (Outcome, error) {
		return p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(arg)},
			Tools: map[string][]string{"files": {"write"}}, Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil },
			Limits: Limits{Timeout: time.Minute, MemoryLimit: 32 << 20}})
	}
	if _, err := inv(`{"write":true}`); err != nil && !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("the writing invocation: %v", err)
	}
	if Default().idleVMs.count(func(v *sandboxVM) bool { return v.prog == p && v.wasm != nil }) != 1 {
		t.Fatal("the writing invocation left no instance idle: the next one would not reuse it")
	}
	o, err := inv(`null`)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"leak":"undefined","late":"undefined","polluted":null,"push":1,"parse":1,"counter":"undefined"}`; string(o.Value) != want {
		t.Fatalf("the next invocation saw %s, want %s", o.Value, want)
	}
}

// TestAnIdleWasmInstanceHoldsLittleMemory (aw43's attack): linear memory
// never shrinks, so an instance kept idle after an invocation that
// allocated tens of MiB (and let them go) held them in keep's process for
// as long as it stayed idle: 48 idle instances of workflows that each
// once read a big answer held 48 × their memory limit. Such an instance is
// now closed instead of kept; the next invocation makes a new one. Before
// the fix it stayed idle at 32 MiB (checked).
func TestAnIdleWasmInstanceHoldsLittleMemory(t *testing.T) {
	t.Setenv(isolationEnv, "wasm")
	p := compile(t, handlerScript(`
      if (state?.big) { let a = []; for (let i = 0; i < 30; i++) a.push(new Uint8Array(1 << 20).fill(1)); a = null }
      return { ok: true }`))
	defer p.Release()
	inv := func(arg string) {
		t.Helper()
		o, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(arg)},
			Tools: map[string][]string{"files": {"write"}}, Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil },
			Limits: Limits{Timeout: time.Minute, MemoryLimit: 64 << 20}})
		if err != nil || string(o.Value) != `{"ok":true}` {
			t.Fatalf("%s: %s, %v", arg, o.Value, err)
		}
	}
	idle := func() (n int, biggest uint32) {
		Default().idleVMs.count(func(v *sandboxVM) bool {
			if v.prog == p && v.wasm != nil {
				n++
				biggest = max(biggest, v.wasm.MemorySize())
			}
			return false
		})
		return
	}
	inv(`null`)
	if n, size := idle(); n != 1 || size > wasmIdleMemory {
		t.Fatalf("after a small invocation: %d idle instances, the biggest of %d bytes", n, size)
	}
	inv(`{"big":true}`)
	if _, size := idle(); size > wasmIdleMemory {
		t.Fatalf("an idle instance holds %d MiB of linear memory (at most %d MiB is kept)", size>>20, wasmIdleMemory>>20)
	}
	inv(`null`)
}

// TestAnIdleInstanceStopReachedIsNotReused (aw43's attack): Runtime.Stop
// ranges over the instances whose calls are under way, and one of them
// can end and go back to the idle pool while it does (the pool took it
// back before the busy set let it go); Instance.Stop then marks an idle
// instance, whose next call stops at once. After Resume, the workflow's
// next invocation took it and failed "ran longer than its time limit"
// without running (checked before the fix). Here the stale Stop is made
// directly on the idle instance.
func TestAnIdleInstanceStopReachedIsNotReused(t *testing.T) {
	t.Setenv(isolationEnv, "wasm")
	rt := NewRuntime()
	defer rt.Close()
	p := compile(t, handlerScript(`return { ok: true }`))
	defer p.Release()
	inv := func() (Outcome, error) {
		return p.Invoke(Invocation{Runtime: rt, Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
			Tools: map[string][]string{"files": {"write"}}, Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil },
			Limits: Limits{Timeout: time.Minute, MemoryLimit: 32 << 20}})
	}
	if _, err := inv(); err != nil {
		t.Fatal(err)
	}
	n := rt.idleVMs.count(func(v *sandboxVM) bool {
		if v.prog == p && v.wasm != nil {
			v.wasm.Stop() // what a Stop ranging over the busy set does late
			return true
		}
		return false
	})
	if n != 1 {
		t.Fatalf("%d idle instances, want 1", n)
	}
	if o, err := inv(); err != nil || string(o.Value) != `{"ok":true}` {
		t.Fatalf("the next invocation: %s, %v", o.Value, err)
	}
}
