package script

import (
	"github.com/keep-run/keep/internal/script/wasmjs"
	"sync"
	"sync/atomic"
	"time"
)

// Runtime is the sandbox of one keep (issue 41): its idle VMs and workers,
// the spare worker, the stop flag, the busy workers a stop kills, its
// counters and the deadline of a worker's load. Two engines in one process
// each own one and share nothing: stopping one leaves the other running.
// An Invocation names its Runtime; one that names none runs on the
// process's default runtime, which the package's functions (WorkerStats,
// ResumeWorkers, …) stand for, except StopWorkers: a signal to the
// process stops every runtime in it.
type Runtime struct {
	idleVMs     *idlePool[*sandboxVM]
	idleWorkers *idlePool[*worker]
	spare       spareWorker
	stopping    atomic.Bool
	busy        sync.Map // *worker → struct{}
	busyWasm    sync.Map // *wasmjs.Instance → struct{}: calls under way
	// loadDeadline bounds the start of a worker and the run of a script's
	// top level there.
	loadDeadline time.Duration

	vmsCreated, vmsDiscarded      atomic.Int64
	workersStarted, workersKilled atomic.Int64
	// roundTrips counts the frames keep sent a worker and then waited for
	// its answer to: an invocation, and a reply to a host call the script
	// waits on.
	roundTrips atomic.Int64
}

// NewRuntime makes a sandbox runtime with nothing started.
func NewRuntime() *Runtime {
	r := &Runtime{idleVMs: &idlePool[*sandboxVM]{max: maxIdleVMs}, idleWorkers: &idlePool[*worker]{max: maxIdleWorkers}, loadDeadline: 10 * time.Second}
	r.spare.rt = r
	live.Store(r, struct{}{})
	return r
}

// live are the runtimes of this process not closed: a signal to the
// process (StopWorkers) stops each.
var live sync.Map // *Runtime → struct{}

// Close stops r for good; StopWorkers no longer knows it.
func (r *Runtime) Close() {
	r.Stop()
	live.Delete(r)
}

// std is the process's default runtime: the package's functions act on it,
// and an Invocation without a Runtime runs on it.
var std = NewRuntime()

func (inv Invocation) runtime() *Runtime {
	if inv.Runtime != nil {
		return inv.Runtime
	}
	return std
}

// Stop ends every worker of r: idle ones, the spare, and busy ones whose
// invocations return ErrStopping (keep is stopping; a handler spinning in
// a native loop must not hold a shutdown for its whole time limit).
// Another runtime's workers go on.
func (r *Runtime) Stop() {
	r.stopping.Store(true)
	r.spare.stop()
	for _, wk := range r.idleWorkers.remove(nil) {
		wk.close()
	}
	r.busy.Range(func(k, _ any) bool {
		k.(*worker).kill()
		return true
	})
	r.busyWasm.Range(func(k, _ any) bool {
		k.(*wasmjs.Instance).Stop()
		return true
	})
}

// Resume lets r start workers again after Stop.
func (r *Runtime) Resume() { r.stopping.Store(false) }

// SetIdleWorkers bounds the idle workers r keeps between invocations
// ([policy] sandbox_workers).
func (r *Runtime) SetIdleWorkers(n int) {
	if n > 0 {
		r.idleWorkers.setMax(n)
	}
}

// IdleWorkers counts r's idle workers.
func (r *Runtime) IdleWorkers() int { return r.idleWorkers.count(func(*worker) bool { return true }) }

// WorkerStats reports how many of r's workers were started, and how many
// were killed (a time limit, a crash, out of memory).
func (r *Runtime) WorkerStats() (started, killed int64) {
	return r.workersStarted.Load(), r.workersKilled.Load()
}

// VMStats reports how many of r's VMs were created, and how many were
// discarded after an invocation that did not end cleanly.
func (r *Runtime) VMStats() (created, discarded int64) {
	return r.vmsCreated.Load(), r.vmsDiscarded.Load()
}

// WorkerRoundTrips reports how many times r sent a worker something to
// answer (an invocation or a host call's reply) and waited: each is two
// context switches (issue 25); tests count them per run.
func (r *Runtime) WorkerRoundTrips() int64 { return r.roundTrips.Load() }

// Default is the process's default runtime (what an Invocation without a
// Runtime runs on).
func Default() *Runtime { return std }

// The package's functions: the default runtime's.

// StopWorkers stops every runtime of the process not closed (Ctrl-C or
// SIGTERM reached it: daemon.StopWorkersOnSignal).
func StopWorkers() {
	live.Range(func(k, _ any) bool {
		k.(*Runtime).Stop()
		return true
	})
}

// ResumeWorkers is Default().Resume() (tests and keep run open and close
// several engines in one process).
func ResumeWorkers() { std.Resume() }

// SetIdleWorkers is Default().SetIdleWorkers(n).
func SetIdleWorkers(n int) { std.SetIdleWorkers(n) }

// IdleWorkers is Default().IdleWorkers().
func IdleWorkers() int { return std.IdleWorkers() }

// WorkerStats is Default().WorkerStats().
func WorkerStats() (started, killed int64) { return std.WorkerStats() }

// VMStats is Default().VMStats().
func VMStats() (created, discarded int64) { return std.VMStats() }

// WorkerRoundTrips is Default().WorkerRoundTrips().
func WorkerRoundTrips() int64 { return std.WorkerRoundTrips() }
