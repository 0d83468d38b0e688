package script

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script/wasmjs"
	"modernc.org/quickjs"
)

// Wasm tells whether handlers run in QuickJS compiled to WebAssembly in
// keep's own process (the default since issue 43: docs/design.md, "Scripts
// without a process hop (issue 43)") instead of sandbox workers.
func Wasm() bool { return sandbox() == SandboxWasm }

// The sandboxes [policy] sandbox chooses between.
const (
	SandboxWasm   = "wasm"
	SandboxWorker = "worker"
)

// sandboxChoice is SetSandbox's, the default until it is called.
var sandboxChoice atomic.Value

// SetSandbox chooses where this process runs handlers ([policy] sandbox):
// SandboxWasm or SandboxWorker. A process has one choice, as it has one
// compiled interpreter; KEEP_SANDBOX, when set, wins over it.
func SetSandbox(mode string) error {
	if mode != SandboxWasm && mode != SandboxWorker {
		return fmt.Errorf("sandbox %q: want %q or %q", mode, SandboxWasm, SandboxWorker)
	}
	sandboxChoice.Store(mode)
	return nil
}

// sandbox is where handlers run: KEEP_SANDBOX if set ("in-process" too;
// any other value than those three is the worker, the most isolated), else
// SetSandbox's choice, else wasm.
func sandbox() string {
	switch v := os.Getenv(isolationEnv); v {
	case SandboxWasm, SandboxWorker, "in-process":
		return v
	case "":
	default:
		return SandboxWorker
	}
	if v, ok := sandboxChoice.Load().(string); ok && v != "" {
		return v
	}
	return SandboxWasm
}

// wasmEngines are the compiled interpreter, one per memory limit (wazero
// bounds linear memory per runtime); the machine code is shared.
var (
	wasmEnginesMu sync.Mutex
	wasmEngines   = map[int64]*wasmjs.Engine{}
)

// wasmLinearMemory is an instance's linear memory for a script heap of
// limit bytes: QuickJS's own limit (the heap, as a worker's VM has it)
// stops the script first, and what it does not count (the allocator's
// overhead, the C stack, the interpreter's data) fits in the rest.
func wasmLinearMemory(limit int64) int64 {
	if limit <= 0 {
		limit = 64 << 20
	}
	return limit + limit/4 + 8<<20
}

func wasmEngine(limit int64) (*wasmjs.Engine, error) {
	mem := wasmLinearMemory(limit)
	wasmEnginesMu.Lock()
	defer wasmEnginesMu.Unlock()
	if e := wasmEngines[mem]; e != nil {
		return e, nil
	}
	e, err := wasmjs.NewEngine(context.Background(), mem)
	if err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "%v", err)
	}
	wasmEngines[mem] = e
	return e, nil
}

// wasmHostFuncs are the prelude's host functions (vmpool.go's load), here
// reached through the instance's one import: each is a JavaScript function
// that sends its arguments as JSON and parses the answer ("" for
// undefined). The closure holds the import; the global is gone, as the
// prelude deletes the ones it takes.
const wasmHostShim = `(() => {
  const native = globalThis.__keep_host;
  delete globalThis.__keep_host;
  const parse = JSON.parse, stringify = JSON.stringify;
  for (const name of ["__keep_host", "__keep_settle", "__keep_armed", "__keep_entry"]) {
    globalThis[name] = function (...args) { const r = native(name, stringify(args)); return r === "" ? undefined : parse(r) };
  }
})()`

// takeWasmVM returns an idle instance that last ran p, else a new one with
// the prelude, the lockdown and p loaded. As with QuickJS VMs, an instance
// never runs two script versions.
func (p *Program) takeWasmVM(rt *Runtime, lim Limits) (*sandboxVM, error) {
	p.ranOn(rt)
	for {
		v, _ := rt.idleVMs.take(func(v *sandboxVM) bool { return v.prog == p && v.wasm != nil && v.limit == lim.MemoryLimit })
		if v == nil {
			break
		}
		if !v.wasm.Halted() {
			return v, nil
		}
		// Runtime.Stop reached it as its call ended (it ranges over the
		// busy ones): its next call would stop at once.
		rt.vmsDiscarded.Add(1)
		v.close()
	}
	return p.newWasmVM(rt, lim, forHandlers)
}

