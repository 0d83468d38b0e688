package engine

import (
	"time"

	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// Crash points: the durable steps Options.AtDurableStep is told about; crash
// tests end the process at one of them, as if it were killed there.
//
// A consumer run that writes makes two commits (docs/design.md "Runs and
// phases"): the first (prepare's result, its selection and the write's
// in_flight row) has CrashInsideInFlight inside it and CrashAfterPrepared
// and CrashAfterInFlight after it; the second (the write's outcome, next's
// publishes, the consumption) has CrashInsideCommit inside it.
const (
	// CrashAfterPrepared: prepare's selection is durable (with in_flight,
	// or with the wait for an approval, or the failure that pins it).
	CrashAfterPrepared = "after-prepared"
	// CrashInsideInFlight: inside the first commit, before it is made: a
	// crash here re-runs prepare and nothing was sent.
	CrashInsideInFlight = "inside-inflight"
	CrashAfterInFlight  = "after-inflight"
	CrashAfterCall      = "after-call"
	// CrashAfterApplied: an item script's write recorded applied (a
	// consumer's outcome is recorded inside its final commit).
	CrashAfterApplied = "after-applied"
	// CrashInsideCommit: inside a consumer's final commit, before it is
	// made: the write's answer is lost, the row still in_flight.
	CrashInsideCommit = "inside-commit"
	// CrashAfterProbe: a reconcile probe answered, before its answer is
	// recorded (after a background attempt's, the run is not active: a
	// person may decide meanwhile).
	CrashAfterProbe = "after-probe"
	// CrashInsideDelivery: inside a webhook delivery's commit, before it
	// is made: the sender gets no answer, and its retry is a new delivery.
	CrashInsideDelivery = "inside-delivery"
)

// CrashPoint calls the test's crash hook at the durable step name
// (Options.AtDurableStep); intake's webhook delivery calls it inside its
// commit (CrashInsideDelivery).
func (e *Engine) CrashPoint(name string) {
	if e.atStep != nil {
		e.atStep(name)
	}
}

// advance moves a run to a later phase; a backward move is a host bug.
func advance(r *kt.Run, to kt.Phase) error {
	if !kt.PhaseTransitionAllowed(r.Phase, to) {
		return kt.Errorf(kt.ClassInternal, "run %s: phase %s → %s is not allowed", r.ID, r.Phase, to)
	}
	r.Phase = to
	return nil
}

// Step performs the next piece of work of one workflow: at most one run,
// or one reconciliation attempt, or one person's decision. It reports
// whether it did anything. The caller guarantees that no other Step of the
// same workflow runs at the same time.
func (e *Engine) Step(ctx context.Context, name string) (bool, error) {
	ctx, done := e.flight.step(ctx)
	defer done()
	did, err := e.step(ctx, name)
	if errors.Is(err, store.ErrConflict) {
		// The run was written while this step worked on it (a person's
		// decision, a reprocess that closed it): nothing was written over
		// it, and the next step starts from what is stored.
		e.log.Info("the run changed while a step worked on it; stepping again", "workflow", name, "error", err)
		return true, nil
	}
	return did, err
}

func (e *Engine) step(ctx context.Context, name string) (bool, error) {
	p := &stepPlan{now: e.NowMs(), guesses: &e.peekGuesses}
	open, picked, err := e.readPlan(ctx, name, p)
	if err != nil || p.wf.Paused {
		return false, err
	}
	if open != nil {
		return e.handleOpen(ctx, p.wf, *open)
	}
	if !picked {
		if p.prog, err = e.Program(ctx, name, p.wf.ActiveVersion); err != nil {
			return false, err
		}
		if err := e.store.View(ctx, p.pick); err != nil {
			return false, err
		}
	}
	h, ok := p.next()
	if !ok {
		return false, nil
	}
	return e.startRun(ctx, p, h)
}

// readPlan reads, in one read transaction, what a step chooses from: the
// workflow, its open run if any, and, with the program compiled already,
// the handlers sorted into candidates (picked). Without the program
// compiled, the caller compiles it and picks in a read of its own.
func (e *Engine) readPlan(ctx context.Context, name string, p *stepPlan) (open *kt.Run, picked bool, err error) {
	// With the program known and its consumers all read ahead, the reads
	// named below are nearly always all the plan makes: a store may end
	// the snapshot with them (store.ReadsAhead), and runs this function
	// again when they were not, so it sets everything afresh. Without,
	// the plan reads more than it named, and would run twice.
	plan := store.ShortRead(ctx)
	latest := e.latestProgram(name)
	readsAhead := latest != nil && len(latest.Decl.Consumers) <= maxConsumersReadAhead
	if readsAhead {
		plan = store.ReadsAhead(plan)
	}
	err = e.store.View(plan, func(tx store.Tx) error {
		*p, open, picked = stepPlan{now: p.now, guesses: p.guesses}, nil, false
		store.Prefetch(tx, func(tx store.Tx) {
			prefetchPlan(tx, name, latest, readsAhead, p.guesses)
		})
		var err error
		if p.wf, err = tx.WorkflowGet(name); err != nil {
			return err
		}
		r, err := tx.RunOpen(name)
		switch {
		case err == nil:
			open = &r
			return nil
		case !errors.Is(err, kt.ErrNotFound):
			return err
		}
		if p.handlers, err = tx.HandlerList(name); err != nil {
			return err
		}
		// With the program compiled already, the candidates are sorted
		// inside the step's one read transaction.
		if p.prog = e.cachedProgram(name, p.wf.ActiveVersion); p.prog == nil || p.wf.Paused {
			return nil
		}
		picked = true
		return p.pick(tx)
	})
	return open, picked, err
}

// prefetchPlan names the plan's reads, to be made in one round trip where
// the store can: the grants too, which only a step with a run to make
// reads, and for each consumer of the program compiled last (a few) its
// oldest pending event (pick reads those of the dirty ones) and the page
// its prepare is expected to peek (readAhead reads the chosen one's): a
// consumer not chosen costs those reads in vain.
func prefetchPlan(tx store.Tx, name string, latest *script.Program, readsAhead bool, guesses *peekGuesses) {
	_, _ = tx.WorkflowGet(name)
	_, _ = tx.RunOpen(name)
	_, _ = tx.HandlerList(name)
	_, _ = tx.GrantList(name)
	if !readsAhead {
		return
	}
	for c, d := range latest.Decl.Consumers {
		_, _, _ = tx.OldestPending(name, d.Subscribe)
		if g, ok := guesses.get(name, c); ok {
			_, _, _ = tx.EventsPendingWithin(name, g.topic, g.limit, kt.MaxHostCallBytes/2)
		}
	}
}

// startRun makes and carries out the run of the handler a step chose,
// with what the plan read for it (its grants, the page read ahead). It
// reports whether the run started.
func (e *Engine) startRun(ctx context.Context, p *stepPlan, h kt.Handler) (bool, error) {
	phase := kt.PhaseExecuting
	if h.Type == kt.HandlerConsumer {
		phase = kt.PhasePreparing
	}
	run := e.newRun(p.wf, h.Name, h.Type, phase)
	started := false
	err := e.carryOut(ctx, p.wf, p.prog, &run, func(x *runExec) error {
		started = true
		x.unstored, x.grants, x.ahead = true, p.grants, p.ahead
		read := h
		x.rowRead = &read
		switch h.Type {
		case kt.HandlerConsumer:
			return x.consumer(&h)
		case kt.HandlerTask:
			return x.task(&h)
		}
		return x.producer(&h)
	})
	return started, err
}

// maxConsumersReadAhead bounds the consumers whose oldest pending event a
// step's plan reads ahead, dirty or not (a read each).
const maxConsumersReadAhead = 4

// stepPlan is what a step reads to choose the next run of a workflow.
type stepPlan struct {
	now      int64
	wf       kt.Workflow
	prog     *script.Program
	handlers []kt.Handler
	// consumers are the dirty or woken consumers, with their oldest
	// pending event; due are the producers and tasks that are due.
	consumers []consumerCandidate
	due       []kt.Handler
	// grants are the workflow's, read with the plan when it has a run to
	// make: its calls check them (checkGrant) without a read of their own.
	grants []kt.Grant
	// ahead is the page a chosen consumer's prepare is expected to peek
	// first, read with the plan (peekahead.go); guesses say which.
	ahead   *peekAhead
	guesses *peekGuesses
}

type consumerCandidate struct {
	h      kt.Handler
	oldest int64
	has    bool
}

// pick sorts the handlers into candidates.
func (p *stepPlan) pick(tx store.Tx) error {
	for _, h := range p.handlers {
		switch h.Type {
		case kt.HandlerConsumer:
			d, ok := p.prog.Decl.Consumers[h.Name]
			if !ok || !(h.Dirty || (h.WakeAt > 0 && h.WakeAt <= p.now)) {
				continue
			}
			oldest, has, err := tx.OldestPending(p.wf.Name, d.Subscribe)
			if err != nil {
				return err
			}
			p.consumers = append(p.consumers, consumerCandidate{h, oldest, has})
		case kt.HandlerProducer, kt.HandlerTask:
			_, isProducer := p.prog.Decl.Producers[h.Name]
			_, isTask := p.prog.Decl.Tasks[h.Name]
			if (isProducer || isTask) && (h.Queued || (h.NextRunAt > 0 && h.NextRunAt <= p.now)) {
				p.due = append(p.due, h)
			}
		}
	}
	if h, ok := p.next(); ok {
		gs, err := tx.GrantList(p.wf.Name)
		if err != nil {
			return fmt.Errorf("read the grants of %s: %w", p.wf.Name, err)
		}
		p.grants = append([]kt.Grant{}, gs...) // not nil: read
		if p.ahead, err = p.readAhead(tx, h, p.guesses); err != nil {
			return fmt.Errorf("read ahead what consumer %s peeks: %w", h.Name, err)
		}
	}
	return nil
}

// next chooses by SPEC §5's priority: consumers with the oldest pending
// event, then other dirty or woken consumers, then queued producers and
// tasks, then the longest due.
func (p *stepPlan) next() (kt.Handler, bool) {
	if len(p.consumers) > 0 {
		return slices.MinFunc(p.consumers, func(a, b consumerCandidate) int {
			return cmp.Or(trueFirst(a.has, b.has), cmp.Compare(a.oldest, b.oldest))
		}).h, true
	}
	if len(p.due) > 0 {
		return slices.MinFunc(p.due, func(a, b kt.Handler) int {
			return cmp.Or(trueFirst(a.Queued, b.Queued), cmp.Compare(a.NextRunAt, b.NextRunAt))
		}), true
	}
	return kt.Handler{}, false
}

// trueFirst orders true before false.
func trueFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

func (e *Engine) newRun(wf kt.Workflow, handler string, typ kt.HandlerType, phase kt.Phase) kt.Run {
	now := e.NowMs()
	return kt.Run{ID: transition.NewID(), Workflow: wf.Name, Version: wf.ActiveVersion, Handler: handler, HandlerType: typ,
		Phase: phase, Status: kt.StatusActive, CreatedAt: now, UpdatedAt: now}
}

func (x *runExec) limits() script.Limits {
	shift := x.clockShift
	if x.frozenNow != 0 {
		// The script's own clock (Date.now, new Date()) starts at the
		// frozen time too: the sandbox adds the shift to the OS clock.
		shift += x.frozenNow - time.Now().UnixMilli()
	}
	return script.Limits{Timeout: x.pol.HandlerTimeout, MemoryLimit: int64(x.pol.MemoryLimit), ClockShift: shift, ChanceSeed: x.chanceSeed}
}

func set(list []string) map[string]bool {
	m := map[string]bool{}
	for _, s := range list {
		m[s] = true
	}
	return m
}

func checkSize(what string, raw json.RawMessage) error {
	if len(raw) > MaxJSONBytes {
		return kt.Errorf(kt.ClassLogic, "%s is %d bytes, more than the limit of %d bytes; keep it small and store references", what, len(raw), MaxJSONBytes)
	}
	return nil
}
