// Package wasmjs runs scripts in QuickJS compiled to WebAssembly, inside
// keep's own process, by wazero (issue 43): a handler call without the hop
// to a worker process, still isolated.
//
//   - Each workflow gets an Instance: a module instance of its own, with its
//     own linear memory. Nothing in one instance can address another's memory
//     or keep's: the interpreter's every load and store is bounds-checked
//     against its own linear memory by wazero, whatever bug QuickJS has.
//   - The linear memory is bounded (Engine's memory limit, in 64 KiB pages):
//     a script that allocates until it can no more fails its call, whatever
//     it catches, and keep's heap is not touched.
//   - A call runs under a time limit enforced from outside: the module keep
//     compiles is quickjs.wasm instrumented (instrument.go) with a test of a
//     global, keep_stop, at every loop header and at the entry of every
//     function that can recurse; keep sets it at the deadline and the
//     module traps at its next check. So a loop inside a built-in (a regex,
//     a sort's comparator, a plain while(true)) is stopped without the
//     script's cooperation. The instance is closed then: the next call
//     needs a new one.
//   - The only way out is the import keep.host, answered by the HostFunc the
//     instance was made with.
//
// quickjs.wasm is built by build/build.sh from third_party/quickjs (MIT) and
// build/keep_wasm.c with Debian's WASI toolchain; it is committed so that go
// build needs no C toolchain.
package wasmjs

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

//go:embed quickjs.wasm
var quickjsWasm []byte

// pageSize is WebAssembly's page: linear memory grows by it.
const pageSize = 64 << 10

// stackLimit bounds the script's recursion (QuickJS's own check, below the
// 1 MiB of C stack build.sh links in): deep recursion is a RangeError the
// script sees, not a crash.
const stackLimit = 768 << 10

// HostFunc answers the script's __keep_host(method, json): the JSON it
// returns is what the script gets; an error is thrown in the script with
// its message.
type HostFunc func(method string, args json.RawMessage) (json.RawMessage, error)

// Engine is the compiled interpreter and the runtime its instances run in.
// Compiling takes seconds; making an Instance from it does not.
type Engine struct {
	rt          wazero.Runtime
	compiled    wazero.CompiledModule
	memoryLimit int64
	stop        stopBy
}

// cache holds the machine code wazero compiled quickjs.wasm to, shared by
// every Engine of the process (a second memory limit does not compile
// again) and kept in the user's cache directory (keep/wasm, 0700) for the
// processes after this one: compiling takes seconds of CPU, reading it back
// milliseconds. wazero names its entries by its version, the platform and
// the module's hash, writes them whole (a temporary file renamed), and
// checks them when it reads them. Without a cache directory, the cache is
// the process's alone.
var (
	cacheMu sync.Mutex
	cache   wazero.CompilationCache
)

func compilationCache() wazero.CompilationCache {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if cache != nil {
		return cache
	}
	cache = wazero.NewCompilationCache()
	if dir, err := os.UserCacheDir(); err == nil {
		dir = filepath.Join(dir, "keep", "wasm")
		if os.MkdirAll(dir, 0o700) == nil {
			if c, err := wazero.NewCompilationCacheWithDir(dir); err == nil {
				cache = c
			}
		}
	}
	return cache
}

// instrumented is quickjsWasm with the stop checks (instrument.go), made
// once per process (tens of milliseconds).
var instrumented = sync.OnceValues(func() ([]byte, error) { return instrument(quickjsWasm) })

// NewEngine compiles the interpreter for instances whose linear memory is at
// most memoryLimit bytes (rounded down to whole pages; at least 4 MiB).
func NewEngine(ctx context.Context, memoryLimit int64) (*Engine, error) {
	return newEngine(ctx, memoryLimit, stopInline)
}

// stopBy is how a call is stopped at its time limit.
type stopBy int

const (
	// stopInline: the instrumented module's own checks of keep_stop,
	// which keep sets at the deadline (what keep runs).
	stopInline stopBy = iota
	// stopByWazero: the module as clang built it, under wazero's
	// WithCloseOnContextDone, which leaves the compiled code at every
	// function entry and loop back-edge to look at the context (what
	// issue 43's first version ran: 6x slower JavaScript).
	stopByWazero
	// stopNever: the module as built, nothing stops a loop the
	// interpreter does not poll in. Only to measure what a check costs
	// and to show that the instrumentation is what stops such a loop.
	stopNever
)

