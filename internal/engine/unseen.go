package engine

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// Judging a repair on inputs keep has not seen (issue 39). Replaying done
// work (replay.go) shows what a repair does to the past; a repair that
// writes otherwise only for an id above the highest seen, a date to come,
// a customer no order had yet, passes it. So both versions — the one in
// place and the proposed one — run, writes intercepted and nothing sent or
// stored, on the same inputs: the failed run's own selection, and events
// made from the recorded ones (numbers and numeric ids past any seen,
// strings changed and lengthened, dates moved on, booleans flipped, one
// field at a time and all at once, ctx.now moved on). Their writes must be
// the same: tool, method, target, identity params and subkey, headers,
// payload. Where the version in place fails (the bug: a crash in prepare),
// its mutate runs on what the proposed prepare chose, as far as it goes;
// where it gives no evidence at all, the proposed write is confirmed only
// when other inputs showed both versions agree. And what the proposed
// version writes must not bring in what the version in place never used:
// a target (its host and path shape), a header name, a read of the time
// or chance. An item script and a producer are judged on their failed
// run's reads made unseen the same ways (changeRead); docs/maintainer.md
// says what is left.

// UnseenReport is what running both versions on unseen inputs found.
type UnseenReport struct {
	// Samples is how many inputs both versions ran on; Agreed how many of
	// them both wrote on, the same write.
	Samples, Agreed int
	// Differences are the inputs on which they write otherwise: Was is the
	// version in place's write, Would the proposed one's, side by side.
	Differences []Difference
	// BroughtIn names what the proposed version's writes use that the
	// version in place never did (a target shape, a header, time or chance).
	BroughtIn []string
	// Unshown names the failed run's writes keep could not compare with
	// anything the version in place does (it fails on them).
	Unshown []string
}

// unseenSample is one input both versions run on: events made by keep,
// the recorded reads of the run they come from, and the clock.
type unseenSample struct {
	name   string
	runID  string
	events []kt.Event
	trace  json.RawMessage
	shift  int64
	failed bool // the failed run's own selection
	// task: the failed run is an item script's, run again from the start
	// on both versions up to its first new write (dryTask); producer: a
	// producer's, its publishes compared
	task, producer bool
	// change makes unseen inputs of what the recorded reads answered
	// (an item script's or a producer's inputs come from its reads)
	change func(json.RawMessage) json.RawMessage
}

// sampleRun is what one version did on a sample.
type sampleRun struct {
	prepared json.RawMessage // prepare's value; nil when it failed
	call     *capturedCall   // the write mutate made; nil for none
	m        *connector.Method
	err      error
}

const (
	maxUnseenBases   = 10
	maxUnseenSamples = 120
	maxChanceRuns    = 8
	dayMs            = int64(24 * time.Hour / time.Millisecond)
)

// CompareUnseen runs the version in place (version) and the proposed
// script src on inputs keep has not seen, made from the consumer runs of
// version and from the failed run failedRun, and reports where their writes
// differ and what the proposed one brings in. Its phases: read the runs
// the inputs are made from (readUnseen), make the inputs (samples), run
// both versions on each (compareSample), and judge what the proposed
// version's writes bring in (bringIn).
func (e *Engine) CompareUnseen(ctx context.Context, workflow string, version int64, src, failedRun string) (UnseenReport, error) {
	in, err := e.readUnseen(ctx, workflow, version, failedRun)
	if err != nil {
		return UnseenReport{}, err
	}
	oldProg, err := script.Compile("in-place.js", in.v.Script)
	if err != nil {
		return UnseenReport{}, err
	}
	newProg, err := script.Compile("proposed.js", src)
	if err != nil {
		return UnseenReport{}, err
	}
	pol, err := e.PolicyFor(in.wf)
	if err != nil {
		return UnseenReport{}, err
	}
	c := &unseenComparison{e: e, ctx: ctx, in: in, workflow: workflow, version: version, oldProg: oldProg, newProg: newProg, pol: pol,
		// One time for every run of the comparison (a write stamped with
		// ctx.now() is the same on both versions).
		frozenNow: e.NowMs()}
	c.failedCompleted = in.failedCompleted()
	samples := in.samples(c.failedCompleted, c.frozenNow)
	handlers := in.handlers()
	c.oldShapes, c.oldHeaders = ledgerShapes(in.ledger)
	for si, s := range samples {
		// Each input its own sequences of chance (the same for both
		// versions on it): a trigger on chance meets many values.
		seeds := [2]int64{
			(unseenSeeds[0]+int64(si)*104729)%2147483646 + 1,
			(unseenSeeds[1]+int64(si)*104729)%2147483646 + 1,
		}
		for handler := range handlers {
			c.compareSample(s, handler, seeds)
		}
	}
	c.bringIn(src)
	return c.rep, nil
}

// unseenInputs is what CompareUnseen reads: the workflow and the version
// in place, the runs whose inputs it changes (bases: done consumer runs
// that reserved events; failed: the failed run) with their events, the
// ledger, and the handlers' states both versions start from.
type unseenInputs struct {
	wf         kt.Workflow
	v          kt.Version
	failed     kt.Run
	bases      []kt.Run
	ledger     []kt.Mutation
	baseEvents map[string][]kt.Event      // by run id
	states     map[string]json.RawMessage // by handler
}

// readUnseen reads, in one read transaction, what CompareUnseen makes its
// inputs from.
func (e *Engine) readUnseen(ctx context.Context, workflow string, version int64, failedRun string) (*unseenInputs, error) {
	in := &unseenInputs{baseEvents: map[string][]kt.Event{}, states: map[string]json.RawMessage{}}
	err := e.store.View(ctx, func(tx store.Tx) error {
		var err error
		if in.wf, err = tx.WorkflowGet(workflow); err != nil {
			return err
		}
		if in.v, err = tx.VersionGet(workflow, version); err != nil {
			return err
		}
		if in.ledger, err = tx.MutationList(workflow); err != nil {
			return err
		}
		if err := in.readBases(tx, workflow, version); err != nil {
			return err
		}
		if failedRun != "" {
			// A failed run not found, or an item script's or a
			// producer's, ends the reads: the handlers' states are then
			// not read, and both versions start from none.
			if more, err := in.readFailed(tx, workflow, failedRun); err != nil || !more {
				return err
			}
		}
		hs, err := tx.HandlerList(workflow)
		for _, h := range hs {
			in.states[h.Name] = h.State
		}
		return err
	})
	return in, err
}

// readBases reads the newest done consumer runs of the version that
// reserved events still stored (at most maxUnseenBases), and those events.
func (in *unseenInputs) readBases(tx store.Tx, workflow string, version int64) error {
	runs, err := tx.RunsOfVersion(workflow, version, kt.StatusCommitted, maxReplayRuns)
	if err != nil {
		return err
	}
	for _, r := range runs {
		if r.HandlerType != kt.HandlerConsumer || len(in.bases) >= maxUnseenBases {
			continue
		}
		pr, err := DecodePrepareResult(r.PrepareResult)
		if err != nil || len(pr.Reservations) == 0 {
			continue
		}
		var evs []kt.Event
		for _, res := range pr.Reservations {
			for _, id := range res.IDs {
				ev, err := tx.EventGet(workflow, res.Topic, id)
				if err == nil {
					evs = append(evs, ev)
				} else if !errors.Is(err, kt.ErrNotFound) {
					return err
				}
			}
		}
		if len(evs) > 0 {
			in.bases, in.baseEvents[r.ID] = append(in.bases, r), evs
		}
	}
	return nil
}

