package script

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script/wasmjs"
	"modernc.org/quickjs"
)

// Why VMs are reused: a fresh QuickJS VM (runtime, context, every
// built-in, then the prelude and the lockdown) costs ≈ 5 ms here, against
// ≈ 50 µs for a call on a warm one, and a consumer run makes two or three
// calls (issue 6). So a VM, once prepared, serves many invocations of one
// script version of one workflow (never another's: issue 11). Isolation between invocations does not rest on a fresh
// VM but on what prelude.js describes: the script's top level runs again for
// every invocation, the globals and built-ins are frozen, and every ctx is
// bound to its invocation. A VM whose invocation ended abnormally (timeout,
// abort, a throw, an engine error) is never reused, and a VM is retired
// after maxUses invocations.

const (
	// maxIdleVMs bounds the VMs kept between invocations: a bounded amount
	// of memory (≈ 450 KiB each, ≈ 21 MiB in all) however many workflows
	// are deployed; above the scheduler's 32 workers, which need one each.
	maxIdleVMs = 48
	// maxUses retires a VM after this many invocations, so that nothing
	// that slipped past the garbage collector accumulates.
	maxUses = 5000
	// wasmIdleMemory bounds the linear memory of a wasm instance kept
	// idle: linear memory never shrinks, so an instance that once grew
	// (a big answer read, then let go) would hold that memory in keep's
	// process while idle, up to maxIdleVMs × the memory limit. One that
	// grew past this is closed at the end of its invocation instead (the
	// next one makes a new instance, ≈ 2 ms of CPU); a new instance
	// holds ≈ 1.25 MiB (docs/performance.md).
	wasmIdleMemory = 8 << 20
)

// sandboxVM is one QuickJS VM with the prelude, locked down.
type sandboxVM struct {
	rt    *Runtime // the runtime whose pool it returns to
	vm    *quickjs.VM
	wasm  *wasmjs.Instance // instead of vm, with KEEP_SANDBOX=wasm (wasmvm.go)
	prog  *Program         // the script version loaded last
	armed bool             // the host is loading a script version
	// entering is set by the host just before it calls a prelude entry
	// point (__keep_invoke, __keep_describe), which takes it at once
	// (__keep_entry): the same call made by a script finds it false.
	entering bool
	limit    int64
	uses     int
	epoch    int64
	// The invocation under way; the host functions read them.
	st   *vmState
	host HostFunc
	// entries are the prelude's entry points (__keep_invoke,
	// __keep_describe), each held once found: calling a function by name
	// evaluates the name as a script (parsed and compiled) at every call,
	// 5 % of an invocation's CPU (issue 25). The prelude defines them
	// read-only, so what is held stays what the name says.
	entries map[string]*quickjs.Value
	// spec is the JSON of the last invocation's tools and kind as
	// __keep_invoke takes them, kept with a copy of what it was made of:
	// a VM's invocations nearly always have the same, and encoding them
	// anew (sorting the connectors' names) was a few per cent of an
	// invocation (issue 25). The prelude keeps its parse alike.
	spec      string
	specTools map[string][]string
	specTask  bool
	specShift int64
	specSeed  int64
}

// specFor returns the spec __keep_invoke takes for tools and task.
func (v *sandboxVM) specFor(tools map[string][]string, task bool, shift, seed int64) string {
	if v.spec != "" && task == v.specTask && shift == v.specShift && seed == v.specSeed && maps.EqualFunc(tools, v.specTools, slices.Equal) {
		return v.spec
	}
	spec := map[string]any{"tools": tools, "task": task}
	if shift != 0 || seed != 0 {
		spec["clockShift"], spec["chanceSeed"] = shift, seed
	}
	b, _ := json.Marshal(spec)
	v.spec, v.specTask, v.specShift, v.specSeed = string(b), task, shift, seed
	v.specTools = make(map[string][]string, len(tools))
	for k, m := range tools {
		v.specTools[k] = slices.Clone(m)
	}
	return v.spec
}

// close frees what the VM's host holds of it, then the VM.
func (v *sandboxVM) close() {
	for _, f := range v.entries {
		f.Free()
	}
	v.entries = nil
	if v.wasm != nil {
		v.wasm.Close(context.Background())
		return
	}
	v.vm.Close()
}

