package wasmjs

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"
)

// BenchmarkWasmHandlerCall measures one handler call in a warm instance:
// BenchmarkHandlerCall's handler (internal/script), JSON in, one host
// call, JSON out, in keep's own process. Compare with
// go test -bench BenchmarkHandlerCall ./internal/script (the worker hop)
// and the same with KEEP_SANDBOX=in-process.
func BenchmarkWasmHandlerCall(b *testing.B) {
	in := instance(b, 64<<20, readHost, handlerScript)
	arg := json.RawMessage(`{"n":1}`)
	ctx := context.Background()
	cpuPer(b, "call", func() {
		out, err := in.Call(ctx, "handler", arg, 5*time.Second)
		if err != nil || string(out) != `{"n":2,"content":"hello"}` {
			b.Fatalf("%s, %v", out, err)
		}
	})
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
	arg := json.RawMessage(`{"n":1}`)
	ctx := context.Background()
	cpuPer(b, "call", func() {
		out, err := in.Call(ctx, "handler", arg, 5*time.Second)
		if err != nil || string(out) != `{"n":2,"content":"hello"}` {
			b.Fatalf("%s, %v", out, err)
		}
		if err := in.Restore(snap); err != nil {
			b.Fatal(err)
		}
	})
	b.ReportMetric(float64(len(snap))/(1<<20), "MiB/snapshot")
}