// readFailed reads the failed run, and a consumer's its selection: the
// events it reserved, or, when it failed before it reserved, those
// pending. more says whether the reads go on (readUnseen).
func (in *unseenInputs) readFailed(tx store.Tx, workflow, failedRun string) (more bool, err error) {
	r, err := tx.RunGet(failedRun)
	if errors.Is(err, kt.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if r.HandlerType == kt.HandlerTask || r.HandlerType == kt.HandlerProducer {
		in.failed = r
		return false, nil
	}
	if r.HandlerType == kt.HandlerConsumer {
		in.failed = r
		evs, err := tx.EventsReservedBy(r.ID)
		if err != nil {
			return false, err
		}
		if len(evs) == 0 {
			// It failed before it reserved: the events prepare
			// afresh would see are its selection.
			evs, err = tx.EventList(workflow, store.EventFilter{Status: kt.EventPending, Limit: 100})
			if err != nil {
				return false, err
			}
		}
		in.baseEvents[r.ID] = evs
	}
	return true, nil
}

// eventSets are the events of every run read, a set a run.
func (in *unseenInputs) eventSets() [][]kt.Event {
	var sets [][]kt.Event
	for _, evs := range in.baseEvents {
		sets = append(sets, evs)
	}
	return sets
}

// failedCompleted is the failed run's selection completed with the fields
// other inputs had: what the version in place writes for those very
// inputs once past its crash, the target and identity the repair's write
// must keep. Nil when it lacks none, or the failed run is no consumer's.
func (in *unseenInputs) failedCompleted() []kt.Event {
	if in.failed.HandlerType != kt.HandlerConsumer {
		return nil
	}
	if c, ok := completedEvents(in.baseEvents[in.failed.ID], fieldsOf(in.eventSets())); ok {
		return c
	}
	return nil
}

// handlers names the handlers of the runs read: those both versions run.
func (in *unseenInputs) handlers() map[string]bool {
	handlers := map[string]bool{}
	for _, r := range append(in.bases, in.failed) {
		if r.ID != "" {
			handlers[r.Handler] = true
		}
	}
	return handlers
}

// samples makes the inputs both versions run on: the failed run's own
// (failedSamples), the events of every run read changed (variantsOf), cut
// to maxUnseenSamples, and then the same inputs at other hours, which are
// never cut (otherHourSamples).
func (in *unseenInputs) samples(failedCompleted []kt.Event, frozenNow int64) []unseenSample {
	samples := in.failedSamples()
	all := in.eventSets()
	seen := maxSeen(all)
	others := fieldsOf(all)
	// The failed run's first: with more kinds of change than the cap
	// holds for ten done runs, it is older done work that is cut.
	for _, r := range append([]kt.Run{in.failed}, in.bases...) {
		if r.ID == "" {
			continue
		}
		for _, vr := range variantsOf(in.baseEvents[r.ID], seen, others) {
			samples = append(samples, unseenSample{name: vr.name, runID: r.ID, events: vr.events, trace: r.Trace, shift: vr.shift})
		}
	}
	atOtherHours := in.otherHourSamples(failedCompleted, frozenNow)
	if len(samples) > maxUnseenSamples-len(atOtherHours) {
		samples = samples[:maxUnseenSamples-len(atOtherHours)]
	}
	return append(samples, atOtherHours...)
}

// failedSamples are the failed run's own inputs: a consumer's selection;
// an item script's or a producer's reads, as recorded and made unseen
// (the inputs it works on come from what it reads).
func (in *unseenInputs) failedSamples() []unseenSample {
	failed := in.failed
	task, producer := failed.HandlerType == kt.HandlerTask, failed.HandlerType == kt.HandlerProducer
	switch {
	case task || producer:
		name := "the failed run's items not reached yet"
		if producer {
			name = "the failed run's reads"
		}
		samples := []unseenSample{{name: name, runID: failed.ID, trace: failed.Trace, failed: true, task: task, producer: producer}}
		for i, change := range readChanges(failed.Trace) {
			k := readKinds[i]
			samples = append(samples, unseenSample{name: "its reads with every " + kindNoun[k] + " " + kindWords[k], runID: failed.ID, trace: failed.Trace, task: task, producer: producer,
				change: change})
		}
		return samples
	case failed.ID != "":
		return []unseenSample{{name: "the failed run's own selection", runID: failed.ID, events: in.baseEvents[failed.ID], trace: failed.Trace, failed: true}}
	}
	return nil
}

// readChanges are the changes that make a run's recorded reads unseen,
// one a kind (changeRead), in readKinds' order.
func readChanges(trace json.RawMessage) []func(json.RawMessage) json.RawMessage {
	seenReads := readsSeen(trace)
	out := make([]func(json.RawMessage) json.RawMessage, len(readKinds))
	for i, k := range readKinds {
		out[i] = func(raw json.RawMessage) json.RawMessage { return changeRead(raw, k, seenReads) }
	}
	return out
}

// consumerInputs are the events the samples at other hours are made of,
// and the run they come from: the failed run's selection completed, or
// else the first done run's; ok false with neither.
func (in *unseenInputs) consumerInputs(failedCompleted []kt.Event) (r kt.Run, evs []kt.Event, ok bool) {
	if len(failedCompleted) == 0 && len(in.bases) == 0 {
		return kt.Run{}, nil, false
	}
	evs, r = failedCompleted, in.failed
	if len(evs) == 0 {
		r = in.bases[0]
		evs = in.baseEvents[r.ID]
	}
	return r, evs, true
}

// otherHourSamples are the same inputs at other hours and on other
// weekdays: the events created and the clock read k days and k hours on
// (k = 1…23: every hour of the day, every weekday), a trigger on the hour
// of createdAt or of ctx.now (night orders, Sundays) meets it. They come
// last: a difference they show is named after those of the inputs
// changed.
func (in *unseenInputs) otherHourSamples(failedCompleted []kt.Event, frozenNow int64) []unseenSample {
	failed := in.failed
	r, evs, ok := in.consumerInputs(failedCompleted)
	var out []unseenSample
	for k := int64(1); k <= 23; k++ {
		shift := k * (dayMs + int64(time.Hour/time.Millisecond))
		name := fmt.Sprintf("%d days and %d hours on", k, k)
		switch {
		case failed.HandlerType == kt.HandlerTask || failed.HandlerType == kt.HandlerProducer:
			out = append(out, unseenSample{name: "its reads " + name, runID: failed.ID, trace: failed.Trace, shift: shift,
				task: failed.HandlerType == kt.HandlerTask, producer: failed.HandlerType == kt.HandlerProducer})
		case ok:
			moved := make([]kt.Event, len(evs))
			for i, ev := range evs {
				moved[i] = ev
				moved[i].CreatedAt += shift
			}
			out = append(out, unseenSample{name: eventNames(evs) + " " + name, runID: r.ID, events: moved, trace: r.Trace, shift: shift})
		}
	}
	if failed.HandlerType != kt.HandlerConsumer || !ok {
		return out
	}
	// The same inputs run as soon as they were created (a real run writes
	// within a second of its event; every dry run comes long after): a
	// trigger on how soon after its event a run writes meets it.
	var newest int64
	for _, ev := range evs {
		newest = max(newest, ev.CreatedAt)
	}
	out = append(out, unseenSample{name: eventNames(evs) + " run as soon as created", runID: r.ID, events: evs, trace: r.Trace, shift: newest + 1 - frozenNow})
	// A consumer's own reads made unseen too (tomorrow's stock level, a
	// file with more orders): on the same inputs, every read answered as
	// the run read it but changed one kind at a time.
	for i, change := range readChanges(r.Trace) {
		k := readKinds[i]
		out = append(out, unseenSample{name: eventNames(evs) + " with its reads' every " + kindNoun[k] + " " + kindWords[k], runID: r.ID, events: evs, trace: r.Trace,
			change: change})
	}
	return out
}

// ledgerShapes are the target shapes and header names (lower case) of the
// writes in the ledger: what the version in place is known to use.
func ledgerShapes(ledger []kt.Mutation) (shapes, headers map[string]bool) {
	shapes, headers = map[string]bool{}, map[string]bool{}
	for _, m := range ledger {
		shapes[targetShape(m.Target, nil)] = true
		var args map[string]any
		if json.Unmarshal(m.Params, &args) == nil {
			for _, h := range headerNames(args) {
				headers[strings.ToLower(h)] = true
			}
		}
	}
	return shapes, headers
}

// unseenComparison runs both versions on the samples and gathers what they
// show: the report; the target shapes and header names the version in
// place writes with (oldShapes, oldHeaders); the proposed version's writes
// (news) and those of them that depend on chance (chancy).
type unseenComparison struct {
	e                     *Engine
	ctx                   context.Context
	in                    *unseenInputs
	workflow              string
	version               int64
	oldProg, newProg      *script.Program
	pol                   config.Policy
	frozenNow             int64
	failedCompleted       []kt.Event // failedCompleted
	rep                   UnseenReport
	oldShapes, oldHeaders map[string]bool
	news                  []newWrite
	chancy                []string
	chanceRuns            int
}

// newWrite is a write of the proposed version, with what the version in
// place did on the same sample (was).
type newWrite struct {
	s        unseenSample
	shape    string
	hdrs     []string
	was, now string
}

// exec is a dry run of program p on sample s as run, chance seeded with
// seed (both versions get the same chance), the clock the sample's (moved
// on a year in some).
func (c *unseenComparison) exec(p *script.Program, s unseenSample, run kt.Run, seed int64) *runExec {
	reads := readsOf(s.trace)
	reads.change = s.change
	reads.byShape = true
	return &runExec{e: c.e, ctx: c.ctx, wf: c.in.wf, prog: p, run: &run, tr: newTrace("unseen", c.e.NowMs()), reg: c.e.connectorsOf(c.in.wf), pol: c.pol, dry: true, reads: reads, synth: s.events, clockShift: s.shift, chanceSeed: seed, frozenNow: c.frozenNow}
}

// differ records a difference, up to maxReplayDiffs.
func (c *unseenComparison) differ(d Difference) {
	if len(c.rep.Differences) < maxReplayDiffs {
		c.rep.Differences = append(c.rep.Differences, d)
	}
}

// compareSample runs both versions' handler on sample s, as the kind of
// handler the sample is for: the failed producer or item script, or a
// consumer that writes in either version.
func (c *unseenComparison) compareSample(s unseenSample, handler string, seeds [2]int64) {
	if !s.task && !s.producer && !c.newProg.Decl.Consumers[handler].Mutate && !c.oldProg.Decl.Consumers[handler].Mutate {
		return
	}
	run := kt.Run{ID: s.runID, Workflow: c.workflow, Handler: handler, HandlerType: kt.HandlerConsumer, Version: c.version}
	switch {
	case s.producer:
		if handler == c.in.failed.Handler {
			run.HandlerType = kt.HandlerProducer
			c.compareProducer(s, run, seeds[0])
		}
	case s.task:
		if handler == c.in.failed.Handler {
			run.HandlerType = kt.HandlerTask
			c.compareTask(s, run, seeds[0])
		}
	default:
		c.compareConsumer(s, run, seeds)
	}
}

// compareProducer compares what both versions of a producer register and
// publish.
func (c *unseenComparison) compareProducer(s unseenSample, run kt.Run, seed int64) {
	handler := run.Handler
	o, n := c.exec(c.oldProg, s, run, seed).producerOutput(c.in.states[handler]), c.exec(c.newProg, s, run, seed).producerOutput(c.in.states[handler])
	if o.err != nil && n.err == nil && s.failed {
		c.rep.Unshown = append(c.rep.Unshown, clipText(n.out, 300)+" (the version in place fails on it: "+clipText(o.err.Error(), 200)+")")
	}
	if o.err != nil || n.err != nil {
		return // no evidence (the version in place fails: the bug)
	}
	c.rep.Samples++
	if o.out == n.out {
		c.rep.Agreed++
		return
	}
	c.differ(Difference{RunID: s.runID, Handler: handler, What: s.name, Was: o.out, Would: n.out + " (it publishes or registers otherwise)"})
}

// compareTask compares the first new writes of both versions of an item
// script. What it brings in is judged (bringIn); its write on an item not
// reached yet is compared with nothing the version in place does, which
// crashed before it.
func (c *unseenComparison) compareTask(s unseenSample, run kt.Run, seed int64) {
	handler := run.Handler
	o, n := c.exec(c.oldProg, s, run, seed).taskFirstWrite(c.in.states[handler]), c.exec(c.newProg, s, run, seed).taskFirstWrite(c.in.states[handler])
	if s.change != nil && o.err == nil && n.err == nil {
		// Both reached a first new write on the same unseen
		// items: it must be the same.
		c.rep.Samples++
		if why := sameCall(o, n); why != "" {
			c.differ(Difference{RunID: s.runID, Handler: handler, What: s.name, Was: describeCall(o), Would: describeCall(n) + " (" + why + ")"})
		} else if n.call != nil {
			c.rep.Agreed++
		}
	}
	c.noteNew(s, o, n)
}

// compareConsumer runs both versions of a consumer on the sample's events,
// prepare and mutate, and compares their writes.
func (c *unseenComparison) compareConsumer(s unseenSample, run kt.Run, seeds [2]int64) {
	state := c.in.states[run.Handler]
	o := c.exec(c.oldProg, s, run, seeds[0]).runSample(state)
	n := c.exec(c.newProg, s, run, seeds[0]).runSample(state)
	c.rep.Samples++
	if n.err == nil && n.call != nil && c.chanceRuns < maxChanceRuns {
		c.chanceRuns++
		c.tryChance(s, run, o, n, seeds[1])
	}
	if s.failed && o.err != nil && n.err == nil && n.call != nil && c.failedCompleted != nil {
		c.compareCompleted(s, run, n, seeds[0])
	}
	if o.err != nil && n.err == nil && n.prepared != nil {
		// The version in place fails here (the bug): its mutate
		// runs on what the proposed prepare chose, as far as it goes.
		if om := c.exec(c.oldProg, s, run, seeds[0]).runMutate(n.prepared); om.err == nil {
			o = om
		}
	}
	c.noteNew(s, o, n)
	if o.call != nil {
		c.oldShapes[targetShape(targetOf(o.m, o.call.Tool, o.call.Args), s.events)] = true
		for _, h := range headerNames(o.call.Args) {
			c.oldHeaders[strings.ToLower(h)] = true
		}
	}
	c.judge(s, run.Handler, o, n)
}

// tryChance runs the proposed version (its write n) again with another
// chance (seed): a write that changes with it depends on chance, unless
// the version in place's (o) does too.
func (c *unseenComparison) tryChance(s unseenSample, run kt.Run, o, n sampleRun, seed int64) {
	state := c.in.states[run.Handler]
	n2 := c.exec(c.newProg, s, run, seed).runSample(state)
	if why := sameCall(n, n2); n2.err == nil && why != "" {
		o2 := c.exec(c.oldProg, s, run, seed).runSample(state)
		if o.err != nil || o2.err != nil || sameCall(o, o2) == "" {
			c.chancy = append(c.chancy, fmt.Sprintf("a write that depends on chance (on %s, with two sequences of Math.random and ctx.random it writes %s, then %s)", s.name, describeCall(n), describeCall(n2)))
		}
	}
}

// compareCompleted: the version in place fails on the failed run's inputs
// (the bug); once completed it writes for them, and the repair's write n
// must have that target and identity (its payload may carry the fix: a
// default where a field was missing).
func (c *unseenComparison) compareCompleted(s unseenSample, run kt.Run, n sampleRun, seed int64) {
	cs := s
	cs.events = c.failedCompleted
	oc := c.exec(c.oldProg, cs, run, seed).runSample(c.in.states[run.Handler])
	if oc.err == nil && oc.call != nil {
		if why := sameTargetAndIdentity(oc, n); why != "" {
			c.differ(Difference{RunID: s.runID, Handler: run.Handler, What: s.name,
				Was: describeCall(oc) + " (once the fields it lacks are filled)", Would: describeCall(n) + " (" + why + ")"})
		}
	}
}

// noteNew keeps the proposed version's write on a sample, if any, with
// what the version in place did there, for bringIn.
func (c *unseenComparison) noteNew(s unseenSample, o, n sampleRun) {
	if n.call == nil {
		return
	}
	was := "writes " + describeCall(o)
	if o.err != nil {
		was = "fails (" + clipText(o.err.Error(), 120) + ")"
	} else if o.call == nil {
		was = "makes no write"
	}
	c.news = append(c.news, newWrite{s: s, shape: targetShape(targetOf(n.m, n.call.Tool, n.call.Args), s.events), hdrs: headerNames(n.call.Args), was: was, now: describeCall(n)})
}

// judge compares a consumer's writes on a sample, o the version in
// place's and n the proposed one's: where both give evidence, the same
// write (and the same selection) agrees, any other is a difference.
func (c *unseenComparison) judge(s unseenSample, handler string, o, n sampleRun) {
	d := Difference{RunID: s.runID, Handler: handler, What: s.name}
	switch {
	case o.err != nil && n.err != nil:
		return // neither gives evidence
	case o.err != nil:
		if n.call != nil && s.failed {
			c.rep.Unshown = append(c.rep.Unshown, describeCall(n)+" (the version in place fails on it: "+clipText(o.err.Error(), 200)+")")
		}
		return
	case n.err != nil:
		d.Was, d.Would = describeCall(o), "failing: "+clipText(n.err.Error(), 300)
	default:
		why := sameCall(o, n)
		if why == "" && o.prepared != nil && n.prepared != nil {
			// The same write on other events consumes them: a
			// repair that selects more drops what it does not write.
			if a, b := selectionOf(o.prepared), selectionOf(n.prepared); a != b {
				why = "it selects " + b + " where version " + c.in.v.Label() + " selects " + a
			}
		}
		if why == "" {
			if n.call != nil {
				c.rep.Agreed++
			}
			return
		}
		d.Was, d.Would = describeCall(o), describeCall(n)+" ("+why+")"
	}
	c.differ(d)
}

// bringIn reports what the proposed version's writes (src) use that the
// version in place never did: a target shape, a header, the time or
// chance.
func (c *unseenComparison) bringIn(src string) {
	brought := map[string]bool{}
	bring := func(what string, w newWrite) {
		if !brought[what] {
			brought[what] = true
			c.rep.BroughtIn = append(c.rep.BroughtIn, fmt.Sprintf("%s (on %s: version %s %s | this repair would write %s)", what, w.s.name, c.in.v.Label(), w.was, w.now))
		}
	}
	for _, w := range c.news {
		if !c.oldShapes[w.shape] {
			bring("a target the version in place never writes to: "+w.shape, w)
		}
		for _, h := range w.hdrs {
			if !c.oldHeaders[strings.ToLower(h)] {
				bring("a header the version in place never sends: "+h, w)
			}
		}
	}
	c.rep.BroughtIn = append(c.rep.BroughtIn, newUnstable(c.in.v.Script, src)...)
	if len(c.chancy) > 0 {
		c.rep.BroughtIn = append(c.rep.BroughtIn, c.chancy[0])
	}
}

// runSample runs a consumer's prepare on the sample's events, and its
// mutate on what prepare chose, the write captured.
func (x *runExec) runSample(state json.RawMessage) sampleRun {
	dv := x.declView()
	h := x.host(phasePrepare)
	h.decl = dv
	out, err := x.invoke(h, state)
	if err == nil {
		err = x.reads.missErr()
	}
	if err != nil {
		return sampleRun{err: fmt.Errorf("prepare: %w", err)}
	}
	pr, err := DecodePrepareResult(out.Value)
	if err != nil {
		return sampleRun{err: fmt.Errorf("prepare: %w", err)}
	}
	if len(pr.Reservations) == 0 || !x.prog.Decl.Consumers[x.run.Handler].Mutate {
		return sampleRun{prepared: out.Value}
	}
	r := x.runMutate(out.Value)
	r.prepared = out.Value
	return r
}

// taskFirstWrite runs an item script again from the start (dryTask: done
// writes replay from the ledger, items are never written) and returns the
// first new write it reaches.
func (x *runExec) taskFirstWrite(state json.RawMessage) sampleRun {
	h := x.host(phaseTask)
	h.task = &taskState{}
	_, err := x.invoke(h, state)
	var dw *errDryWrite
	if errors.As(err, &dw) {
		if dw.m == nil {
			return sampleRun{}
		}
		return sampleRun{call: &capturedCall{Tool: dw.tool, Method: dw.m.Name, Args: dw.args}, m: dw.m}
	}
	if err == nil {
		err = x.reads.missErr()
	}
	if err != nil {
		return sampleRun{err: err}
	}
	return sampleRun{}
}

// producerRun is what a producer did in a dry run: its registered inputs
// and publishes, in one comparable text.
type producerRun struct {
	out string
	err error
}

// producerOutput runs a producer (dryProducer: what it registers and
// publishes is collected, never stored).
func (x *runExec) producerOutput(state json.RawMessage) producerRun {
	h := x.host(phaseProducer)
	h.allowPublish, h.inputByKey, h.knownInputs = set(x.prog.Decl.Producers[x.run.Handler].Publishes), map[string]string{}, map[string]bool{}
	_, err := x.invoke(h, state)
	if err == nil {
		err = x.reads.missErr()
	}
	if err != nil {
		return producerRun{err: err}
	}
	var parts []string
	for _, in := range h.inputs {
		parts = append(parts, "input "+in.Key+" "+in.Title)
	}
	for _, p := range h.publishes {
		parts = append(parts, "event "+p.Topic+"/"+p.MessageID+" "+clipText(string(p.Payload), 300))
	}
	return producerRun{out: clipText(strings.Join(parts, "; "), 1500)}
}

// readsSeen is the highest number at every field path of what a run's
// reads answered (JSON inside strings included).
func readsSeen(trace json.RawMessage) map[string]float64 {
	out := map[string]float64{}
	for _, e := range readsOf(trace).entries {
		var v any
		if json.Unmarshal(e.Result, &v) != nil {
			continue
		}
		walkExpanded(expandJSON(v), "", func(path string, leaf any) {
			if n, ok := numberOf(leaf); ok {
				if cur, had := out[path]; !had || n > cur {
					out[path] = n
				}
			}
		})
	}
	return out
}

// walkExpanded is walkPaths through JSON held in strings (expandJSON),
// its fields at the string's path.
func walkExpanded(v any, path string, fn func(string, any)) {
	switch t := v.(type) {
	case jsonInString:
		walkExpanded(t.v, path, fn)
	case map[string]any:
		for k, x := range t {
			walkExpanded(x, strings.TrimPrefix(path+"."+k, "."), fn)
		}
	case []any:
		for _, x := range t {
			walkExpanded(x, path+"[]", fn)
		}
	default:
		fn(path, v)
	}
}

// expandJSON decodes the strings of v that hold a JSON object or array
// (a file's content), so that their fields are changed too.
func expandJSON(v any) any {
	return mapLeaves(v, "", func(_ string, leaf any) (any, bool) {
		s, ok := leaf.(string)
		if !ok || len(s) < 2 || (s[0] != '{' && s[0] != '[') {
			return nil, false
		}
		var inner any
		if json.Unmarshal([]byte(s), &inner) != nil {
			return nil, false
		}
		return jsonInString{expandJSON(inner)}, true
	})
}

// jsonInString is JSON that was a string, encoded back into one.
type jsonInString struct{ v any }

func (j jsonInString) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(j.v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(string(b))
}

// changeRead makes an unseen input of a read's answer: every leaf the
// kind applies to changed, inside JSON held in strings too.
func changeRead(raw json.RawMessage, kind string, seen map[string]float64) json.RawMessage {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return raw
	}
	var walk func(v any, path string) any
	walk = func(v any, path string) any {
		switch t := v.(type) {
		case map[string]any:
			out := make(map[string]any, len(t))
			for k, x := range t {
				out[k] = walk(x, strings.TrimPrefix(path+"."+k, "."))
			}
			return out
		case []any:
			out := make([]any, len(t))
			for i, x := range t {
				out[i] = walk(x, path+"[]")
			}
			return out
		case jsonInString:
			return jsonInString{walk(t.v, path)}
		}
		if n, ok := changedLeaf(kind, path, v, seen); ok {
			return n
		}
		return v
	}
	if kind == "longer" || kind == "empty" {
		r, _ := resizeLists(completeArrays(expandJSON(v)), kind)
		b, err := json.Marshal(r)
		if err != nil {
			return raw
		}
		return b
	}
	b, err := json.Marshal(walk(completeArrays(expandJSON(v)), ""))
	if err != nil {
		return raw
	}
	return b
}

