// Package scheduler decides when each workflow's next step runs: it polls
// the store for due work (schedules, dirty or woken consumers, retries,
// reconciliation, people's decisions), runs different workflows
// concurrently on a bounded pool, and never runs two steps of one workflow
// at once. Within a workflow the engine picks by priority (SPEC §5).
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keep-run/keep/internal/clock"
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// Options configure a Scheduler.
type Options struct {
	Engine *engine.Engine
	// Workers bounds how many workflows step at the same time. Defaults to 32.
	Workers int
	// Poll is how often the store is polled for due work when nothing wakes
	// the scheduler earlier (changes made by another process). Defaults to 500ms.
	Poll time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Node, when set, makes this scheduler one of several sharing a store:
	// it steps a workflow only while it holds its lease (leases.go).
	Node string
	// LeaseTTL is how long a lease lasts without renewal. Defaults to 15s.
	LeaseTTL time.Duration
}

// Scheduler runs due work.
type Scheduler struct {
	eng     *engine.Engine
	store   store.Store
	workers int
	poll    time.Duration
	log     *slog.Logger
	wake    chan struct{}
	node    string
	ttl     time.Duration

	// leaseMu serializes this node's lease transactions (leases.go).
	leaseMu sync.Mutex

	mu   sync.Mutex
	busy map[string]bool
	// named are the workflows Changed told of since the last look, and
	// full says a pass over the store is owed (Wake, the poll): a change
	// that names its workflow starts that workflow's steps without a
	// pass (the step's plan reads what it needs). stale are the busy
	// workflows told of, or found due, while they were busy: release
	// makes a pass unless their stepping loop planned after it. leftDue:
	// the last pass left due workflows to the other nodes' share, so
	// that a release looks again.
	named    map[string]bool
	full     bool
	stale    map[string]bool
	leftDue  bool
	held     map[string]*heldLease // this node's leases (leases.go)
	renewing bool                  // the renewer runs
	runs     int                   // Run and RunUntilIdle under way
	backoff  map[string]time.Time
	// damaged holds the workflows whose last step found damaged storage
	// (kt.ClassDamaged): what it said, logged once, and how long the
	// scheduler now waits before it looks again (damagedRetry).
	damaged  map[string]*damagedStep
	errs     []error
	problem  string       // see Problem
	progress atomic.Int64 // steps that did something
	// passes counts the looks for due work, skippedWakes the wakes
	// Changed spared (tests count them).
	passes, skippedWakes atomic.Int64
	fatal                atomic.Pointer[fatalError]
	addr                 atomic.Value // this node's address, for the nodes list
	announced            atomic.Bool  // a heartbeat recorded this node alive (and no stop since)
	// stopMu orders the node's heartbeats and its stop (markStopped);
	// stopOwed (under mu): the loop ended with a lease still held, whose
	// release records the stop.
	stopMu   sync.Mutex
	stopOwed bool
	// started is when the last Run began (ms): the node's start time,
	// also in its stop mark should that write its row anew.
	started atomic.Int64
	// renewKick wakes the renewer, to see that no lease is held any more.
	renewKick chan struct{}
	alive     atomic.Int64 // nodes alive at the last heartbeat (fair share)
	// dueSeen is the most workflows found due at once since the previous
	// renewal, which the leases this node keeps are shared out by
	// (leaseShare).
	dueSeen atomic.Int64
	// leasesLive is how many workflows' leases the nodes held at the last
	// count (countLiveLeases): the work in use among them, which the
	// leases this node keeps are shared out by too.
	leasesLive atomic.Int64
}

// heartbeatEvery is how often a node records that it is alive (the rule
// of who counts as alive is keeptype.Node.AliveAt).
const heartbeatEvery = kt.NodeHeartbeatEvery

// SetNodeAddr tells the scheduler where this node serves its API.
func (s *Scheduler) SetNodeAddr(addr string) { s.addr.Store(addr) }

// NodeAddr is where this node serves its API ("" when unknown).
func (s *Scheduler) NodeAddr() string {
	a, _ := s.addr.Load().(string)
	return a
}