func newEngine(ctx context.Context, memoryLimit int64, stop stopBy) (*Engine, error) {
	if memoryLimit < 4<<20 {
		return nil, fmt.Errorf("wasmjs: a memory limit of %d bytes is too small for the interpreter: give at least 4 MiB", memoryLimit)
	}
	pages := memoryLimit / pageSize
	if pages > 65536 {
		pages = 65536
	}
	code := quickjsWasm
	if stop == stopInline {
		var err error
		if code, err = instrumented(); err != nil {
			return nil, err
		}
	}
	cfg := wazero.NewRuntimeConfig().
		WithCloseOnContextDone(stop == stopByWazero).
		WithMemoryLimitPages(uint32(pages)).
		WithCompilationCache(compilationCache())
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("wasmjs: WASI: %w", err)
	}
	_, err := rt.NewHostModuleBuilder("keep").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostCall),
		[]api.ValueType{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).Export("host").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostTake),
		[]api.ValueType{api.ValueTypeI32}, nil).Export("host_take").
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(interrupted),
		nil, []api.ValueType{api.ValueTypeI32}).Export("interrupted").
		Instantiate(ctx)
	if err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("wasmjs: host module: %w", err)
	}
	compiled, err := rt.CompileModule(ctx, code)
	if err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("wasmjs: compiling quickjs.wasm: %w", err)
	}
	return &Engine{rt: rt, compiled: compiled, memoryLimit: pages * pageSize, stop: stop}, nil
}

// Close ends the engine and every instance made from it.
func (e *Engine) Close(ctx context.Context) error { return e.rt.Close(ctx) }

// Instance is one workflow's interpreter: a runtime, a context, and the
// globals its scripts made. It is used by one goroutine at a time.
type Instance struct {
	mod                                 api.Module
	alloc, free, eval, call, outP, outL api.Function
	host                                HostFunc
	apply, jobs, oom                    api.Function
	pending                             []byte // the host's answer, until host_take
	interrupt                           bool   // Interrupt was called: QuickJS stops the script
	dead                                error  // why the instance was closed

	// stop is the module's keep_stop (nil for an engine not stopInline).
	// stopMu orders its writes: the deadline's timer sets it while the
	// module runs on the caller's goroutine; the caller clears it, if the
	// timer fired after the call's last check, once the call returned.
	stop    api.MutableGlobal
	stopMu  sync.Mutex
	armed   bool // a call is running under its time limit
	stopped bool // the time limit set keep_stop during the current call
	halted  bool // Stop was called: every call stops at once
}

// ErrClosed is wrapped by every call on an instance a former call ended
// (its time limit, a trap): the caller makes a new one.
var ErrClosed = errors.New("wasmjs: the instance was closed")

// ScriptError is an exception the script threw (or QuickJS threw in it, as
// out of memory or too much recursion): the instance lives on.
type ScriptError struct{ Message string }

func (e *ScriptError) Error() string { return e.Message }

// TimeoutError is a call stopped at its time limit; the instance is closed.
type TimeoutError struct{ Limit time.Duration }

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("the script ran past its time limit of %s and was stopped", e.Limit)
}

// NewInstance makes an instance of its own for one workflow: its linear
// memory is bounded by the engine's limit, and its QuickJS heap by a little
// less, so that QuickJS throws out of memory before malloc fails.
func (e *Engine) NewInstance(ctx context.Context, host HostFunc) (*Instance, error) {
	return e.NewInstanceWithHeap(ctx, host, e.memoryLimit-e.memoryLimit/8-2<<20)
}

// NewInstanceWithHeap is NewInstance with QuickJS's heap bounded by heap
// bytes (keep's memory limit, as the worker's VMs have it); the linear
// memory's bound stands behind it.
func (e *Engine) NewInstanceWithHeap(ctx context.Context, host HostFunc, heap int64) (*Instance, error) {
	if heap <= 0 || heap > e.memoryLimit {
		return nil, fmt.Errorf("wasmjs: a heap of %d bytes does not fit a linear memory of %d", heap, e.memoryLimit)
	}
	// An anonymous module: any number of instances, none reachable by name.
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize").WithSysWalltime().WithSysNanotime()
	mod, err := e.rt.InstantiateModule(ctx, e.compiled, cfg)
	if err != nil {
		return nil, fmt.Errorf("wasmjs: instantiating: %w", err)
	}
	in := &Instance{mod: mod, host: host,
		alloc: mod.ExportedFunction("keep_alloc"), free: mod.ExportedFunction("keep_free"),
		eval: mod.ExportedFunction("keep_eval"), call: mod.ExportedFunction("keep_call"),
		outP: mod.ExportedFunction("keep_out_ptr"), outL: mod.ExportedFunction("keep_out_len"),
		apply: mod.ExportedFunction("keep_apply"), jobs: mod.ExportedFunction("keep_jobs"), oom: mod.ExportedFunction("keep_oom")}
	if e.stop == stopInline {
		g, ok := mod.ExportedGlobal(stopExport).(api.MutableGlobal)
		if !ok {
			mod.Close(ctx)
			return nil, errors.New("wasmjs: the instrumented module exports no mutable " + stopExport)
		}
		in.stop = g
	}
	r, err := mod.ExportedFunction("keep_init").Call(ctx, uint64(heap), stackLimit)
	if err != nil {
		mod.Close(ctx)
		return nil, fmt.Errorf("wasmjs: starting QuickJS: %w", err)
	}
	if r[0] != 0 {
		mod.Close(ctx)
		return nil, errors.New("wasmjs: starting QuickJS: out of memory")
	}
	return in, nil
}