// newWasmVM is a new instance with the prelude (locked down for handlers)
// and p loaded.
func (p *Program) newWasmVM(rt *Runtime, lim Limits, use vmUse) (*sandboxVM, error) {
	e, err := wasmEngine(lim.MemoryLimit)
	if err != nil {
		return nil, err
	}
	rt.vmsCreated.Add(1)
	v := &sandboxVM{limit: lim.MemoryLimit, rt: rt}
	heap := lim.MemoryLimit
	if heap <= 0 {
		heap = 64 << 20
	}
	in, err := e.NewInstanceWithHeap(context.Background(), v.wasmHost, heap)
	if err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "%v", err)
	}
	v.wasm = in
	const setup = time.Minute // the prelude and lockdown are keep's, not the script's
	if err := in.Eval(context.Background(), "<input>", wasmHostShim, setup); err != nil {
		v.close()
		return nil, kt.Errorf(kt.ClassInternal, "load keep prelude: %v", err)
	}
	if err := in.Eval(context.Background(), "<input>", strings.Repeat("\n", preludeLineBase-1)+preludeSource, setup); err != nil {
		v.close()
		return nil, kt.Errorf(kt.ClassInternal, "load keep prelude: %v", err)
	}
	if use == forHandlers {
		if _, err := in.Apply(context.Background(), "__keep_lockdown", json.RawMessage(`[]`), setup); err != nil {
			v.close()
			return nil, kt.Errorf(kt.ClassInternal, "lock the sandbox down: %v", err)
		}
	}
	wrapped, err := wrapScript(p.Source)
	if err != nil {
		v.close()
		return nil, fmt.Errorf("%s: %v", p.File, err)
	}
	timeout := lim.Timeout
	if timeout <= 0 {
		timeout = setup
	}
	v.armed = true
	err = in.Eval(context.Background(), "<input>", wrapped, timeout)
	v.armed = false
	if err != nil {
		v.close()
		return nil, p.scriptError("while loading the script", wasmError(err), &vmState{})
	}
	v.prog = p
	return v, nil
}

// describeWasm reads p's declaration in an instance of its own, closed
// after: Declare without a worker.
func (p *Program) describeWasm() (Declaration, error) {
	var d Declaration
	v, err := p.newWasmVM(std, Limits{MemoryLimit: 64 << 20, Timeout: std.loadDeadline}, forDeclaration)
	if err != nil {
		return d, err
	}
	defer v.close()
	v.entering = true
	r, err := v.wasm.Apply(context.Background(), "__keep_describe", json.RawMessage(`[]`), std.loadDeadline)
	v.entering = false
	if err != nil {
		return d, p.scriptError("while loading the script", wasmError(err), &vmState{})
	}
	var s string
	if err := json.Unmarshal(r, &s); err != nil {
		return d, fmt.Errorf("read the workflow declaration: %w", err)
	}
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return d, fmt.Errorf("read the workflow declaration: %w", err)
	}
	return d, nil
}

// wasmHost answers the prelude's host functions: name is the function,
// args the JSON array of its arguments.
func (v *sandboxVM) wasmHost(name string, args json.RawMessage) (json.RawMessage, error) {
	var a []any
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, fmt.Errorf("%s: arguments that are not JSON: %v", name, err)
	}
	var r any
	var err error
	switch name {
	case "__keep_host":
		r, err = v.hostCall(a)
	case "__keep_settle":
		r, err = v.settle(a)
	case "__keep_armed":
		r = v.armed
	case "__keep_entry":
		r = v.entering
		v.entering = false
	default:
		return nil, fmt.Errorf("no host function %s", name)
	}
	if err != nil {
		return nil, err
	}
	if r == nil {
		return json.RawMessage{}, nil // "" in the shim: undefined
	}
	return json.Marshal(r)
}