// New builds a Scheduler.
func New(o Options) *Scheduler {
	s := &Scheduler{eng: o.Engine, store: o.Engine.Store(), workers: o.Workers, poll: o.Poll, log: o.Logger,
		wake: make(chan struct{}, 1), busy: map[string]bool{}, named: map[string]bool{}, stale: map[string]bool{}, held: map[string]*heldLease{}, renewKick: make(chan struct{}, 1), backoff: map[string]time.Time{}, damaged: map[string]*damagedStep{}, node: o.Node, ttl: o.LeaseTTL}
	if s.ttl <= 0 {
		s.ttl = 15 * time.Second
	}
	if s.workers <= 0 {
		s.workers = 32
	}
	if s.poll <= 0 {
		s.poll = 500 * time.Millisecond
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s
}

// Wake makes the scheduler look for due work now: a pass over the store.
func (s *Scheduler) Wake() {
	s.mu.Lock()
	s.full = true
	s.mu.Unlock()
	s.signal()
}

func (s *Scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Changed is told that wf's state changed (a commit, a person's action):
// the scheduler steps wf at once, without a pass over the store (a read
// transaction the step's own plan would repeat: issue 43, the serial
// path), unless it is stepping wf at the moment. Then it only notes the
// change: the stepping loop steps wf again until it has no work, and when
// it lets wf go (release) a pass looks again if this change came after
// its last plan began. A serial chain of runs thus costs no pass per
// commit (issue 25: two to four per input), and a run-now none (issue 43).
func (s *Scheduler) Changed(wf string) {
	if wf == "" {
		s.Wake()
		return
	}
	s.mu.Lock()
	if s.busy[wf] {
		s.stale[wf] = true
		s.mu.Unlock()
		s.skippedWakes.Add(1)
		return
	}
	if d := s.damaged[wf]; d != nil {
		// A person's deploy, grant or revoke may have restored what was
		// damaged: look again now, not at the end of the wait. The damage
		// stays known, so that finding it again is not logged again (a
		// change that restores nothing, as an event posted, is no news).
		d.delay = damagedRetry / 2
		delete(s.backoff, wf)
	}
	s.named[wf] = true
	s.mu.Unlock()
	s.signal()
}

// damagedStep is a workflow whose steps find damaged storage.
type damagedStep struct {
	msg   string        // the error, as logged
	delay time.Duration // the wait before the next look
}

// The waits between two looks at a workflow whose storage is damaged:
// nothing keep does by itself restores it (a person redeploys, re-grants
// or restores keep.db), so each look waits twice as long as the one
// before, up to damagedRetryMax; a change told to Changed (a deploy, a
// grant through keep serve) looks again at once and starts the waits
// again from damagedRetry. A change made behind keep serve's back is seen
// within damagedRetryMax. The damage is logged once, until a step of the
// workflow succeeds or finds another.
const (
	damagedRetry    = time.Second
	damagedRetryMax = 5 * time.Minute
)

// forgetDamage forgets that wf's storage was found damaged: a step of it
// succeeded.
func (s *Scheduler) forgetDamage(wf string) {
	s.mu.Lock()
	delete(s.damaged, wf)
	s.mu.Unlock()
}

// stepFailed records a failed step of wf (s.mu held): logged and kept in
// Errors, then a second's wait; damaged storage is logged once and waited
// for longer each time it is found again (damagedRetry).
func (s *Scheduler) stepFailed(wf string, err error) {
	if !kt.IsDamaged(err) {
		s.log.Error("step failed", "workflow", wf, "error", err)
		s.problem = fmt.Sprintf("workflow %s: %v", wf, err)
		s.backoff[wf] = time.Now().Add(time.Second)
		s.errs = append(s.errs, fmt.Errorf("workflow %s: %w", wf, err))
		return
	}
	// Damaged storage is this workflow's alone (its status says it, issue
	// 44): the others go on, and keep serve with them.
	d := s.damaged[wf]
	if d != nil && d.msg == err.Error() {
		d.delay = min(2*d.delay, damagedRetryMax)
		s.log.Debug("step failed again on the same damaged storage (logged once)", "workflow", wf, "next look in", d.delay)
	} else {
		d = &damagedStep{msg: err.Error(), delay: damagedRetry}
		s.damaged[wf] = d
		s.log.Error("step failed", "workflow", wf, "error", err, "next look", "when the workflow is deployed or granted again, else in "+damagedRetry.String()+", twice as long each time up to "+damagedRetryMax.String())
		s.errs = append(s.errs, fmt.Errorf("workflow %s: %w", wf, err))
	}
	s.backoff[wf] = time.Now().Add(d.delay)
}

// Passes is how many times the scheduler has looked for due work, and
// SkippedWakes how many wakes Changed spared (tests count them).
func (s *Scheduler) Passes() int64       { return s.passes.Load() }
func (s *Scheduler) SkippedWakes() int64 { return s.skippedWakes.Load() }

// Stepping says whether the scheduler is stepping wf now (its stepping
// loop has not let it go yet): a change told to Changed meanwhile is
// noted, and may cost a pass when wf is let go (release). Tests wait on
// it to tell that path from the one without a pass.
func (s *Scheduler) Stepping(wf string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy[wf]
}

// Run dispatches due work until ctx is cancelled, then waits for running steps.
func (s *Scheduler) Run(ctx context.Context) error {
	defer s.running()()
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, s.workers)
	ticker := time.NewTicker(s.poll)
	defer ticker.Stop()
	started := clock.Now().UnixMilli()
	s.started.Store(started)
	var lastBeat time.Time
	stepped := false
	s.mu.Lock()
	s.full = true
	s.mu.Unlock()
	for {
		if s.node != "" && time.Since(lastBeat) > heartbeatEvery {
			if err := s.Heartbeat(ctx, kt.Node{Addr: s.NodeAddr(), StartedAt: started}); err != nil && ctx.Err() == nil {
				s.log.Warn("node heartbeat", "error", err)
			}
			lastBeat = time.Now()
		}
		stepped = s.noteClockStep(stepped)
		if pass, named := s.takeWork(); pass {
			s.dispatch(ctx, &wg, sem)
		} else {
			s.dispatchNamed(ctx, &wg, sem, named)
		}
		if err := s.fatalErr(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			s.mu.Lock()
			s.full = true
			s.mu.Unlock()
		case <-s.wake:
		}
	}
}

