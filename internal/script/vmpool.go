package script

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	kt "github.com/keep-run/keep/internal/keeptype"
	"modernc.org/quickjs"
)

// Why VMs are reused: a fresh QuickJS VM (runtime, context, every
// built-in, then the prelude) costs ≈ 300 µs here, three quarters of a
// handler call, and a consumer run makes two or three calls (issue 6). So a
// VM, once loaded with the prelude and one script version, serves many
// invocations of that version. Isolation between invocations does not rest
// on a fresh VM but on what prelude.js describes: the script's top level
// runs again for every invocation, the globals and built-ins are frozen, and
// every ctx is bound to its invocation. A VM whose invocation ended
// abnormally (timeout, abort, out of memory, an engine error) is never
// reused, and a VM is retired after maxUses invocations.

const (
	// maxIdleVMs bounds the VMs kept between invocations, over all script
	// versions: a bounded amount of memory (≈ 450 KiB each) however many
	// workflows are deployed, and enough that a few dozen busy workflows
	// do not evict each other's VMs (a new VM with its lockdown costs
	// ≈ 5 ms, against ≈ 80 µs for a call on a warm one).
	maxIdleVMs = 64
	// maxUses retires a VM after this many invocations, so that nothing
	// that slipped past the garbage collector accumulates.
	maxUses = 5000
)

// sandboxVM is one QuickJS VM loaded with the prelude and one script.
type sandboxVM struct {
	vm    *quickjs.VM
	prog  *Program
	limit int64
	uses  int
	epoch int64
	// The invocation under way; the host functions read them.
	st   *vmState
	host HostFunc
}

var idleVMs struct {
	sync.Mutex
	list []*sandboxVM // least recently used first
}

// takeVM returns an idle VM loaded with p, or a new one.
func (p *Program) takeVM(lim Limits) (*sandboxVM, error) {
	idleVMs.Lock()
	for i := len(idleVMs.list) - 1; i >= 0; i-- {
		if v := idleVMs.list[i]; v.prog == p {
			idleVMs.list = append(idleVMs.list[:i], idleVMs.list[i+1:]...)
			idleVMs.Unlock()
			if v.limit != lim.MemoryLimit && lim.MemoryLimit > 0 {
				v.vm.SetMemoryLimit(uintptr(lim.MemoryLimit))
				v.limit = lim.MemoryLimit
			}
			return v, nil
		}
	}
	idleVMs.Unlock()
	return p.newSandboxVM(lim)
}

// giveBack keeps a VM for the next invocation of its program, retiring the
// least recently used one beyond maxIdleVMs.
func (v *sandboxVM) giveBack() {
	v.st, v.host = nil, nil
	if v.uses >= maxUses {
		v.vm.Close()
		return
	}
	idleVMs.Lock()
	idleVMs.list = append(idleVMs.list, v)
	var retired *sandboxVM
	if len(idleVMs.list) > maxIdleVMs {
		retired = idleVMs.list[0]
		idleVMs.list = idleVMs.list[1:]
	}
	idleVMs.Unlock()
	if retired != nil {
		retired.vm.Close()
	}
}

// Release closes the idle VMs of a program that will not run again.
func (p *Program) Release() {
	idleVMs.Lock()
	var mine []*sandboxVM
	kept := idleVMs.list[:0]
	for _, v := range idleVMs.list {
		if v.prog == p {
			mine = append(mine, v)
		} else {
			kept = append(kept, v)
		}
	}
	idleVMs.list = kept
	idleVMs.Unlock()
	for _, v := range mine {
		v.vm.Close()
	}
}

// newSandboxVM creates a VM, loads the prelude and the script's factory,
// and locks the built-ins down.
var vmsCreated, vmsDiscarded atomic.Int64

// VMStats reports how many VMs were created, and how many were discarded
// after an invocation that did not end cleanly, since the process started.
func VMStats() (created, discarded int64) { return vmsCreated.Load(), vmsDiscarded.Load() }

func (p *Program) newSandboxVM(lim Limits) (*sandboxVM, error) {
	vmsCreated.Add(1)
	vm, err := newVM(lim)
	if err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "%v", err)
	}
	v := &sandboxVM{vm: vm, prog: p, limit: lim.MemoryLimit}
	if err := v.load(true); err != nil {
		vm.Close()
		return nil, err
	}
	return v, nil
}

// load prepares the VM; lockdown is left out only for a VM that runs no
// handler (reading the declaration at compile time).
func (v *sandboxVM) load(lockdown bool) error {
	vm := v.vm
	abort := func(err error) (any, error) {
		if v.st != nil {
			v.st.abortErr = err
		}
		vm.Interrupt()
		return nil, err
	}
	if err := vm.RegisterHostFunc("__keep_host", func(args []any) (any, error) {
		st := v.st
		if len(args) != 3 {
			return abort(errors.New("bad host call"))
		}
		method, _ := args[0].(string)
		raw, _ := args[1].(string)
		ep := epochOf(args[2])
		if st == nil || v.host == nil {
			if method == "log" {
				return nil, nil // console.log while only the declaration is read
			}
			return abort(kt.Errorf(kt.ClassLogic, "ctx.%s is not available while the script is loading", method))
		}
		if st.abortErr != nil {
			vm.Interrupt()
			return nil, st.abortErr
		}
		if ep != v.epoch {
			return abort(kt.Errorf(kt.ClassLogic, "the script used a ctx kept from an earlier call (ctx.%s); use the ctx each handler receives", method))
		}
		if st.settled {
			return abort(kt.Errorf(kt.ClassLogic, "the script called the host after its handler had returned (a ctx kept from an earlier call, or a promise left running)"))
		}
		res, err := v.host(method, json.RawMessage(raw))
		if errors.Is(err, ErrSuspend) {
			st.suspended = true
			return false, nil
		}
		if err != nil {
			return abort(err)
		}
		if res == nil {
			return nil, nil
		}
		return string(res), nil
	}); err != nil {
		return kt.Errorf(kt.ClassInternal, "%v", err)
	}
	if err := vm.RegisterHostFunc("__keep_settle", func(args []any) (any, error) {
		st := v.st
		if st == nil || st.settled || len(args) != 3 {
			return nil, nil
		}
		if epochOf(args[2]) != v.epoch {
			return nil, nil
		}
		st.settled = true
		st.ok, _ = args[0].(bool)
		st.payload, _ = args[1].(string)
		return nil, nil
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
	if _, err := vm.EvalBytecode(v.prog.bytecode); err != nil {
		return v.prog.scriptError("while loading the script", err, &vmState{})
	}
	if !lockdown {
		return nil
	}
	if _, err := vm.Call("__keep_lockdown"); err != nil {
		return kt.Errorf(kt.ClassInternal, "lock the sandbox down: %v", err)
	}
	return nil
}

func (v *sandboxVM) String() string { return fmt.Sprintf("vm(%s, %d uses)", v.prog.File, v.uses) }

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
