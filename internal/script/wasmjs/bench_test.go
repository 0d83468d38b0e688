package wasmjs

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"modernc.org/quickjs"
)

// BenchmarkWasmHandlerCall measures one handler call in a warm instance:
// BenchmarkHandlerCall's handler (internal/script), JSON in, one host
// call, JSON out, in keep's own process. Compare with
// go test -bench BenchmarkHandlerCall ./internal/script (the worker hop)
// and the same with KEEP_SANDBOX=in-process.
func BenchmarkWasmHandlerCall(b *testing.B) {
	in := instance(b, 64<<20, readHost, handlerScript)
	cpuPer(b, "call", func() { callHandler(b, in) })
}

// callHandler calls handlerScript's handler once, checking what it returns.
func callHandler(b *testing.B, in *Instance) {
	out, err := in.Call(context.Background(), "handler", json.RawMessage(`{"n":1}`), 5*time.Second)
	if err != nil || string(out) != `{"n":2,"content":"hello"}` {
		b.Fatalf("%s, %v", out, err)
	}
}

// BenchmarkWasmInstance measures what a workflow's instance costs to make:
// a module instance of the compiled interpreter, QuickJS's runtime and
// context, the handler's script evaluated, and the instance closed. It
// reports the linear memory an instance holds after its first call.
func BenchmarkWasmInstance(b *testing.B) {
	e := engine(b, 64<<20)
	ctx := context.Background()
	var size uint32
	cpuPer(b, "instance", func() {
		in, err := e.NewInstance(ctx, readHost)
		if err != nil {
			b.Fatal(err)
		}
		if err := in.Eval(ctx, "wf.js", handlerScript, 5*time.Second); err != nil {
			b.Fatal(err)
		}
		if _, err := in.Call(ctx, "handler", json.RawMessage(`null`), 5*time.Second); err != nil {
			b.Fatal(err)
		}
		size = in.MemorySize()
		in.Close(ctx)
	})
	b.ReportMetric(float64(size)/(1<<20), "MiB/instance")
}

// cpuPer runs run once, then b.N times, and reports this process's CPU per
// run.
func cpuPer(b *testing.B, what string, run func()) {
	run()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		run()
	}
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/"+what)
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWasmHandlerCallRestored is BenchmarkWasmHandlerCall with the
// instance's memory put back to its snapshot after each call: what
// invocations that share nothing cost in one instance.
func BenchmarkWasmHandlerCallRestored(b *testing.B) {
	in := instance(b, 64<<20, readHost, handlerScript)
	snap := in.Snapshot()
	cpuPer(b, "call", func() {
		callHandler(b, in)
		if err := in.Restore(snap); err != nil {
			b.Fatal(err)
		}
	})
	b.ReportMetric(float64(len(snap))/(1<<20), "MiB/snapshot")
}

// loopScript is plain JavaScript work: a loop of arithmetic and property
// reads, no host call, no allocation.
const loopScript = `function loop() { let s = 0; const o = { a: 1 }; for (let i = 0; i < 300000; i++) { s += i * o.a } return s }`

// BenchmarkLoopWasm runs loopScript in an instance as keep runs it: the
// instrumented module, which tests keep_stop at every loop header and
// recursive function's entry. BenchmarkLoopWasmWazeroCheck runs the module
// as built under wazero's WithCloseOnContextDone (an exit to Go at every
// back-edge: issue 43's first version), BenchmarkLoopWasmUnchecked with no
// check at all, to show what each costs; BenchmarkLoopModernc runs the same
// in modernc.org/quickjs (what the sandbox workers run), CPU per loop in
// each.
func BenchmarkLoopWasm(b *testing.B) { benchLoop(b, stopInline) }

func BenchmarkLoopWasmWazeroCheck(b *testing.B) { benchLoop(b, stopByWazero) }

func BenchmarkLoopWasmUnchecked(b *testing.B) { benchLoop(b, stopNever) }

func benchLoop(b *testing.B, stop stopBy) {
	e, err := newEngine(context.Background(), 64<<20, stop)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(context.Background())
	in, err := e.NewInstance(context.Background(), nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := in.Eval(context.Background(), "loop.js", loopScript, time.Minute); err != nil {
		b.Fatal(err)
	}
	cpuPer(b, "loop", func() {
		if out, err := in.Call(context.Background(), "loop", json.RawMessage(`null`), time.Minute); err != nil || string(out) != "44999850000" {
			b.Fatalf("%s, %v", out, err)
		}
	})
}

func BenchmarkLoopModernc(b *testing.B) {
	vm, err := quickjs.NewVM()
	if err != nil {
		b.Fatal(err)
	}
	defer vm.Close()
	if _, err := vm.Eval(loopScript, quickjs.EvalGlobal); err != nil {
		b.Fatal(err)
	}
	cpuPer(b, "loop", func() {
		if _, err := vm.Eval("loop()", quickjs.EvalGlobal); err != nil {
			b.Fatal(err)
		}
	})
}