// resizeLists gives every outermost list in v more elements than one read
// or peek can answer (its own repeated, kind "longer") or none ("empty");
// did says whether v held a list.
func resizeLists(v any, kind string) (out any, did bool) {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			var d bool
			m[k], d = resizeLists(x, kind)
			did = did || d
		}
		return m, did
	case []any:
		if kind == "empty" || len(t) == 0 {
			return []any{}, len(t) > 0
		}
		l := make([]any, 0, kt.MaxReadIDs+len(t))
		for len(l) <= kt.MaxReadIDs {
			l = append(l, t...)
		}
		return l, true
	case jsonInString:
		r, d := resizeLists(t.v, kind)
		return jsonInString{r}, d
	}
	return v, false
}

// completeArrays gives every object in an array the fields its siblings
// have and it lacks (the value of the first that has it): the input the
// version in place crashed on (a job without a customer) becomes one it
// runs past, so both versions are compared on it.
func completeArrays(v any) any {
	switch t := v.(type) {
	case jsonInString:
		return jsonInString{completeArrays(t.v)}
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = completeArrays(x)
		}
		return out
	case []any:
		fields := map[string]any{}
		for _, x := range t {
			if m, ok := x.(map[string]any); ok {
				for k, f := range m {
					if _, had := fields[k]; !had {
						fields[k] = f
					}
				}
			}
		}
		out := make([]any, len(t))
		for i, x := range t {
			if m, ok := x.(map[string]any); ok {
				c := make(map[string]any, len(fields))
				for k, f := range fields {
					c[k] = f
				}
				for k, f := range m {
					c[k] = f
				}
				x = c
			}
			out[i] = completeArrays(x)
		}
		return out
	}
	return v
}