// wasmError gives an exception from the instance the shape scriptError
// reads of QuickJS's: name, message, stack.
func wasmError(err error) error {
	var se *wasmjs.ScriptError
	if !errors.As(err, &se) {
		return err
	}
	first, stack, _ := strings.Cut(se.Message, "\n")
	name, msg, ok := strings.Cut(first, ": ")
	if !ok {
		name, msg = "Error", first
	}
	return &quickjs.Error{Name: name, Message: msg, Stack: stack}
}

// errWasmOOM marks an instance that ran out of memory as not to be reused.
var errWasmOOM = errors.New("out of memory")

// invokeWasm is invokeHere in a WebAssembly instance: the same prelude, the
// same entry point and host functions, the time limit enforced by wazero
// from outside instead of QuickJS's interrupt.
func (p *Program) invokeWasm(inv Invocation) (Outcome, error) {
	if inv.Tools == nil {
		inv.Tools = map[string][]string{}
	}
	rt := inv.runtime()
	if rt.stopping.Load() {
		return Outcome{}, ErrStopping
	}
	v, err := p.takeWasmVM(rt, inv.Limits)
	if err != nil {
		return Outcome{}, err
	}
	// Runtime.Stop stops the call under way (keep is stopping): a handler
	// in a native loop must not hold a shutdown for its time limit.
	// It leaves the busy set before finish can give it back to the idle
	// pool: once idle, another invocation may take it and be in the set
	// under the same key.
	rt.busyWasm.Store(v.wasm, struct{}{})
	if rt.stopping.Load() {
		v.wasm.Stop() // Stop ranged over busyWasm before the Store
	}
	st := v.start(inv)
	timeout := inv.Timeout
	if timeout <= 0 {
		timeout = 24 * time.Hour
	}
	deadline := time.Now().Add(timeout)
	spec := v.specFor(inv.Tools, inv.Kind == kt.HandlerTask, inv.ClockShift, inv.ChanceSeed)
	call, _ := json.Marshal([]any{string(inv.Kind), inv.Name, inv.Phase, "[" + joinRaw(inv.Args) + "]", spec, v.epoch})
	ctx := context.Background()
	v.entering = true
	_, callErr := v.wasm.Apply(ctx, "__keep_invoke", call, timeout)
	v.entering = false
	// Drain the jobs, also after the handler settled (invokeHere says why).
	for callErr == nil && st.abortErr == nil {
		n, jerr := v.wasm.Jobs(ctx, time.Until(deadline), drainJobsCap)
		var te *wasmjs.TimeoutError
		if jerr != nil && (errors.As(jerr, &te) || !st.settled) {
			callErr = jerr
		}
		if jerr != nil || n == 0 {
			break
		}
		if n >= drainJobsCap && inv.Timeout <= 0 {
			// Without a time limit nothing else would end an endless
			// chain (invokeHere says the same).
			callErr = errEndlessJobs
			break
		}
	}
	rt.busyWasm.Delete(v.wasm)
	var te *wasmjs.TimeoutError
	timedOut := errors.As(callErr, &te)
	if v.wasm.OutOfMemory() {
		// The heap's limit refused an allocation: the run fails as out of
		// memory whatever the script caught, as a worker's memory watch
		// makes it (issue 10 #11); the instance is not reused.
		v.finish(st, errWasmOOM, false)
		return Outcome{}, kt.Errorf(kt.ClassLogic, "%s %s: %s: the script ran out of memory: it reached its memory limit of %s ([policy] memory_limit), and catching the error does not undo that", inv.Kind, inv.Name, inv.Phase, sizeText(inv.MemoryLimit))
	}
	if timedOut && rt.stopping.Load() {
		v.finish(st, callErr, false)
		return Outcome{}, ErrStopping
	}
	v.finish(st, callErr, timedOut)
	if callErr != nil {
		callErr = wasmError(callErr)
	}
	return p.outcomeOf(inv, st, callErr, timedOut)
}
