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
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
)

// what happens to the items already done (engine.ErrReprocessChoice).
var ErrReprocessChoice = engine.ErrReprocessChoice

// deploy by keep run), for the decision log (engine.WithActor).
func WithActor(ctx context.Context, by string) context.Context {
	return engine.WithActor(ctx, by)
}

// another watcher holds it.
func StopWorkersOnSignal() (done func()) {
	return StopWorkersOnSignalThen(nil)
}

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

// grants what it uses; test is its test file's source, recorded with it.
func (k *Keep) DeployToRun(ctx context.Context, file, src, name string, kind kt.DeployKind, filesRoot, test string) (kt.DeployResult, error) {
	return k.Engine.DeployWith(ctx, file, src, engine.DeployOptions{Name: name, Kind: kind, FilesRoot: filesRoot, Grant: true, Test: test})
}

// keep run's development loop.
func (k *Keep) QueueProducers(ctx context.Context, wf string) error {
	_, err := engine.QueueAtStart(ctx, k.Store, wf, time.Now())
	return err
}

// other machines and no token guards it.
func CheckAddr(addr, token string) error {
	if addr != "" && !api.IsLoopback(addr) && token == "" {
		return fmt.Errorf("--addr %s accepts connections from other machines: set a token with --token or KEEP_TOKEN", addr)
	}
	return nil
}

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
