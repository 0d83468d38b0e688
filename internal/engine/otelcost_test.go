package engine

import (
	"context"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testotlp"
)

// traceOneRun makes the spans of one consumer run with one write, as the
// engine makes them: the run, prepare, mutate with its call, next.
func traceOneRun(e *Engine, m *connector.Method, call connector.Call, res connector.Result) {
	x := &runExec{e: e, ctx: context.Background(), run: &kt.Run{ID: "01a21230-b146-7df0-bf6b-ced30f41d3b7", Workflow: "orders", Handler: "ship",
		HandlerType: kt.HandlerConsumer, Version: 1, Status: kt.StatusCommitted, Phase: kt.PhaseCommitted}}
	x.startRun()
	p := x.startPhase(string(phasePrepare))
	x.noteInputs("01a21230-b146-7df0-bf6b-000000000001")
	p.end(x)
	p = x.startPhase(string(phaseMutate))
	x.mutationEvent("http.request", "in_flight")
	_, span := x.startCall(x.ctx, "call", "http", m.Name)
	endCall(span, m, call, res)
	p.end(x)
	p = x.startPhase(string(phaseNext))
	p.end(x)
	x.endRun(nil)
}

// BenchmarkRunSpans is what tracing adds to one run in keep's process:
// "off" is keep without [otel] (no tracer: nothing is made), "on" the
// SDK's batcher exporting by OTLP/HTTP to a receiver that takes the spans
// undecoded (docs/performance.md).
func BenchmarkRunSpans(b *testing.B) {
	m := &connector.Method{Name: "request", Kind: connector.KindMutate}
	call := connector.Call{Args: map[string]any{"method": "POST", "url": "http://127.0.0.1:1/orders"}}
	res := connector.Result{Outcome: connector.OutcomeApplied}
	b.Run("off", func(b *testing.B) {
		e := &Engine{}
		b.ReportAllocs()
		cpu := processCPU(b)
		for b.Loop() {
			traceOneRun(e, m, call, res)
		}
		b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/float64(b.N), "cpu-ns/run")
	})
	b.Run("on", func(b *testing.B) {
		col := testotlp.NewDiscarding()
		defer col.Close()
		exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(col.URL+"/v1/traces"))
		if err != nil {
			b.Fatal(err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
		e := &Engine{tracer: tp.Tracer("keep")}
		b.ReportAllocs()
		cpu := processCPU(b)
		for b.Loop() {
			traceOneRun(e, m, call, res)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The exports' cost counts too (the batcher's goroutine, and the
		// receiver's reading, which a collector of its own would not add).
		if err := tp.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/float64(b.N), "cpu-ns/run")
		if col.Requests() == 0 {
			b.Fatal("no export reached the receiver")
		}
	})
}

// processCPU is the CPU time the process has used (user and system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Without a tracer a run's spans cost nothing: not one allocation.
func TestNoTracerAllocatesNothing(t *testing.T) {
	m := &connector.Method{Name: "request", Kind: connector.KindMutate}
	call := connector.Call{Args: map[string]any{"method": "POST"}}
	res := connector.Result{Outcome: connector.OutcomeApplied}
	e := &Engine{}
	x := &runExec{}
	if n := testing.AllocsPerRun(100, func() {
		*x = runExec{e: e, ctx: context.Background(), run: &kt.Run{}}
		x.startRun()
		p := x.startPhase(string(phaseMutate))
		x.noteInputs("in")
		x.mutationEvent("http.request", "in_flight")
		_, span := x.startCall(x.ctx, "call", "http", m.Name)
		endCall(span, m, call, res)
		x.phaseFailed(kt.ClassLogic, "boom")
		p.end(x)
		x.endRun(nil)
	}); n > 1 {
		// The one allocation is the test's own &kt.Run{}.
		t.Errorf("%v allocations per run without a tracer", n)
	}
}
