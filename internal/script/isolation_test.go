package script

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// A VM serves many invocations of one script version (vmpool.go). These
// tests try to carry something from one invocation into the next, each in a
// way a script could do by accident or on purpose, and check that the next
// invocation starts clean, or that the attempt fails where it is made.

func isolationScript(body string) string {
	return `
let counter = 0
const cache = new Map()
export default Keep.workflow({
  name: "iso",
  topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "5m" }, handler: async (ctx, state) => {
` + body + `
  } } },
})`
}

func invokeN(t *testing.T, p *Program, n int) []string {
	t.Helper()
	var out []string
	for i := 0; i < n; i++ {
		o, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler",
			Args: []json.RawMessage{json.RawMessage(`null`)}, Tools: map[string][]string{"files": {"read"}},
			Limits: Limits{Timeout: 5 * time.Second, MemoryLimit: 32 << 20},
			Host:   func(m string, a json.RawMessage) (json.RawMessage, error) { return nil, nil }})
		if err != nil {
			out = append(out, "error: "+err.Error())
			continue
		}
		out = append(out, string(o.Value))
	}
	return out
}

func TestInvocationsDoNotShareState(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		body string
		want string // every invocation's result, or a substring of every invocation's error
	}{
		"top-level let":        {`counter++; return { counter }`, `{"counter":1}`},
		"top-level Map":        {`cache.set(cache.size, 1); return { size: cache.size }`, `{"size":1}`},
		"globalThis property":  {`globalThis.seen = (globalThis.seen || 0) + 1; return { seen: globalThis.seen }`, "error: producer p: handler threw TypeError"},
		"undeclared global":    {`leaked = 1; return {}`, "'leaked' is not defined"},
		"built-in prototype":   {`Array.prototype.mine = 1; return {}`, "frozen"},
		"built-in static":      {`Math.seen = true; return {}`, "frozen"},
		"replace a built-in":   {`JSON.parse = () => 1; return {}`, "frozen"},
		"hidden intrinsic":     {`Object.getPrototypeOf([][Symbol.iterator]()).mine = 1; return {}`, "frozen"},
		"generator prototype":  {`Object.getPrototypeOf(function* () {}).mine = 1; return {}`, "frozen"},
		"Keep":                 {`Keep.extra = 1; return {}`, "frozen"},
		"console":              {`console.log = () => {}; return {}`, "frozen"},
		"weak references gone": {`return { weakRef: typeof WeakRef, registry: typeof FinalizationRegistry }`, `{"weakRef":"undefined","registry":"undefined"}`},
		// The override mistake of frozen prototypes is avoided for what code commonly shadows.
		"error subclass name": {`class MyError extends Error { constructor(m) { super(m); this.name = "MyError" } }
			const e = new MyError("x"); return { name: e.name, str: String(e) }`, `{"name":"MyError","str":"MyError: x"}`},
		"own toString":                         {`const o = { a: 1 }; o.toString = () => "custom"; return { s: String(o) }`, `{"s":"custom"}`},
		"prototype assignment of a user class": {`function A() {}; A.prototype.hello = () => "hi"; return { h: new A().hello() }`, `{"h":"hi"}`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := compile(t, isolationScript(c.body))
			defer p.Release()
			for i, got := range invokeN(t, p, 4) {
				if strings.HasPrefix(c.want, "{") {
					if got != c.want {
						t.Fatalf("invocation %d returned %s, want %s (state carried over from an earlier invocation?)", i+1, got, c.want)
					}
				} else if !strings.Contains(got, c.want) {
					t.Fatalf("invocation %d: %s, want an error containing %q", i+1, got, c.want)
				}
			}
		})
	}
}

// invokeHereN is invokeN in this process's VM pool, which the VM-pool tests inspect.
func invokeHereN(t *testing.T, p *Program, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		_, _ = p.invokeHere(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler",
			Args: []json.RawMessage{json.RawMessage(`null`)}, Tools: map[string][]string{"files": {"read"}},
			Limits: Limits{Timeout: 5 * time.Second, MemoryLimit: 32 << 20},
			Host:   func(m string, a json.RawMessage) (json.RawMessage, error) { return nil, nil }})
	}
}

func TestVMIsReusedOnlyAfterACleanEnd(t *testing.T) {
	p := compile(t, isolationScript(`return { ok: true }`))
	defer p.Release()
	invokeHereN(t, p, 1)
	if n := idleFor(p); n != 1 {
		t.Fatalf("after a clean invocation, %d idle VMs for the program, want 1", n)
	}
	bad := compile(t, isolationScript(`throw new Error("no")`))
	defer bad.Release()
	invokeHereN(t, bad, 2)
	if n := idleFor(bad); n != 0 {
		t.Fatalf("after failed invocations, %d idle VMs for the program, want 0 (a VM is reused only after a clean end)", n)
	}
	looping := compile(t, isolationScript(`for (;;) {}`))
	defer looping.Release()
	if _, err := looping.invokeHere(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
		Limits: Limits{Timeout: 50 * time.Millisecond, MemoryLimit: 32 << 20}, Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil }}); err == nil {
		t.Fatal("an endless loop returned")
	}
	if n := idleFor(looping); n != 0 {
		t.Fatalf("after a timeout, %d idle VMs, want 0", n)
	}
}

func idleFor(p *Program) int {
	return std.idleVMs.count(func(v *sandboxVM) bool { return v.prog == p })
}