// readKinds are the ways a read's answer is made unseen.
var readKinds = []string{"complete", "past", "far", "huge", "below", "fraction", "other", "long", "wide", "later", "flip", "longer", "empty"}

var kindNoun = map[string]string{"complete": "field", "past": "number", "far": "number", "huge": "number", "below": "number", "fraction": "number", "wide": "string", "longer": "list", "empty": "list", "other": "string", "long": "string", "later": "date", "flip": "boolean"}

// selectionOf names the events a prepare's value reserves, sorted.
func selectionOf(prepared json.RawMessage) string {
	pr, err := DecodePrepareResult(prepared)
	if err != nil {
		return "nothing (its value does not decode)"
	}
	var ids []string
	for _, r := range pr.Reservations {
		for _, id := range r.IDs {
			ids = append(ids, r.Topic+"/"+id)
		}
	}
	if len(ids) == 0 {
		return "nothing"
	}
	sort.Strings(ids)
	return strings.Join(ids, ", ")
}

// runMutate runs mutate on a prepared value, the write captured.
func (x *runExec) runMutate(prepared json.RawMessage) sampleRun {
	if !x.prog.Decl.Consumers[x.run.Handler].Mutate {
		return sampleRun{}
	}
	hm := x.host(phaseMutate)
	hm.decl = x.declView()
	if _, err := x.invoke(hm, preparedArg(prepared)); err != nil && !errors.Is(err, script.ErrSuspend) {
		return sampleRun{err: fmt.Errorf("mutate: %w", err)}
	}
	if err := x.reads.missErr(); err != nil {
		return sampleRun{err: err}
	}
	if hm.captured == nil {
		return sampleRun{}
	}
	m, err := x.reg.Method(hm.captured.Tool, hm.captured.Method)
	if err != nil {
		return sampleRun{err: err}
	}
	return sampleRun{call: hm.captured, m: m}
}

