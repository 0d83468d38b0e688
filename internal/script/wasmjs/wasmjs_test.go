package wasmjs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// engines are compiled once per memory limit for the package's tests:
// compiling quickjs.wasm takes seconds on a busy machine.
var (
	enginesMu sync.Mutex
	engines   = map[int64]*Engine{}
)

func engine(t testing.TB, limit int64) *Engine {
	t.Helper()
	enginesMu.Lock()
	defer enginesMu.Unlock()
	if e := engines[limit]; e != nil {
		return e
	}
	e, err := NewEngine(context.Background(), limit)
	if err != nil {
		t.Fatal(err)
	}
	engines[limit] = e
	return e
}

func instance(t testing.TB, limit int64, host HostFunc, src string) *Instance {
	t.Helper()
	in, err := engine(t, limit).NewInstance(context.Background(), host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(context.Background()) })
	if err := in.Eval(context.Background(), "wf.js", src, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return in
}

// handlerScript is BenchmarkHandlerCall's producer handler (internal/script
// okScript) as a plain global: one host call, JSON in and out.
const handlerScript = `async function handler(state) {
  const n = (state?.n ?? 0) + 1
  const r = JSON.parse(__keep_host("files.read", JSON.stringify({ path: "x" })))
  return { n, content: r.content }
}`

func readHost(m string, a json.RawMessage) (json.RawMessage, error) {
	if m == "files.read" && string(a) == `{"path":"x"}` {
		return json.RawMessage(`{"content":"hello"}`), nil
	}
	return nil, errors.New("unexpected host call " + m + " " + string(a))
}