// Close frees the instance's memory.
func (in *Instance) Close(ctx context.Context) error {
	if in.dead == nil {
		in.dead = ErrClosed
	}
	return in.mod.Close(ctx)
}

// Snapshot copies the instance's linear memory: Restore puts it back, so
// that each invocation starts from the state the script's evaluation left
// (what one invocation leaves in globals, the next does not see).
func (in *Instance) Snapshot() []byte {
	b, _ := in.mod.Memory().Read(0, in.mod.Memory().Size())
	return append([]byte(nil), b...)
}

// Restore puts back the memory Snapshot copied, between calls. Pages the
// instance grew since stay, zeroed: linear memory cannot shrink, and the
// allocator, restored too, treats them as not its own yet.
func (in *Instance) Restore(snap []byte) error {
	if in.dead != nil {
		return fmt.Errorf("%w: %w", ErrClosed, in.dead)
	}
	mem := in.mod.Memory()
	if !mem.Write(0, snap) {
		return fmt.Errorf("wasmjs: a snapshot of %d bytes does not fit the instance's %d", len(snap), mem.Size())
	}
	if grown := mem.Size() - uint32(len(snap)); grown > 0 {
		rest, _ := mem.Read(uint32(len(snap)), grown)
		clear(rest)
	}
	return nil
}

// OutOfMemory tells whether QuickJS refused an allocation at the heap's
// limit since the last time it was asked, whatever the script caught: the
// caller fails the invocation as out of memory (issue 10 #11).
func (in *Instance) OutOfMemory() bool {
	if in.dead != nil || in.oom == nil {
		return false
	}
	r, err := in.oom.Call(context.Background())
	return err == nil && r[0] != 0
}

// MemorySize is the instance's linear memory now, in bytes.
func (in *Instance) MemorySize() uint32 { return in.mod.Memory().Size() }

// Eval runs source as a global script (its functions and variables stay for
// later calls) within timeout.
func (in *Instance) Eval(ctx context.Context, file, source string, timeout time.Duration) error {
	_, err := in.run(ctx, timeout, in.eval, []byte(source), []byte(file))
	return err
}

// Call calls the global function name with arg (JSON), waits for its
// promise if it returns one, and returns the JSON of its value, within
// timeout.
func (in *Instance) Call(ctx context.Context, name string, arg json.RawMessage, timeout time.Duration) (json.RawMessage, error) {
	out, err := in.run(ctx, timeout, in.call, []byte(name), arg)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(out), nil
}

// Apply calls the global function name with the elements of args (a JSON
// array) as its arguments and returns the JSON of its value, "" for
// undefined; a promise it returns is not waited for (Jobs runs its jobs).
func (in *Instance) Apply(ctx context.Context, name string, args json.RawMessage, timeout time.Duration) (json.RawMessage, error) {
	out, err := in.run(ctx, timeout, in.apply, []byte(name), args)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(out), nil
}

// Jobs runs the pending promise jobs until none is left or max of them ran
// (0: no cap), and returns how many ran; a job that threw ends it with a
// ScriptError.
func (in *Instance) Jobs(ctx context.Context, timeout time.Duration, max int) (int, error) {
	if in.dead != nil {
		return 0, fmt.Errorf("%w: %w", ErrClosed, in.dead)
	}
	cctx, disarm := in.arm(ctx, timeout)
	defer disarm()
	r, err := in.jobs.Call(cctx, uint64(max))
	if err != nil {
		return 0, in.fail(cctx, err, timeout)
	}
	n := int32(uint32(r[0]))
	if n >= 0 {
		return int(n), nil
	}
	out, err := in.out(cctx)
	if err != nil {
		return 0, in.fail(cctx, err, timeout)
	}
	return int(-1 - n), &ScriptError{Message: string(out)}
}