// takeWork says what the scheduler's look is: a pass over the store
// (Wake, the poll, a change on another node: dispatch), or the steps of
// the workflows Changed named since the last look, without one. On
// several nodes a workflow whose lease this node does not hold goes
// through a pass, which takes its lease only when it is due.
func (s *Scheduler) takeWork() (pass bool, named []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for wf := range s.named {
		if s.node != "" && s.held[wf] == nil {
			s.full = true
		}
		named = append(named, wf)
	}
	if s.full {
		return true, nil
	}
	clear(s.named)
	return false, named
}

// dispatchNamed starts the steps of the workflows Changed named.
func (s *Scheduler) dispatchNamed(ctx context.Context, wg *sync.WaitGroup, sem chan struct{}, named []string) {
	now := time.Now()
	for _, wf := range named {
		if !s.start(ctx, wg, sem, wf, now, s.workers) {
			return
		}
	}
}

func (s *Scheduler) dispatch(ctx context.Context, wg *sync.WaitGroup, sem chan struct{}) int {
	var due []string
	// Due times are keep's time (clock.Now: it never steps back); the
	// backoffs below are this process's own, on the monotonic clock.
	now := time.Now()
	s.passes.Add(1)
	// The pass reads after every change told so far.
	s.mu.Lock()
	s.full, s.leftDue = false, false
	clear(s.named)
	s.mu.Unlock()
	if err := s.store.View(ctx, func(tx store.Tx) error {
		var err error
		due, err = tx.DueWorkflows(clock.Now().UnixMilli())
		return err
	}); err != nil {
		if ctx.Err() == nil {
			s.noteFatal(err)
			s.log.Error("scheduler: find due work", "error", err)
			s.mu.Lock()
			s.problem = fmt.Sprintf("find due work: %v", err)
			s.mu.Unlock()
		}
		return 0
	}
	started := 0
	share := s.fairShare(len(due))
	for _, wf := range due {
		if !s.start(ctx, wg, sem, wf, now, share) {
			break
		}
		started++
	}
	return started
}