// interrupt stops the script at once, with nothing it can catch.
func (v *sandboxVM) interrupt() {
	if v.wasm != nil {
		v.wasm.Interrupt()
		return
	}
	v.vm.Interrupt()
}

// takeVM returns an idle VM that last ran p, else a new one with p loaded.
// A VM never runs code of two script versions (so never of two workflows):
// whatever one workflow's script managed to leave in a VM, despite the
// lockdown, can reach only later runs of the same script version (issue 11:
// an unfrozen hidden intrinsic once let one workflow read another's data).
func (p *Program) takeVM(rt *Runtime, lim Limits) (*sandboxVM, error) {
	p.ranOn(rt)
	v, _ := rt.idleVMs.take(func(v *sandboxVM) bool { return v.prog == p && v.wasm == nil })
	if v == nil {
		var err error
		if v, err = newSandboxVM(rt, lim, forHandlers); err != nil {
			return nil, err
		}
		if err := v.loadScript(p); err != nil {
			v.close()
			return nil, err
		}
	}
	if v.limit != lim.MemoryLimit && lim.MemoryLimit > 0 {
		v.vm.SetMemoryLimit(uintptr(lim.MemoryLimit))
		v.limit = lim.MemoryLimit
	}
	return v, nil
}

// giveBack keeps a VM for a next invocation, retiring the least recently
// used one beyond maxIdleVMs.
func (v *sandboxVM) giveBack() {
	v.st, v.host = nil, nil
	if v.uses >= maxUses || (v.wasm != nil && v.wasm.MemorySize() > wasmIdleMemory) {
		v.close()
		return
	}
	if retired, ok := v.rt.idleVMs.put(v); ok {
		retired.close()
	}
}

// Release closes the idle VMs and workers of a program that will not run again.
func (p *Program) Release() {
	if p.runtimes == nil {
		return
	}
	p.runtimes.Range(func(k, _ any) bool {
		rt := k.(*Runtime)
		p.releaseWorkers(rt)
		for _, v := range rt.idleVMs.remove(func(v *sandboxVM) bool { return v.prog == p }) {
			v.close()
		}
		return true
	})
}

// ranOn records that p runs on rt, for Release.
func (p *Program) ranOn(rt *Runtime) {
	if p.runtimes != nil {
		p.runtimes.LoadOrStore(rt, struct{}{})
	}
}

// vmUse says what a VM is for.
type vmUse int

const (
	// forHandlers: a VM that runs handlers, locked down (prelude.js's
	// __keep_lockdown: no eval, frozen intrinsics).
	forHandlers vmUse = iota
	// forDeclaration: a VM that only reads a script's declaration at
	// compile time, before lockdown would hide what it reads.
	forDeclaration
)

// newSandboxVM creates a VM with the prelude, for use.
func newSandboxVM(rt *Runtime, lim Limits, use vmUse) (*sandboxVM, error) {
	rt.vmsCreated.Add(1)
	vm, err := newVM(lim)
	if err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "%v", err)
	}
	v := &sandboxVM{vm: vm, limit: lim.MemoryLimit, rt: rt}
	if err := v.load(use); err != nil {
		vm.Close()
		return nil, err
	}
	return v, nil
}

// loadScript makes p the VM's script version: evaluating its bytecode
// hands the prelude the script's factory function.
func (v *sandboxVM) loadScript(p *Program) error {
	v.prog = nil
	v.armed = true
	_, err := v.vm.EvalBytecode(p.bytecode)
	v.armed = false
	if err != nil {
		return p.scriptError("while loading the script", err, &vmState{})
	}
	v.prog = p
	return nil
}

