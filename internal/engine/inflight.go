package engine

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// stepToken marks a step under way (Engine.Step) in its context, with the
// connector calls it waits on.
type stepToken struct{ calls int }

type stepKey struct{}

// flight counts the steps under way and the calls they wait on, for a
// keep run that stops at once (Engine.Parked).
type flight struct {
	mu      sync.Mutex
	steps   map[*stepToken]bool
	calls   map[*kt.CallInFlight]*stepToken
	changed chan struct{}
}

// changedLocked wakes those waiting for a change (mu held).
func (f *flight) changedLocked() {
	if f.changed != nil {
		close(f.changed)
	}
	f.changed = make(chan struct{})
}

// step marks ctx as a step's until done is called.
func (f *flight) step(ctx context.Context) (context.Context, func()) {
	tok := &stepToken{}
	f.mu.Lock()
	if f.steps == nil {
		f.steps, f.calls = map[*stepToken]bool{}, map[*kt.CallInFlight]*stepToken{}
	}
	f.steps[tok] = true
	f.changedLocked()
	f.mu.Unlock()
	return context.WithValue(ctx, stepKey{}, tok), func() {
		f.mu.Lock()
		delete(f.steps, tok)
		f.changedLocked()
		f.mu.Unlock()
	}
}

// call notes a connector call of the step whose context ctx is (nothing
// outside a step: a dry run's, the Maintainer's) until the returned func.
func (f *flight) call(ctx context.Context, c kt.CallInFlight) func() {
	tok, ok := ctx.Value(stepKey{}).(*stepToken)
	if !ok {
		return func() {}
	}
	f.mu.Lock()
	tok.calls++
	f.calls[&c] = tok
	f.changedLocked()
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		tok.calls--
		delete(f.calls, &c)
		f.changedLocked()
		f.mu.Unlock()
	}
}

// callOf describes a call a run's step makes.
func (x *runExec) callOf(tool string, m *connector.Method, call connector.Call) kt.CallInFlight {
	write := call.IdempotencyKey != ""
	return kt.CallInFlight{Workflow: x.run.Workflow, RunID: x.run.ID, Call: tool + "." + m.Name, Target: targetOf(m, tool, call.Args),
		Write: write, CanReconcile: write && m.CanReconcile(call.Args), Since: time.Now()}
}

// Parked waits until every step under way waits on a connector call, or
// none is under way, and returns those calls, oldest first: what a keep run
// stopping at once gives up on (each safe to, CallInFlight says why). A
// step between two calls (in a handler, committing) is waited for: it
// ends, or reaches its next call, without a timer. It returns early, with
// ctx's error, when ctx ends.
func (e *Engine) Parked(ctx context.Context) ([]kt.CallInFlight, error) {
	f := &e.flight
	for {
		f.mu.Lock()
		parked := true
		for tok := range f.steps {
			if tok.calls == 0 {
				parked = false
			}
		}
		if f.changed == nil {
			f.changed = make(chan struct{})
		}
		changed := f.changed
		var calls []kt.CallInFlight
		if parked {
			for c := range f.calls {
				calls = append(calls, *c)
			}
		}
		f.mu.Unlock()
		if parked {
			sort.Slice(calls, func(i, j int) bool { return calls[i].Since.Before(calls[j].Since) })
			return calls, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// CallsInFlight counts the connector calls steps wait on now.
func (e *Engine) CallsInFlight() int {
	e.flight.mu.Lock()
	defer e.flight.mu.Unlock()
	return len(e.flight.calls)
}