// describeCall names a write for people: tool, method, target, headers
// and payload.
func describeCall(r sampleRun) string {
	if r.call == nil {
		return "no write"
	}
	s := r.call.Tool + "." + r.m.Name + " " + targetOf(r.m, r.call.Tool, r.call.Args)
	if hs := headerNames(r.call.Args); len(hs) > 0 {
		s += " headers " + strings.Join(hs, ", ")
	}
	_, payload := r.m.Split(r.call.Args)
	delete(payload, "headers")
	delete(payload, "url")
	delete(payload, "method")
	if b, err := json.Marshal(payload); err == nil && len(payload) > 0 {
		s += " " + clipText(string(b), 200)
	}
	return s
}

// sameCall says how two writes differ ("" for the same): tool and method,
// target, identity and subkey, headers, payload.
func sameCall(a, b sampleRun) string {
	switch {
	case a.call == nil && b.call == nil:
		return ""
	case a.call == nil:
		return "a write where the version in place makes none"
	case b.call == nil:
		return "no write where the version in place writes"
	case a.call.Tool != b.call.Tool || a.m.Name != b.m.Name:
		return "another tool or method"
	case targetOf(a.m, a.call.Tool, a.call.Args) != targetOf(b.m, b.call.Tool, b.call.Args):
		return "another target"
	}
	ai, ap := a.m.Split(a.call.Args)
	bi, bp := b.m.Split(b.call.Args)
	as, _ := a.call.Args["subkey"].(string)
	bs, _ := b.call.Args["subkey"].(string)
	if hashOf(ai, as) != hashOf(bi, bs) {
		return "another identity or subkey"
	}
	ah, _ := json.Marshal(a.call.Args["headers"])
	bh, _ := json.Marshal(b.call.Args["headers"])
	if string(ah) != string(bh) {
		return "other headers"
	}
	if PayloadHash(ap) != PayloadHash(bp) {
		return "another payload"
	}
	aj, _ := json.Marshal(a.call.Args)
	bj, _ := json.Marshal(b.call.Args)
	if string(aj) != string(bj) {
		return "other arguments"
	}
	return ""
}