func (v *sandboxVM) load(use vmUse) error {
	vm := v.vm
	if err := vm.RegisterHostFunc("__keep_host", v.hostCall); err != nil {
		return kt.Errorf(kt.ClassInternal, "%v", err)
	}
	if err := vm.RegisterHostFunc("__keep_settle", v.settle); err != nil {
		return kt.Errorf(kt.ClassInternal, "%v", err)
	}
	if err := vm.RegisterHostFunc("__keep_armed", func(args []any) (any, error) { return v.armed, nil }); err != nil {
		return kt.Errorf(kt.ClassInternal, "%v", err)
	}
	if err := vm.RegisterHostFunc("__keep_entry", func(args []any) (any, error) {
		e := v.entering
		v.entering = false
		return e, nil
	}); err != nil {
		return kt.Errorf(kt.ClassInternal, "%v", err)
	}
	pre, err := preludeBytecode()
	if err != nil {
		return kt.Errorf(kt.ClassInternal, "load keep prelude: %v", err)
	}
	if _, err := vm.EvalBytecode(pre); err != nil {
		return kt.Errorf(kt.ClassInternal, "load keep prelude: %v", err)
	}
	if use == forDeclaration {
		return nil
	}
	if _, err := vm.Call("__keep_lockdown"); err != nil {
		return kt.Errorf(kt.ClassInternal, "lock the sandbox down: %v", err)
	}
	return nil
}

// enter calls the prelude's entry point name as the host: the only way
// its call gets past the prelude's check.
func (v *sandboxVM) enter(name string, args ...any) (any, error) {
	v.entering = true
	defer func() { v.entering = false }()
	f := v.entries[name]
	if f == nil {
		found, err := v.vm.EvalValue(name, quickjs.EvalGlobal)
		if err != nil {
			return nil, err
		}
		if v.entries == nil {
			v.entries = map[string]*quickjs.Value{}
		}
		f = &found
		v.entries[name] = f
	}
	return f.Call(quickjs.UndefinedValue, args...)
}

// abort ends the invocation with err: recorded for the host, and the VM
// interrupted so that nothing the script catches goes on.
func (v *sandboxVM) abort(err error) (any, error) {
	if v.st != nil {
		v.st.abortErr = err
	}
	v.interrupt()
	return nil, err
}

// hostCall is __keep_host: a ctx call of the script, checked against the
// invocation it belongs to, served by the host.
func (v *sandboxVM) hostCall(args []any) (any, error) {
	st := v.st
	if len(args) != 3 {
		return v.abort(errors.New("bad host call"))
	}
	method, _ := args[0].(string)
	raw, _ := args[1].(string)
	ep := epochOf(args[2])
	if st == nil || v.host == nil {
		if method == "log" {
			return nil, nil // console.log while only the declaration is read
		}
		return v.abort(kt.Errorf(kt.ClassLogic, "ctx.%s is not available while the script is loading", method))
	}
	if st.abortErr != nil {
		v.interrupt()
		return nil, st.abortErr
	}
	if ep != v.epoch {
		return v.abort(kt.Errorf(kt.ClassLogic, "the script used a ctx kept from an earlier call (ctx.%s); use the ctx each handler receives", method))
	}
	if st.settled {
		return v.abort(kt.Errorf(kt.ClassLogic, "the script called the host after its handler had returned (a ctx kept from an earlier call, or a promise left running)"))
	}
	res, err := v.host(method, json.RawMessage(raw))
	if errors.Is(err, ErrSuspend) {
		st.suspended = true
		return false, nil
	}
	if err != nil {
		return v.abort(err)
	}
	if res == nil {
		return nil, nil
	}
	return string(res), nil
}

// settle is __keep_settle: the handler of the current invocation returned
// (ok) or threw, with its JSON payload.
func (v *sandboxVM) settle(args []any) (any, error) {
	st := v.st
	if st == nil || st.settled || len(args) != 3 || epochOf(args[2]) != v.epoch {
		return nil, nil
	}
	st.settled = true
	st.ok, _ = args[0].(bool)
	st.payload, _ = args[1].(string)
	return nil, nil
}

// epochOf reads the invocation number the prelude passed back.
func epochOf(a any) int64 {
	switch n := a.(type) {
	case int:
		return int64(n)
	case int32:
		return int64(n)
	case int64:
		return n
	case float64:
		return int64(n)
	}
	return -1
}

// NewVMCost creates a locked-down VM and closes it, and reports how long the
// creation took: what an invocation pays when no idle VM is left.
func NewVMCost(lim Limits) (time.Duration, error) {
	start := time.Now()
	v, err := newSandboxVM(std, lim, forHandlers)
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	v.close()
	return d, nil
}