func TestAHandlerGetsJSONCallsTheHostAndReturnsJSON(t *testing.T) {
	in := instance(t, 64<<20, readHost, handlerScript)
	out, err := in.Call(context.Background(), "handler", json.RawMessage(`{"n":41}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"n":42,"content":"hello"}` {
		t.Fatalf("got %s", out)
	}
	// A host error is thrown in the script, which can see its message.
	in2 := instance(t, 64<<20, func(string, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("ctx.files.read is not granted")
	}, `function f() { try { __keep_host("files.read", "{}") } catch (e) { return "caught: " + e.message } }`)
	out, err = in2.Call(context.Background(), "f", json.RawMessage(`null`), 10*time.Second)
	if err != nil || string(out) != `"caught: ctx.files.read is not granted"` {
		t.Fatalf("got %s, %v", out, err)
	}
	// A script's own exception is a ScriptError, and the instance lives on.
	in3 := instance(t, 64<<20, nil, `function f(x) { if (x) throw new TypeError("bad " + x); return 1 }`)
	_, err = in3.Call(context.Background(), "f", json.RawMessage(`"input"`), 10*time.Second)
	var se *ScriptError
	if !errors.As(err, &se) || !strings.Contains(se.Message, "TypeError: bad input") {
		t.Fatalf("got %v", err)
	}
	if out, err := in3.Call(context.Background(), "f", json.RawMessage(`0`), 10*time.Second); err != nil || string(out) != "1" {
		t.Fatalf("after an exception: %s, %v", out, err)
	}
}

// TestALoopIsStoppedAtTheTimeLimit: loops the script cannot be asked to
// leave, one inside the regex engine (no JavaScript runs while it
// backtracks), one under Array.prototype.sort, one plain and caught, each
// stopped from outside at the limit. The instance is closed, the caller
// told, and a new instance of the same engine works.
func TestALoopIsStoppedAtTheTimeLimit(t *testing.T) {
	loops := map[string]string{
		"regex backtracking": `function f() { return /^(a|a)*$/.test("a".repeat(64) + "b") }`,
		// A native loop QuickJS polls nothing in: its interrupt handler
		// would never be asked.
		"indexOf over 2^53":   `function f() { return Array.prototype.indexOf.call({ length: 2 ** 53 }, 1) }`,
		"sort's comparator":   `function f() { return [3, 1, 2].sort(() => { for (;;) {} }) }`,
		"caught while(true)":  `function f() { for (;;) { try { while (true) {} } catch (e) {} } }`,
		"string built-ins":    `function f() { let s = "x"; for (;;) { s = s.replace(/x/g, "x") } }`,
		"awaited microtasks":  `async function f() { for (;;) await null }`,
		"a loop in a promise": `function f() { return Promise.resolve().then(() => { for (;;) {} }) }`,
	}
	for name, src := range loops {
		t.Run(name, func(t *testing.T) {
			in := instance(t, 64<<20, nil, src)
			limit := 300 * time.Millisecond
			_, err := in.Call(context.Background(), "f", json.RawMessage(`null`), limit)
			var te *TimeoutError
			if !errors.As(err, &te) || te.Limit != limit || !strings.Contains(err.Error(), "time limit of 300ms") {
				t.Fatalf("got %v, want the time limit", err)
			}
			if _, err := in.Call(context.Background(), "f", json.RawMessage(`null`), limit); !errors.Is(err, ErrClosed) {
				t.Fatalf("a call on the stopped instance: %v, want ErrClosed", err)
			}
			fresh := instance(t, 64<<20, readHost, handlerScript)
			if out, err := fresh.Call(context.Background(), "handler", json.RawMessage(`null`), 10*time.Second); err != nil || string(out) != `{"n":1,"content":"hello"}` {
				t.Fatalf("a new instance after the stop: %s, %v", out, err)
			}
		})
	}
}

// TestAllocationUntilOutOfMemoryFailsTheCallNotKeep: with 16 MiB of linear
// memory, scripts that allocate without end fail their call; one that
// catches every out-of-memory error and goes on is stopped at the time
// limit. The linear memory never passes the limit.
func TestAllocationUntilOutOfMemoryFailsTheCallNotKeep(t *testing.T) {
	const limit = 16 << 20
	bombs := map[string]struct{ src, want string }{
		"strings": {`function f() { const a = []; while (true) a.push("x".repeat(100000) + a.length) }`, "out of memory"},
		"objects": {`function f() { let o = {}; for (;;) o = { o, a: [1, 2, 3] } }`, "out of memory"},
		"arrays":  {`function f() { const a = []; for (;;) a.push(new Array(1e5).fill(1.5)) }`, "out of memory"},
		"buffers": {`function f() { const a = []; for (;;) a.push(new ArrayBuffer(1 << 20)) }`, "out of memory"},
		"caught":  {`function f() { const a = []; for (;;) { try { a.push("y".repeat(1 << 20) + a.length) } catch (e) {} } }`, "time limit"},
	}
	for name, c := range bombs {
		t.Run(name, func(t *testing.T) {
			in := instance(t, limit, nil, c.src)
			// Generous for the bombs QuickJS stops: a busy machine must not
			// turn out of memory into a time limit.
			timeout := time.Minute
			if c.want == "time limit" {
				timeout = 2 * time.Second
			}
			_, err := in.Call(context.Background(), "f", json.RawMessage(`null`), timeout)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			if in.dead == nil && in.MemorySize() > limit {
				t.Fatalf("the instance's memory grew to %d bytes, past its limit of %d", in.MemorySize(), limit)
			}
			if in.dead == nil {
				// Out of memory is the script's error: the instance
				// frees what the script held and answers again.
				in2 := instance(t, limit, readHost, handlerScript)
				if _, err := in2.Call(context.Background(), "handler", json.RawMessage(`null`), 10*time.Second); err != nil {
					t.Fatalf("a new instance next to the bomb: %v", err)
				}
			}
		})
	}
}

// TestTwoInstancesSeeNothingOfEachOther: one workflow's globals, its
// changes to the built-ins and its memory are not the other's.
func TestTwoInstancesSeeNothingOfEachOther(t *testing.T) {
	a := instance(t, 64<<20, nil, `globalThis.secret = "key-of-a"; Object.prototype.leak = "from a"; Array.prototype.push = function () { return "hijacked" }
function look() { return [typeof secret, ({}).leak, [].push(1)] }`)
	b := instance(t, 64<<20, nil, `function look() { return [typeof secret, ({}).leak ?? null, [].push(1)] }`)
	out, err := b.Call(context.Background(), "look", json.RawMessage(`null`), 10*time.Second)
	if err != nil || string(out) != `["undefined",null,1]` {
		t.Fatalf("b sees %s, %v", out, err)
	}
	out, err = a.Call(context.Background(), "look", json.RawMessage(`null`), 10*time.Second)
	if err != nil || string(out) != `["string","from a","hijacked"]` {
		t.Fatalf("a sees %s, %v", out, err)
	}
	// Their memories are apart: a's secret is nowhere in b's bytes.
	mb, _ := b.mod.Memory().Read(0, b.MemorySize())
	ma, _ := a.mod.Memory().Read(0, a.MemorySize())
	if !strings.Contains(string(ma), "key-of-a") || strings.Contains(string(mb), "key-of-a") {
		t.Fatal("a's secret is in b's memory, or not in a's")
	}
	// A host call made in one instance is answered by its own host.
	hostA := func(string, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`"a"`), nil }
	hostB := func(string, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`"b"`), nil }
	ha := instance(t, 64<<20, hostA, `function who() { return __keep_host("who", "{}") }`)
	hb := instance(t, 64<<20, hostB, `function who() { return __keep_host("who", "{}") }`)
	for _, c := range []struct {
		in   *Instance
		want string
	}{{ha, `"\"a\""`}, {hb, `"\"b\""`}, {ha, `"\"a\""`}} {
		if out, err := c.in.Call(context.Background(), "who", json.RawMessage(`null`), 10*time.Second); err != nil || string(out) != c.want {
			t.Fatalf("got %s, %v, want %s", out, err, c.want)
		}
	}
}