// headerNames are the header names a write's arguments carry, sorted
// (HTTP compares them in any case).
func headerNames(args map[string]any) []string {
	h, _ := args["headers"].(map[string]any)
	var out []string
	for k := range h {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// digitRun is a number in a target: a run of digits, a fraction's too;
// negativeNumber its minus sign after a dash ("order--4" for order -4 is
// "order-*", as "order-4" is).
var (
	digitRun       = regexp.MustCompile(`[0-9]+(?:\.[0-9]+)?`)
	negativeNumber = regexp.MustCompile(`-(-[0-9])`)
)

// targetShape is a write's target with what varies from input to input
// taken out: every value of the input's events (strings of two characters
// or more) and every run of digits as "*", a URL's query values dropped
// (its names stay). "POST http://h/write/order-2" is "POST
// http://h/write/order-*".
func targetShape(target string, events []kt.Event) string {
	method, rest, ok := strings.Cut(target, " ")
	if !ok {
		method, rest = "", target
	}
	if u, err := url.Parse(rest); err == nil && u.Host != "" {
		q := u.Query()
		names := make([]string, 0, len(q))
		for k := range q {
			names = append(names, k)
		}
		sort.Strings(names)
		u.RawQuery, u.Fragment = strings.Join(names, "&"), ""
		rest = u.String()
	}
	var vals []string
	for _, ev := range events {
		var v any
		if json.Unmarshal(ev.Payload, &v) == nil {
			leaves(v, func(s string) {
				if len(s) >= 2 {
					vals = append(vals, s)
				}
			})
		}
	}
	sort.Slice(vals, func(i, j int) bool { return len(vals[i]) > len(vals[j]) })
	host, path := rest, ""
	if i := strings.Index(rest, "://"); i >= 0 {
		if j := strings.Index(rest[i+3:], "/"); j >= 0 {
			host, path = rest[:i+3+j], rest[i+3+j:]
		}
	}
	for _, s := range vals {
		path = strings.ReplaceAll(path, s, "*")
		path = strings.ReplaceAll(path, url.PathEscape(s), "*")
	}
	path = digitRun.ReplaceAllString(negativeNumber.ReplaceAllString(path, "$1"), "*")
	return strings.TrimSpace(method + " " + host + path)
}

// leaves calls fn with every string and number of a decoded JSON value.
func leaves(v any, fn func(string)) {
	switch t := v.(type) {
	case map[string]any:
		for _, x := range t {
			leaves(x, fn)
		}
	case []any:
		for _, x := range t {
			leaves(x, fn)
		}
	case string:
		fn(t)
	case float64:
		fn(strconv.FormatFloat(t, 'f', -1, 64))
	}
}

// newUnstable names the reads of the time or chance the proposed script
// makes in a handler where the version in place makes none of that kind
// (script.Analyze): a write that depends on the clock or on chance is one
// no replay can show.
func newUnstable(old, proposed string) []string {
	oa, err := script.Analyze(old)
	if err != nil {
		return nil
	}
	na, err := script.Analyze(proposed)
	if err != nil {
		return nil
	}
	had := map[string]bool{}
	for _, s := range oa.Unstable {
		for _, h := range s.Handlers {
			had[h+"\x00"+s.Text] = true
		}
	}
	var out []string
	for _, s := range na.Unstable {
		for _, h := range s.Handlers {
			if !had[h+"\x00"+s.Text] {
				out = append(out, fmt.Sprintf("a read of the time or chance the version in place does not make: %s in %s (line %d)", s.Text, h, s.Line))
			}
		}
	}
	return out
}

// maxSeen is, for every field path of the events' payloads, the highest
// number seen there (numbers and numeric strings).
func maxSeen(sets [][]kt.Event) map[string]float64 {
	out := map[string]float64{}
	for _, evs := range sets {
		for _, ev := range evs {
			var v any
			if json.Unmarshal(ev.Payload, &v) != nil {
				continue
			}
			walkPaths(v, "", func(path string, leaf any) {
				if n, ok := numberOf(leaf); ok {
					if cur, had := out[path]; !had || n > cur {
						out[path] = n
					}
				}
			})
		}
	}
	return out
}

func numberOf(v any) (float64, bool) {
	switch t := v.(type) {
	case float64:
		return t, true
	case string:
		if n, err := strconv.ParseFloat(t, 64); err == nil && t != "" && strings.TrimSpace(t) == t {
			return n, true
		}
	}
	return 0, false
}

// walkPaths calls fn with every leaf of v and its path ("a.b", "a[]").
func walkPaths(v any, path string, fn func(string, any)) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			walkPaths(t[k], strings.TrimPrefix(path+"."+k, "."), fn)
		}
	case []any:
		for _, x := range t {
			walkPaths(x, path+"[]", fn)
		}
	default:
		fn(path, v)
	}
}

// mapLeaves returns v with every leaf at a path for which change gives a
// new value replaced.
func mapLeaves(v any, path string, change func(string, any) (any, bool)) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = mapLeaves(x, strings.TrimPrefix(path+"."+k, "."), change)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = mapLeaves(x, path+"[]", change)
		}
		return out
	}
	if n, ok := change(path, v); ok {
		return n
	}
	return v
}

// unseenVariant is one input made from recorded events.
type unseenVariant struct {
	name   string
	events []kt.Event
	shift  int64
}