// start starts stepping wf on a goroutine of its own unless it is busy
// (then its stepping loop or its release steps it), waiting for a retry,
// or this node has its share of workflows busy (the rest is the other
// nodes': a release looks again). false: start no more now.
func (s *Scheduler) start(ctx context.Context, wg *sync.WaitGroup, sem chan struct{}, wf string, now time.Time, share int) bool {
	s.mu.Lock()
	if len(s.busy) >= share {
		s.leftDue = true
		s.mu.Unlock()
		return false
	}
	if s.busy[wf] || now.Before(s.backoff[wf]) {
		if s.busy[wf] {
			s.stale[wf] = true
		}
		s.mu.Unlock()
		return true
	}
	s.busy[wf] = true
	s.mu.Unlock()
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		s.release(wf)
		return false
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() { <-sem }()
		defer s.release(wf)
		s.stepAll(ctx, wf)
	}()
	return true
}

// noteFatal remembers an error keep must stop on: a corrupt database
// (logging "malformed" every half second for ever helps nobody).
func (s *Scheduler) noteFatal(err error) {
	if errors.Is(err, store.ErrCorrupt) {
		s.fatal.CompareAndSwap(nil, &fatalError{err})
	}
}

type fatalError struct{ err error }

func (s *Scheduler) fatalErr() error {
	if f := s.fatal.Load(); f != nil {
		return fmt.Errorf("keep stops: %w. Nothing more is run on this data directory: restore keep.db from a backup (the ledgers say what was done and what was not)", f.err)
	}
	return nil
}

// release lets wf go. A pass looks again when a change came after wf's
// last plan began (Changed) or the last pass left due workflows aside
// for this node's share; otherwise nothing is owed, and a chain of runs
// ends without a pass. A pass, not wf's step: a step that commits and
// then finds nothing to do (did is false) marks wf stale itself, and
// stepping it again for that would never end.
func (s *Scheduler) release(wf string) {
	s.mu.Lock()
	delete(s.busy, wf)
	look := s.stale[wf] || s.leftDue
	delete(s.stale, wf)
	s.mu.Unlock()
	if look {
		s.Wake()
	}
	s.stopIfOwed()
}

// stepAll steps one workflow while it has work, so a chain of runs proceeds
// without waiting for the next poll. When ctx ends (keep is stopping) no new
// step starts, but the step under way finishes with a context that is not
// cancelled: stopping must not cut a run between two of its durable writes.
// It returns the error of a step that failed.
func (s *Scheduler) stepAll(ctx context.Context, wf string) error {
	stepCtx := context.WithoutCancel(ctx)
	if s.node == "" {
		_, err := s.stepLoop(ctx, stepCtx, wf)
		return err
	}
	fence, held, err := s.lease(stepCtx, wf)
	if err != nil || !held {
		if err != nil && ctx.Err() == nil {
			s.log.Warn("scheduler: take the lease", "workflow", wf, "error", err)
		}
		return nil // another node steps it
	}
	lost, err := s.stepLoop(ctx, store.WithFence(stepCtx, fence), wf)
	s.done(fence, lost)
	return err
}

// stepLoop steps wf until it has no work, an error (which it returns), or
// ctx ends; lost says a write was fenced: another node took the workflow
// over.
func (s *Scheduler) stepLoop(ctx, stepCtx context.Context, wf string) (lost bool, _ error) {
	for ctx.Err() == nil {
		// This step's plan reads after every change told so far.
		s.mu.Lock()
		delete(s.stale, wf)
		s.mu.Unlock()
		did, err := s.step(stepCtx, wf)
		if errors.Is(err, store.ErrFenced) {
			// Another node took the workflow over: its work now. Said at
			// warn level: a step cut in its middle means this node's lease
			// ran out while it worked (a pause, a database it could not
			// reach), which a person running nodes wants to know.
			s.log.Warn("lease lost while stepping: another node took the workflow over", "workflow", wf, "error", err)
			return true, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			s.noteFatal(err)
			s.mu.Lock()
			s.stepFailed(wf, err)
			s.mu.Unlock()
			return false, err
		}
		s.forgetDamage(wf)
		if !did {
			return false, nil
		}
		s.mu.Lock()
		s.problem = ""
		s.mu.Unlock()
		s.progress.Add(1)
	}
	return false, nil
}