// Interrupt makes the script stop at QuickJS's next check, with an
// exception it cannot catch; called by the host during a call, it stops
// the call. Calls after it are interrupted too, until ClearInterrupt.
func (in *Instance) Interrupt() { in.interrupt = true }

// ClearInterrupt lets calls run again after Interrupt.
func (in *Instance) ClearInterrupt() { in.interrupt = false }

type instanceKey struct{}

// arm starts a call's time limit: the context to call the module with, and
// a function to call once the call returned.
//
// For the instrumented module, the limit is a timer that sets keep_stop
// from its own goroutine while the module runs on the caller's. Why that
// is sound: the module's check is a plain load of the global from the
// module's context in memory, which wazero's compiled code does again at
// every check (a global.get at a loop header or a function entry starts a
// block with more than one predecessor or the function, where wazero's
// frontend has no value of the global to reuse, and its SSA passes move no
// load); the Go memory model does not cover the module's machine code, so
// what makes the store seen is the hardware's cache coherence, which makes
// every store visible to later loads of the same address (amd64 and arm64
// alike) within a bounded time. The store cannot be torn into something
// the check misses: the check tests for non-zero and 1 is written over 0.
// The Go side is race-free: every write of keep_stop is under stopMu, and
// the caller clears a flag set after the module's last check (the call
// ended just at its limit) before the next call.
func (in *Instance) arm(ctx context.Context, timeout time.Duration) (context.Context, func()) {
	cctx, cancel := context.WithTimeout(context.WithValue(ctx, instanceKey{}, in), timeout)
	if in.stop == nil {
		return cctx, cancel
	}
	in.stopMu.Lock()
	in.armed = true
	if in.halted {
		in.stop.Set(1) // Stop came before the call: it stops at once
		in.stopped = true
	}
	in.stopMu.Unlock()
	stopTimer := context.AfterFunc(cctx, in.expire)
	return cctx, func() {
		stopTimer()
		in.stopMu.Lock()
		in.armed = false
		if in.stopped && in.dead == nil {
			in.stop.Set(0)
		}
		in.stopped = false
		in.stopMu.Unlock()
		cancel()
	}
}

// Stop stops the call under way, from another goroutine, at its next
// check, as its time limit would (keep is stopping); the instance is
// closed. Between calls it makes the next call stop at once (Halted).
func (in *Instance) Stop() {
	if in.stop == nil {
		return
	}
	in.stopMu.Lock()
	in.halted = true
	in.stopMu.Unlock()
	in.expire()
}

// Halted tells whether Stop was called on the instance: every call on it
// stops at once, so it is not to be used again.
func (in *Instance) Halted() bool {
	in.stopMu.Lock()
	defer in.stopMu.Unlock()
	return in.halted
}

// expire sets keep_stop if a call is running: its time limit struck.
func (in *Instance) expire() {
	in.stopMu.Lock()
	defer in.stopMu.Unlock()
	if in.armed {
		in.stop.Set(1)
		in.stopped = true
	}
}

// stoppedByLimit tells whether keep_stop was set during the current call.
func (in *Instance) stoppedByLimit() bool {
	in.stopMu.Lock()
	defer in.stopMu.Unlock()
	return in.stopped
}

// run copies a and b into the instance, calls f(a, len, b, len) under the
// time limit and returns what the instance put out.
func (in *Instance) run(ctx context.Context, timeout time.Duration, f api.Function, a, b []byte) ([]byte, error) {
	if in.dead != nil {
		return nil, fmt.Errorf("%w: %w", ErrClosed, in.dead)
	}
	cctx, disarm := in.arm(ctx, timeout)
	defer disarm()
	pa, err := in.put(cctx, a)
	if err != nil {
		return nil, in.fail(cctx, err, timeout)
	}
	pb, err := in.put(cctx, b)
	if err != nil {
		return nil, in.fail(cctx, err, timeout)
	}
	r, err := f.Call(cctx, uint64(pa), uint64(len(a)), uint64(pb), uint64(len(b)))
	if err != nil {
		return nil, in.fail(cctx, err, timeout)
	}
	if _, err := in.free.Call(cctx, uint64(pa)); err != nil {
		return nil, in.fail(cctx, err, timeout)
	}
	if _, err := in.free.Call(cctx, uint64(pb)); err != nil {
		return nil, in.fail(cctx, err, timeout)
	}
	out, err := in.out(cctx)
	if err != nil {
		return nil, in.fail(cctx, err, timeout)
	}
	if r[0] != 0 {
		return nil, &ScriptError{Message: string(out)}
	}
	return out, nil
}