var dateLayouts = []string{time.RFC3339Nano, time.RFC3339, "2006-01-02T15:04:05", "2006-01-02"}

// changedLeaf is the value a leaf takes in a variant of kind: "past"
// (numbers and numeric ids past any seen), "far" (much further), "other"
// (strings changed), "long" (strings lengthened), "later" (dates moved
// on a year), "flip" (booleans). ok is false when the kind does not apply.
func changedLeaf(kind, path string, v any, seen map[string]float64) (any, bool) {
	switch t := v.(type) {
	case bool:
		return !t, kind == "flip"
	case float64:
		switch kind {
		case "past":
			return seen[path] + 1, true
		case "far":
			return seen[path] + 1000, true
		case "huge", "below", "fraction":
			return otherNumber(kind, seen[path]), true
		case "later":
			if t > 1e12 && t < 1e14 { // milliseconds since 1970
				return t + 400*float64(dayMs), true
			}
		}
		return nil, false
	case string:
		if n, ok := numberOf(t); ok {
			_ = n
			switch kind {
			case "past":
				return strconv.FormatFloat(seen[path]+1, 'f', -1, 64), true
			case "far":
				return strconv.FormatFloat(seen[path]+1000, 'f', -1, 64), true
			case "huge", "below", "fraction":
				return strconv.FormatFloat(otherNumber(kind, seen[path]), 'f', -1, 64), true
			}
			return nil, false
		}
		for _, layout := range dateLayouts {
			if d, err := time.Parse(layout, t); err == nil {
				if kind == "later" {
					return d.AddDate(1, 1, 3).Format(layout), true
				}
				return nil, false
			}
		}
		switch kind {
		case "other":
			return t + "-" + unseenWord, true
		case "long":
			return t + strings.Repeat("x", 100), true
		case "wide":
			// Other kinds of characters than any input may have had:
			// capitals, a space, an @, letters outside ASCII (a trigger
			// on a name in another script or on an e-mail address).
			return t + unseenWide + unseenWord, true
		}
	}
	return nil, false
}

var variantKinds = []string{"past", "far", "huge", "below", "fraction", "other", "long", "wide", "later", "flip"}

// otherNumber is a number of a kind no input may have had: "huge" (past
// any threshold a script could keep for tomorrow, still exact in a
// float64), "below" (negative: a refund, a return) and "fraction".
func otherNumber(kind string, seen float64) float64 {
	switch kind {
	case "huge":
		return seen + 1e12 + float64(unseenDraw%1e6)
	case "below":
		return -(seen + 1 + float64(unseenDraw%97))
	}
	return seen + 1 + float64(unseenDraw%999+1)/1000
}

// variantsOf makes inputs from recorded events: for each field and each
// kind that applies, that field changed alone; then every field changed
// at once (numbers past any seen, strings changed, dates moved on) with a
// new messageId, the events a year later and ctx.now a year on; and the
// events as they were with ctx.now a year on.
func variantsOf(evs []kt.Event, seen map[string]float64, others map[string]any) []unseenVariant {
	if len(evs) == 0 {
		return nil
	}
	var out []unseenVariant
	// The events completed with the fields other inputs had (the failed
	// run's selection lacks one: the bug): the version in place runs on
	// them past its crash, so a repair that treats what only the failed
	// input has (its note) otherwise is compared with something.
	if completed, added := completedEvents(evs, others); added {
		out = append(out, unseenVariant{name: eventNames(evs) + " with the fields other inputs had", events: completed})
		for _, vr := range variantsOf(completed, seen, nil) {
			vr.name = strings.Replace(vr.name, eventNames(completed), eventNames(evs)+" completed", 1)
			out = append(out, vr)
		}
	}
	out = append(out, unseenVariant{name: eventNames(evs) + " among many more events", events: manyMoreEvents(evs, seen)})
	out = append(out, resizedVariants(evs)...)
	out = append(out, fieldVariants(evs, seen)...)
	return append(out, togetherVariants(evs, seen)...)
}

// manyMoreEvents are more events than any run had (a trigger on how many
// are pending), their messageIds and numbers past any seen: more than the
// largest peek can answer, so that every threshold on how many one peek
// returns is crossed.
func manyMoreEvents(evs []kt.Event, seen map[string]float64) []kt.Event {
	many := append([]kt.Event(nil), evs...)
	for i := 1; len(many) <= kt.MaxReadIDs; i++ {
		for _, ev := range evs {
			c := ev
			c.ID = -int64(len(many))
			var v any
			if json.Unmarshal(ev.Payload, &v) == nil {
				c.Payload, _ = json.Marshal(mapLeaves(v, "", func(at string, leaf any) (any, bool) {
					if _, ok := numberOf(leaf); ok {
						n, ok := changedLeaf("far", at, leaf, map[string]float64{at: seen[at] + float64(i)})
						if ok && scalarText(leaf) != "" {
							c.MessageID = replaceToken(c.MessageID, scalarText(leaf), scalarText(n))
						}
						return n, ok
					}
					return nil, false
				}))
			}
			if c.MessageID == ev.MessageID {
				c.MessageID += "-" + strconv.Itoa(i)
			}
			many = append(many, c)
		}
	}
	return many
}

// resizedVariants are the events with their lists longer than any seen
// and empty (a trigger on how many lines an order has), where the
// payloads hold a list.
func resizedVariants(evs []kt.Event) []unseenVariant {
	var out []unseenVariant
	for _, kind := range []string{"longer", "empty"} {
		cp := make([]kt.Event, len(evs))
		resizedAny := false
		for i, ev := range evs {
			cp[i] = ev
			var v any
			if json.Unmarshal(ev.Payload, &v) == nil {
				if r, did := resizeLists(v, kind); did {
					cp[i].Payload, _ = json.Marshal(r)
					resizedAny = true
				}
			}
		}
		if resizedAny {
			out = append(out, unseenVariant{name: eventNames(evs) + " with every list " + kind, events: cp})
		}
	}
	return out
}

// fieldVariants are the events with one field changed, field by field
// (in the order of their paths) and kind by kind.
func fieldVariants(evs []kt.Event, seen map[string]float64) []unseenVariant {
	paths := map[string]any{}
	for _, ev := range evs {
		var v any
		if json.Unmarshal(ev.Payload, &v) == nil {
			walkPaths(v, "", func(p string, leaf any) { paths[p] = leaf })
		}
	}
	names := make([]string, 0, len(paths))
	for p := range paths {
		names = append(names, p)
	}
	sort.Strings(names)
	var out []unseenVariant
	for _, p := range names {
		for _, kind := range variantKinds {
			if _, ok := changedLeaf(kind, p, paths[p], seen); !ok {
				continue
			}
			path, k := p, kind
			out = append(out, unseenVariant{name: fmt.Sprintf("%s with %s %s", eventNames(evs), path, kindWords[k]), events: remade(evs, func(at string, leaf any) (any, bool) {
				if at != path {
					return nil, false
				}
				return changedLeaf(k, at, leaf, seen)
			}, "", 0)})
		}
	}
	return out
}

