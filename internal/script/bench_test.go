package script

import (
	"encoding/json"
	"syscall"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// BenchmarkHandlerCall measures one handler invocation: a fresh VM with the
// memory limit, the prelude and the compiled script loaded, one host call,
// the result checked and returned. The script is compiled once, outside the loop.
// It is the handler BenchmarkWasmHandlerCall calls in a wasm instance.
func BenchmarkHandlerCall(b *testing.B) {
	p, err := Compile("wf.js", okScript)
	if err != nil {
		b.Fatal(err)
	}
	host := func(m string, a json.RawMessage) (json.RawMessage, error) {
		if m == "files.read" {
			return json.RawMessage(`{"content":"hello"}`), nil
		}
		return nil, nil
	}
	inv := Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`{"n":1}`)},
		Tools: map[string][]string{"files": {"read"}}, Host: host, Limits: Limits{Timeout: 5 * time.Second, MemoryLimit: 64 << 20}}
	// cpu-µs/run counts the sandbox workers too: compare with
	// BenchmarkWasmHandlerCall (internal/script/wasmjs, issue 43).
	cpuPerRun(b, func() {
		if _, err := p.Invoke(inv); err != nil {
			b.Fatal(err)
		}
	})
}

// consumerScript is a consumer as keep bench deploys it: prepare peeks one
// event and reserves it, mutate sends one POST.
const consumerScript = `export default Keep.workflow({
  name: "bench", topics: { "in": {} },
  producers: { p: { publishes: ["in"], schedule: { interval: "1d" }, handler: async (ctx, state) => state } },
  consumers: { c: Keep.consumer({ subscribe: ["in"],
    async prepare(ctx) { const [e] = await ctx.peek("in", { limit: 1 }); if (!e) return { reservations: [] }; return { reservations: [{ topic: "in", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "http://127.0.0.1:1/sink/" + p.data.i, json: p.data }) },
  }) },
})`

// BenchmarkConsumerRun measures what the sandbox costs a consumer run: its
// two handler calls (prepare with one ctx.peek answered ahead, mutate with
// one write taken over by the host without being asked) as the engine makes
// them, without the engine. cpu-µs/run
// is the CPU of this process and of its sandbox workers; run it with
// KEEP_SANDBOX=in-process and without to see what the workers add (issue 25).
func BenchmarkConsumerRun(b *testing.B) {
	p, err := Compile("wf.js", consumerScript)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Release()
	lim := Limits{Timeout: 5 * time.Second, MemoryLimit: 64 << 20}
	tools := map[string][]string{"http": {"request"}}
	page := json.RawMessage(`[{"messageId":"1","payload":{"i":1}}]`)
	peek := func(m string, a json.RawMessage) (json.RawMessage, error) {
		if m == "peek" {
			return page, nil
		}
		return nil, nil
	}
	// The engine answers the peek ahead: its step's plan read the page.
	answers := []Answer{{Method: "peek", Args: json.RawMessage(`{"topic":"in","limit":1}`), Value: page}}
	write := func(m string, a json.RawMessage) (json.RawMessage, error) { return nil, ErrSuspend }
	run := func() {
		o, err := p.Invoke(Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "prepare", Args: []json.RawMessage{json.RawMessage(`null`)}, Tools: tools, Host: peek, Limits: lim, Answers: answers})
		if err != nil {
			b.Fatal(err)
		}
		o, err = p.Invoke(Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "mutate", Args: []json.RawMessage{o.Value}, Tools: tools, Host: write, Limits: lim, Writes: httpWrites})
		if err != nil || !o.Suspended {
			b.Fatalf("mutate: %v %+v", err, o)
		}
	}
	cpuPerRun(b, run)
}

// cpuPerRun runs run once (the worker and its VM), then b.N times, and
// reports the CPU of this process and its sandbox workers per run.
func cpuPerRun(b *testing.B, run func()) {
	run()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPUTime() + WorkerCPU()
	for i := 0; i < b.N; i++ {
		run()
	}
	b.ReportMetric(float64((processCPUTime()+WorkerCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/run")
}

// processCPUTime is this process's user + system CPU time.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkARefusedWrite measures a consumer's mutate whose write keep
// refuses (a grant missing): the write is taken over in the worker without
// asking, and keep's refusal ends the invocation. cpu-µs/run counts this
// process and its sandbox workers, so a worker started in place of one
// killed is in it.
func BenchmarkARefusedWrite(b *testing.B) {
	p, err := Compile("wf.js", consumerScript)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Release()
	refused := &kt.Error{Class: kt.ClassPermission, Message: "ctx.http.request POST 127.0.0.1:1 is not granted"}
	inv := Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "mutate", Args: []json.RawMessage{json.RawMessage(`{"data":{"i":1}}`)},
		Tools: map[string][]string{"http": {"request"}}, Limits: Limits{Timeout: 5 * time.Second, MemoryLimit: 64 << 20}, Writes: httpWrites,
		Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, refused }}
	run := func() {
		if _, err := p.Invoke(inv); err != refused {
			b.Fatalf("mutate: %v", err)
		}
	}
	cpuPerRun(b, run)
}