// TestARestoredInstanceForgetsTheLastInvocation: with its memory put back
// to the snapshot taken after evaluation, what a call left in globals is
// gone, even after the call grew the memory, and the instance still works.
func TestARestoredInstanceForgetsTheLastInvocation(t *testing.T) {
	in := instance(t, 64<<20, readHost, handlerScript+`
let calls = 0; let hoard = []
function count(grow) { if (grow) for (let i = 0; i < 200; i++) hoard.push("z".repeat(20000) + i); return ++calls }`)
	snap := in.Snapshot()
	for i, grow := range []string{"false", "true", "false", "true"} {
		out, err := in.Call(context.Background(), "count", json.RawMessage(grow), 10*time.Second)
		if err != nil || string(out) != "1" {
			t.Fatalf("call %d after a restore: %s, %v (want 1: nothing of the last call)", i, out, err)
		}
		if err := in.Restore(snap); err != nil {
			t.Fatal(err)
		}
	}
	if len(snap) == int(in.MemorySize()) {
		t.Fatal("the hoard did not grow the memory: the test does not test a restore after growth")
	}
	out, err := in.Call(context.Background(), "handler", json.RawMessage(`{"n":1}`), 10*time.Second)
	if err != nil || string(out) != `{"n":2,"content":"hello"}` {
		t.Fatalf("after restores: %s, %v", out, err)
	}
}

// TestTheTimeLimitIsTheInstrumentations: the stop comes from the checks
// instrument puts in the module, not from the interpreter's cooperation.
// The time limit is made to strike (deterministically: from the host, as
// the timer would) just before a native loop QuickJS polls nothing in; the
// module NewEngine compiles stops at its next check, while the module as
// clang built it, run the same way, goes through the loop to its end.
// Without the pass in NewEngine, this test fails (the call returns -1),
// and TestALoopIsStoppedAtTheTimeLimit hangs until go test's timeout.
func TestTheTimeLimitIsTheInstrumentations(t *testing.T) {
	const src = `function f() { __keep_host("expire", "null"); return Array.prototype.indexOf.call({ length: 2e6 }, 1) }`
	for _, c := range []struct {
		name string
		e    func() *Engine
		want string
	}{
		{"instrumented", func() *Engine { return engine(t, 64<<20) }, "time limit"},
		{"as built", func() *Engine {
			e, err := newEngine(context.Background(), 64<<20, stopNever)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close(context.Background()) })
			return e
		}, "-1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var in *Instance
			in, err := c.e().NewInstance(context.Background(), func(string, json.RawMessage) (json.RawMessage, error) {
				if in.stop != nil {
					in.expire()
				}
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close(context.Background())
			if err := in.Eval(context.Background(), "wf.js", src, time.Minute); err != nil {
				t.Fatal(err)
			}
			out, err := in.Call(context.Background(), "f", json.RawMessage(`null`), time.Hour)
			got := string(out)
			if err != nil {
				got = err.Error()
			}
			if !strings.Contains(got, c.want) {
				t.Fatalf("got %s, want %s", got, c.want)
			}
		})
	}
}

// TestEveryLoopOfTheModuleIsChecked: the module NewEngine compiles has the
// check at the head of each of quickjs.wasm's loops and at the entry of
// each function on a cycle of its call graph, and exports keep_stop.
func TestEveryLoopOfTheModuleIsChecked(t *testing.T) {
	orig, err := decodeModule(quickjsWasm)
	if err != nil {
		t.Fatal(err)
	}
	code, err := instrumented()
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeModule(code)
	if err != nil {
		t.Fatalf("the instrumented module does not decode: %v", err)
	}
	check, err := orig.check()
	if err != nil {
		t.Fatal(err)
	}
	rec := orig.recursive()
	loops, entries := 0, 0
	for i, bd := range m.bodies {
		if len(bd.loops) != len(orig.bodies[i].loops) {
			t.Fatalf("function %d has %d loops, %d before", i, len(bd.loops), len(orig.bodies[i].loops))
		}
		for _, at := range bd.loops {
			if !bytes.HasPrefix(bd.raw[at:], check) {
				t.Fatalf("function %d: the loop at %d has no check", i, at)
			}
			loops++
		}
		if rec[i] {
			if !bytes.HasPrefix(bd.raw[bd.codeStart:], check) {
				t.Fatalf("function %d is recursive and has no check at its entry", i)
			}
			entries++
		}
	}
	if !m.exportsStop {
		t.Fatal("the instrumented module does not export " + stopExport)
	}
	if loops < 1000 || entries < 100 {
		t.Fatalf("%d loops and %d recursive functions: not QuickJS", loops, entries)
	}
	in := instance(t, 64<<20, nil, `function f() { return 1 }`)
	if g, ok := in.mod.ExportedGlobal(stopExport).(api.MutableGlobal); !ok || g.Get() != 0 {
		t.Fatalf("keep_stop is not an exported mutable global at 0: %v", in.mod.ExportedGlobal(stopExport))
	}
}
