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