// put copies b into a buffer the instance allocates, with a NUL after it:
// QuickJS's parsers read one byte past the end they are given.
func (in *Instance) put(ctx context.Context, b []byte) (uint32, error) {
	r, err := in.alloc.Call(ctx, uint64(len(b))+1)
	if err != nil {
		return 0, err
	}
	p := uint32(r[0])
	if p == 0 {
		return 0, &ScriptError{Message: "InternalError: out of memory: the instance has no room for the call's input"}
	}
	if !in.mod.Memory().Write(p, b) || !in.mod.Memory().WriteByte(p+uint32(len(b)), 0) {
		return 0, fmt.Errorf("wasmjs: the instance's buffer at %d is outside its memory", p)
	}
	return p, nil
}

// out copies what the instance put out.
func (in *Instance) out(ctx context.Context) ([]byte, error) {
	p, err := in.outP.Call(ctx)
	if err != nil {
		return nil, err
	}
	n, err := in.outL.Call(ctx)
	if err != nil {
		return nil, err
	}
	b, ok := in.mod.Memory().Read(uint32(p[0]), uint32(n[0]))
	if !ok {
		return nil, fmt.Errorf("wasmjs: the instance's answer at %d (%d bytes) is outside its memory", p[0], n[0])
	}
	return append([]byte(nil), b...), nil
}

// fail turns a failure of the instance itself (time limit, trap) into the
// error the caller sees, and marks the instance dead: wazero closed it, or
// its memory can no longer be trusted.
func (in *Instance) fail(ctx context.Context, err error, timeout time.Duration) error {
	var se *ScriptError
	if errors.As(err, &se) {
		return err
	}
	var exit *sys.ExitError
	if in.stoppedByLimit() {
		err = &TimeoutError{Limit: timeout}
	} else if errors.As(err, &exit) && exit.ExitCode() == sys.ExitCodeDeadlineExceeded {
		err = &TimeoutError{Limit: timeout}
	} else if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = &TimeoutError{Limit: timeout}
	} else {
		err = fmt.Errorf("wasmjs: the interpreter failed and its instance was closed: %w", err)
	}
	in.dead = err
	in.mod.Close(context.Background())
	return err
}

// hostCall is the import keep.host(method, len, args, len): it asks the
// instance's HostFunc and keeps the answer for host_take, returning its
// length, or -1 - the length of an error's message.
func hostCall(ctx context.Context, m api.Module, stack []uint64) {
	in, _ := ctx.Value(instanceKey{}).(*Instance)
	mem := m.Memory()
	method, ok1 := mem.Read(uint32(stack[0]), uint32(stack[1]))
	args, ok2 := mem.Read(uint32(stack[2]), uint32(stack[3]))
	var ans []byte
	failed := false
	switch {
	case in == nil || in.mod != m:
		ans, failed = []byte("__keep_host was called outside a call keep made"), true
	case !ok1 || !ok2:
		ans, failed = []byte("__keep_host: its arguments are outside the instance's memory"), true
	case in.host == nil:
		ans, failed = []byte("__keep_host: this instance has no host"), true
	default:
		r, err := in.host(string(method), append(json.RawMessage(nil), args...))
		if err != nil {
			ans, failed = []byte(err.Error()), true
		} else if r == nil {
			ans = []byte("null")
		} else {
			ans = r
		}
	}
	if in != nil {
		in.pending = ans
	}
	n := int32(len(ans))
	if failed {
		n = -1 - n
	}
	stack[0] = api.EncodeI32(n)
}

// hostTake is the import keep.host_take(dst): it copies the answer host
// kept into the instance's buffer at dst.
func hostTake(ctx context.Context, m api.Module, stack []uint64) {
	in, _ := ctx.Value(instanceKey{}).(*Instance)
	if in == nil {
		return
	}
	m.Memory().Write(uint32(stack[0]), in.pending)
	in.pending = nil
}

// interrupted is the import keep.interrupted(): 1 once Interrupt was
// called on the calling instance.
func interrupted(ctx context.Context, m api.Module, stack []uint64) {
	in, _ := ctx.Value(instanceKey{}).(*Instance)
	stack[0] = 0
	if in != nil && in.interrupt {
		stack[0] = 1
	}
}