func (s *Scheduler) step(ctx context.Context, wf string) (did bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = kt.Errorf(kt.ClassInternal, "panic while stepping %s: %v\n%s", wf, p, debug.Stack())
		}
	}()
	return s.eng.Step(ctx, wf)
}

// StepWorkflow steps one workflow while it has work, as the scheduler
// does (under its lease when several nodes share the store; not at all
// while another node holds it), and returns the first step error.
func (s *Scheduler) StepWorkflow(ctx context.Context, wf string) error {
	s.mu.Lock()
	if s.busy[wf] {
		s.mu.Unlock()
		return nil
	}
	s.busy[wf] = true
	s.mu.Unlock()
	err := s.stepAll(ctx, wf)
	s.release(wf)
	if err != nil {
		return fmt.Errorf("workflow %s: %w", wf, err)
	}
	return nil
}

// Errors returns the step errors seen so far (store failures, host bugs).
// Problem is the error of the most recent failed step when no step has
// succeeded since (a full disk, a store that refuses writes): what keep
// serve cannot get past by itself, for `keep status`, the API and the page.
// "" when there is none.
func (s *Scheduler) Problem() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.problem
}

func (s *Scheduler) Errors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

// RunUntilIdle steps every workflow until nothing is due and nothing is
// waiting for a retry or a reconcile attempt; producer schedules and
// consumers' wakeAt in the future do not count. It is `keep run`.
func (s *Scheduler) RunUntilIdle(ctx context.Context) error {
	defer s.running()()
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.workers)
	for {
		before := s.progress.Load()
		s.dispatch(ctx, &wg, sem)
		wg.Wait()
		if err := s.fatalErr(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.progress.Load() != before {
			continue
		}
		next, waiting, err := s.nextTimedWork(ctx)
		if err != nil {
			return err
		}
		if !waiting {
			return nil
		}
		d := next.Sub(clock.Now())
		if d < 10*time.Millisecond {
			d = 10 * time.Millisecond
		}
		if d > s.poll {
			d = s.poll
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
}

// nextTimedWork finds the earliest automatic retry or reconcile attempt.
func (s *Scheduler) nextTimedWork(ctx context.Context) (time.Time, bool, error) {
	var next int64
	waiting := false
	err := s.store.View(ctx, func(tx store.Tx) error {
		runs, err := tx.RunsWithStatus(kt.StatusTransient)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if r.NextAttemptAt > 0 && (!waiting || r.NextAttemptAt < next) {
				next, waiting = r.NextAttemptAt, true
			}
		}
		muts, err := tx.MutationsWithStatus(kt.MutationNeedsReconcile)
		if err != nil {
			return err
		}
		for _, m := range muts {
			if !waiting || m.NextReconcileAt < next {
				next, waiting = m.NextReconcileAt, true
			}
		}
		return nil
	})
	return time.UnixMilli(next), waiting, err
}

// noteClockStep says once, when it happens, that keep's reference clock
// stepped back (clock.Lead): keep's time goes on from where it was and
// catches the clock up slowly, so the times it shows are ahead meanwhile
// (design.md, "Time"). stepped is whether it said so already.
func (s *Scheduler) noteClockStep(stepped bool) bool {
	lead := clock.Lead()
	switch {
	case lead > time.Second && !stepped:
		s.log.Warn("the clock stepped back; keep's time does not go back with it: it goes on at 9/10 of real time until the clock catches up (the times keep shows are ahead meanwhile)", "ahead", lead.Round(time.Millisecond), "caught up in", (10 * lead).Round(time.Second))
		return true
	case lead <= 0:
		return false
	}
	return stepped
}