// togetherVariants are the events with every field changed at once: a
// year on; with unusual values together (a big order from a customer
// with an e-mail address: a trigger on two fields at once); and the
// events as they are, a year on.
func togetherVariants(evs []kt.Event, seen map[string]float64) []unseenVariant {
	year := 400 * dayMs
	out := []unseenVariant{{name: eventNames(evs) + " with every field changed, a year on", shift: year, events: remade(evs, func(at string, leaf any) (any, bool) {
		for _, k := range []string{"past", "later", "other"} {
			if n, ok := changedLeaf(k, at, leaf, seen); ok {
				return n, true
			}
		}
		return nil, false
	}, "-"+unseenWord, year)}}
	for _, group := range [][]string{{"huge", "wide", "later", "flip"}, {"below", "long"}, {"fraction", "wide"}} {
		var words []string
		for _, k := range group {
			words = append(words, kindWords[k])
		}
		out = append(out, unseenVariant{name: eventNames(evs) + " with every field at once " + strings.Join(words, " or "), events: remade(evs, func(at string, leaf any) (any, bool) {
			for _, k := range group {
				if n, ok := changedLeaf(k, at, leaf, seen); ok {
					return n, true
				}
			}
			return nil, false
		}, "", 0)})
	}
	return append(out, unseenVariant{name: eventNames(evs) + " a year on", shift: year, events: remade(evs, func(string, any) (any, bool) { return nil, false }, "", year)})
}

// remade is evs with change applied to every leaf of their payloads, the
// messageIds agreeing, and, with a suffix, each an event tried again
// (the suffix on a messageId the change left as it was); created later.
func remade(evs []kt.Event, change func(string, any) (any, bool), suffix string, later int64) []kt.Event {
	cp := make([]kt.Event, len(evs))
	for i, ev := range evs {
		cp[i] = ev
		var v any
		var swaps [][2]string
		if json.Unmarshal(ev.Payload, &v) == nil {
			b, _ := json.Marshal(mapLeaves(v, "", func(at string, leaf any) (any, bool) {
				n, ok := change(at, leaf)
				if ok {
					swaps = append(swaps, [2]string{scalarText(leaf), scalarText(n)})
				}
				return n, ok
			}))
			cp[i].Payload = b
		}
		// The messageId says what the payload says, as a real event's
		// does (job-4 for id 4): an input keep made is not told from
		// a real one by a messageId that disagrees with its payload.
		for _, sw := range swaps {
			if sw[0] != "" && sw[0] != sw[1] {
				cp[i].MessageID = replaceToken(cp[i].MessageID, sw[0], sw[1])
			}
		}
		if suffix != "" && cp[i].MessageID == ev.MessageID {
			cp[i].MessageID += suffix
		}
		if suffix != "" {
			cp[i].Attempt++ // an event tried again
		}
		cp[i].CreatedAt += later
	}
	return cp
}

// completedEvents gives each event's payload the top-level fields of
// others it lacks; added says whether any was.
func completedEvents(evs []kt.Event, others map[string]any) ([]kt.Event, bool) {
	completed := make([]kt.Event, len(evs))
	added := false
	for i, ev := range evs {
		completed[i] = ev
		var v map[string]any
		if json.Unmarshal(ev.Payload, &v) != nil || v == nil {
			continue
		}
		for k, x := range others {
			if _, has := v[k]; !has {
				v[k], added = x, true
			}
		}
		completed[i].Payload, _ = json.Marshal(v)
	}
	return completed, added
}

// sameTargetAndIdentity says how two writes differ in what they write to
// ("" for the same): tool and method, target, identity params and subkey.
func sameTargetAndIdentity(a, b sampleRun) string {
	switch {
	case a.call.Tool != b.call.Tool || a.m.Name != b.m.Name:
		return "another tool or method"
	case targetOf(a.m, a.call.Tool, a.call.Args) != targetOf(b.m, b.call.Tool, b.call.Args):
		return "another target"
	}
	ai, _ := a.m.Split(a.call.Args)
	bi, _ := b.m.Split(b.call.Args)
	as, _ := a.call.Args["subkey"].(string)
	bs, _ := b.call.Args["subkey"].(string)
	if hashOf(ai, as) != hashOf(bi, bs) {
		return "another identity or subkey"
	}
	return ""
}

// unseenWord and unseenSeeds are drawn when keep starts: what an unseen
// input's changed strings end with, and the two sequences of chance the
// versions compared run with. A repair cannot know them, so it cannot
// tell the inputs and chance of a dry run from real ones by a constant.
var (
	unseenWord  = randomWord()
	unseenSeeds = [2]int64{randomSeed(), randomSeed()}
	// unseenDraw moves the numbers of other kinds; unseenWide is what
	// strings in other characters gain: a space, a capital, a letter
	// outside ASCII and an @, each drawn.
	unseenDraw = randomSeed()
	unseenWide = randomWide()
)

func randomWide() string {
	n := randomSeed()
	return " " + string(rune('A'+n%26)) + string(rune(0xC0+(n/26)%0x17)) + string(rune(0x4E00+(n/700)%0x5000)) + "@"
}

func randomWord() string {
	var b [6]byte
	_, _ = crand.Read(b[:])
	for i := range b {
		b[i] = 'a' + b[i]%26
	}
	return string(b[:])
}

func randomSeed() int64 {
	var b [4]byte
	_, _ = crand.Read(b[:])
	return int64(binary.BigEndian.Uint32(b[:])%2147483646) + 1
}

// scalarText is a JSON scalar as it appears in text ("4", "ann").
func scalarText(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64)
	}
	return ""
}

// replaceToken replaces old in s where it stands alone (not inside a
// longer run of letters or digits: "1" in "job-1", not in "job-10").
func replaceToken(s, old, new string) string {
	var b strings.Builder
	alnum := func(r byte) bool { return r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], old) && (i == 0 || !alnum(s[i-1])) && (i+len(old) == len(s) || !alnum(s[i+len(old)])) {
			b.WriteString(new)
			i += len(old)
			continue
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}

// fieldsOf is, for each top-level field of the events' payloads, a value
// one of them had there.
func fieldsOf(sets [][]kt.Event) map[string]any {
	out := map[string]any{}
	for _, evs := range sets {
		for _, ev := range evs {
			var v map[string]any
			if json.Unmarshal(ev.Payload, &v) != nil {
				continue
			}
			for k, x := range v {
				if _, had := out[k]; !had {
					out[k] = x
				}
			}
		}
	}
	return out
}

var kindWords = map[string]string{"complete": "other items have", "past": "past any seen", "far": "far past any seen", "huge": "huge", "below": "negative", "fraction": "a fraction", "wide": "in other characters", "longer": "longer", "empty": "empty", "other": "changed", "long": "lengthened", "later": "a year later", "flip": "flipped"}

func eventNames(evs []kt.Event) string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Topic+"/"+ev.MessageID)
	}
	return strings.Join(out, ", ")
}

func clipText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// synthEvents answers ctx.peek and ctx.getByIds from events keep made.
func synthEvents(evs []kt.Event, method, topic string, limit int, ids []string) []kt.Event {
	var out []kt.Event
	for _, ev := range evs {
		if ev.Topic != topic {
			continue
		}
		if method == "peek" {
			if len(out) < limit {
				ev.Status = kt.EventPending
				out = append(out, ev)
			}
			continue
		}
		for _, id := range ids {
			if id == ev.MessageID {
				out = append(out, ev)
			}
		}
	}
	return out
}
