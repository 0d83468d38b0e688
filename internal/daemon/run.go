package daemon

// What keep run and keep serve call on the Keep they own (the engine lock
// held): keep run's deploy, its producers queued, its run until idle; the
// signals that stop the sandbox; keep serve's address check.

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/transition"
)

// ErrReprocessChoice is a major version's deploy without the choice of
// what happens to the items already done (control.ErrReprocessChoice).
var ErrReprocessChoice = control.ErrReprocessChoice

// WithActor names who takes the decisions this process makes itself (a
// deploy by keep run), for the decision log (transition.WithActor).
func WithActor(ctx context.Context, by string) context.Context {
	return transition.WithActor(ctx, by)
}

// StopWorkersOnSignal stops every sandbox worker when Ctrl-C or SIGTERM
// arrives: a handler spinning in a native loop must not hold a shutdown for
// its whole time limit (its run is recovered at the next start). Call the
// function it returns when the command ends. It watches the first signal
// only: a second one finds Go's default (the process ends at once) unless
// another watcher holds it.
func StopWorkersOnSignal() (done func()) {
	return StopWorkersOnSignalThen(nil)
}

// StopWorkersOnSignalThen is StopWorkersOnSignal, and after the first
// signal, once it let go of the signals and stopped the workers, calls
// then (if not nil).
func StopWorkersOnSignalThen(then func()) (done func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	quit := make(chan struct{})
	go func() {
		select {
		case <-sig:
			signal.Stop(sig)
			script.StopWorkers()
			if then != nil {
				then()
			}
		case <-quit:
		}
	}()
	return func() {
		signal.Stop(sig)
		close(quit)
	}
}

// RunDeploy is keep run's deploy: the script (File, its source Src), the
// workflow's Name ("" for the script's), the kind of version, the files
// root, and Test, the source of its test file, recorded with it.
type RunDeploy struct {
	File, Src, Name string
	Kind            kt.DeployKind
	FilesRoot, Test string
}

// DeployToRun deploys a script as keep run does: the person running it
// grants what it uses.
func (k *Keep) DeployToRun(ctx context.Context, d RunDeploy) (kt.DeployResult, error) {
	return control.Deploy(ctx, k.Engine, d.File, d.Src, control.DeployOptions{Name: d.Name, Kind: d.Kind, FilesRoot: d.FilesRoot, Grant: true, Test: d.Test})
}

// QueueProducers makes every producer of a workflow due now, due or not:
// keep run's development loop.
func (k *Keep) QueueProducers(ctx context.Context, wf string) error {
	_, err := engine.QueueAtStart(ctx, k.Store, wf, time.Now())
	return err
}

// CheckAddr refuses keep serve's --addr when it accepts connections from
// other machines and no token guards it.
func CheckAddr(addr, token string) error {
	if addr != "" && !api.IsLoopback(addr) && token == "" {
		return fmt.Errorf("--addr %s accepts connections from other machines: set a token with --token or KEEP_TOKEN", addr)
	}
	return nil
}

// RunUntilIdle runs k's workflows until nothing is left to do, or ctx
// ends. Then it stops at once: it waits for no connector call. A step
// between two calls (in a handler, committing) ends or reaches its next
// call (Engine.Parked); the calls the steps wait on then are given up on
// and returned — each safe to give up on by the ledger (a write is
// in_flight, reconciled by the next run; a read writes nothing), as a
// crash would leave them. Their steps are left to the process's exit.
func (k *Keep) RunUntilIdle(ctx context.Context) ([]kt.CallInFlight, error) {
	idle := make(chan error, 1)
	go func() { idle <- k.Scheduler.RunUntilIdle(ctx) }()
	select {
	case err := <-idle:
		return nil, err
	case <-ctx.Done():
	}
	parked := make(chan []kt.CallInFlight, 1)
	pctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		calls, _ := k.Engine.Parked(pctx)
		parked <- calls
	}()
	select {
	case err := <-idle:
		return nil, err
	case calls := <-parked:
		return calls, ctx.Err()
	}
}
