package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	otrace "go.opentelemetry.io/otel/trace"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// runExec is one run being carried out: what every step of it needs, held
// once (as River's job executor holds its job row) instead of threaded
// through every function: the engine, the step's context, the workflow, the
// compiled program of the run's version, the run and its trace.
//
// Producers (producer.go), consumers (consumer.go, emit.go, mutation.go)
// and item scripts (items.go) are methods on it; failure.go ends a run.
type runExec struct {
	e    *Engine
	ctx  context.Context
	wf   kt.Workflow
	prog *script.Program
	run  *kt.Run
	tr   *trace
	// pol is the policy the run runs under (Engine.policyFor).
	pol config.Policy
	// reg holds the connectors the workflow's runs call (Engine.connectorsOf).
	reg *connector.Registry
	// grants are what a person granted the workflow: read with the step's
	// plan (stepPlan.pick) for a new run, else at the run's first call.
	grants []kt.Grant
	// prepared is the last PrepareResult decodePrepared decoded, and the
	// bytes it was decoded from: a consumer run reads its PrepareResult
	// up to three times (judged, then at emit and at the state's save).
	prepared    PrepareResult
	preparedRaw json.RawMessage
	// ahead is the page the step's plan read for a new consumer run's
	// prepare (peekahead.go), taken by that prepare.
	ahead *peekAhead
	// dry: a dry run (DryRun) — items are read, never written, and the
	// first write that would be sent stops the run (errDryWrite).
	dry bool
	// hostBytes counts what this run's calls moved between the sandbox
	// and keep's process, both ways (kt.MaxHostBytesPerRun).
	hostBytes int
	// reads, in a dry run, answers every read from a recorded run's trace:
	// the dry run never reaches the world (replay.go).
	reads *recordedReads
	// impact: replaying done work to compare it (Engine.ReplayDone): done
	// items run again as if not done, their writes compared with the
	// ledger's; every difference is noted in diffs.
	impact bool
	diffs  []Difference
	// synth, in a comparison on unseen inputs (unseen.go), are the events
	// ctx.peek and ctx.getByIds answer with, made by keep and never
	// stored; clockShift moves ctx.now and the script's own clock on
	// (ms), chanceSeed fixes ctx.random's and Math.random's sequence
	// (0: chance as it is).
	synth      []kt.Event
	clockShift int64
	chanceSeed int64
	// frozenNow, in a comparison on unseen inputs, is the clock every run
	// of it reads (before clockShift), so that two versions, and one
	// version run again with other chance, read the same time: a write
	// stamped with ctx.now() is not told different by the milliseconds
	// between them (0: the clock as it goes).
	frozenNow int64
	// Held for the run's next write (writeHeld), which makes them durable
	// with it: reserve, the events prepare selected, not yet written as
	// reserved; outcome, the ledger row of a write whose answer (applied)
	// is not yet written. So a consumer run that writes makes two commits:
	// prepare's result and selection with the write's in_flight record,
	// then the outcome with next's publishes and the consumption.
	reserve []kt.Event
	outcome *kt.Mutation
	// Copies of what this step wrote last, so that its next commit writes
	// on them without reading the rows again (on PostgreSQL: in one round
	// trip): held, the events it reserved, as written (reserving until
	// that commit succeeded); ledger, the ledger row's id and status as
	// written. A write on a copy is conditional on the row being still
	// as the copy (store.ErrStale otherwise): writeReading then drops the
	// copies and writes again from a read. A run resumed after a restart
	// holds none.
	held, reserving []kt.Event
	ledger          ledgerMark
	// unstored: nothing of the run is written yet (a new run of Step; a
	// retry is written when it is made). A consumer run whose prepare
	// reserved nothing and that is still unstored is never written
	// (idle): an empty poll is not work a person looks at.
	unstored bool
	// rowRead is the handler's row as the step read it before the handler
	// ran (a consumer's: before prepare looked at any event; nil: not read
	// in this step). A wake-up or a queue mark that changed the row since
	// came in while the run ran, and stands at its commit
	// (saveConsumerState, commitScheduled).
	rowRead *kt.Handler
	// mutated is mutate's invocation when it ran right after prepare's,
	// in the same one (prepare's Invocation.Then): mutate takes it
	// instead of invoking the sandbox again.
	mutated *fusedMutate
	// seenPending are the events this run's handler read pending (peek,
	// getByIds): one of them not pending at checkReservations changed
	// while prepare ran (errSelectionGone), not by the script's mistake.
	// seenEvents are the same events as they were read, by topic and
	// message id: prepare's selection is checked against them when it
	// reserves only those (prepareChecks).
	seenPending map[int64]bool
	seenEvents  map[seenKey]kt.Event
	// span is the run's OpenTelemetry span, phase the phase's under way
	// (otel.go); nil when keep does not trace (the run sampled out, no
	// [otel] endpoint). inputs are the inputs the run works on, item the
	// task item it is in: attributes of the spans.
	span   otrace.Span
	phase  otrace.Span
	inputs []string
	item   string
	// unrecorded: the step ended without storing the run (an empty poll,
	// a selection a person changed): its span is a poll's.
	unrecorded bool
	// stored is the run's status as this step last wrote it, at revision
	// storedRev: while the run's revision is still that one, the store
	// holds exactly that (RunSetIfRev checks the revision), and save checks
	// a move against it without reading the row (putRunFrom).
	stored    kt.Status
	storedRev int64
}

// newExec starts carrying out run; its trace continues the run's own.
// A policy recorded for wf that does not decode is an error (a step finds
// it before it writes anything: Engine.step).
func (e *Engine) newExec(ctx context.Context, wf kt.Workflow, prog *script.Program, run *kt.Run) (*runExec, error) {
	pol, err := e.PolicyFor(wf)
	if err != nil {
		return nil, err
	}
	return &runExec{e: e, ctx: ctx, wf: wf, prog: prog, run: run, tr: loadTrace(run.Trace), reg: e.connectorsOf(wf), pol: pol}, nil
}

// finished tells the observer about a run that ended its step without an
// error of the host (err is the step's result).
func (x *runExec) finished(err error) {
	if err == nil {
		x.e.runFinished(x.run)
	}
}

// save writes the run, with its trace, in one transition together with
// what with writes (nil: the run alone) and what the run holds
// (writeHeld). When a person's decision came in while the step was under
// way, the write finds the run written since (store.ErrConflict): save
// takes the decision over (takeDecision) and writes again, so the step's
// findings and the decision both stand.
func (x *runExec) save(with func(tx store.Tx) error) error {
	return x.write(func(tx store.Tx) error {
		if with != nil {
			if err := with(tx); err != nil {
				return err
			}
		}
		return x.putRun(tx)
	})
}

// putRun writes the run (transition.PutRun) without reading its row first when the
// step knows what is stored: nothing (unstored), or what its last write
// stored at the run's revision.
func (x *runExec) putRun(tx store.Tx) error {
	switch {
	case x.unstored:
		return transition.PutNewRun(tx, x.run)
	case x.stored != "" && x.storedRev == x.run.Rev:
		return transition.PutRunFrom(tx, x.stored, x.run)
	}
	return transition.PutRun(tx, x.run)
}

// write is save's loop: fn writes the run itself (putRun). A write that
// fails leaves the run and its trace as they were before it, so the next
// try starts from the same state.
func (x *runExec) write(fn func(tx store.Tx) error) error {
	return x.writeReading(nil, fn)
}

// writeReading is write with the reads fn makes named (store.Prefetch):
// they are sent with the transaction's fence check, before fn writes,
// and so are writeHeld's and transition.PutRun's.
func (x *runExec) writeReading(reads func(tx store.Tx), fn func(tx store.Tx) error) error {
	for tries := 0; ; tries++ {
		run, tr := *x.run, *x.tr
		x.run.Trace = x.tr.json()
		pinned := len(x.reserve) > 0
		err := x.e.update(x.ctx, x.wf.Name, func(tx store.Tx) error {
			store.Prefetch(tx, func(tx store.Tx) {
				x.heldReads(tx)
				if reads != nil {
					reads(tx)
				}
				if !x.unstored && (x.stored == "" || x.storedRev != x.run.Rev) {
					_, _ = tx.RunGet(x.run.ID) // transition.PutRun's
				}
			})
			if err := x.writeHeld(tx); err != nil {
				return err
			}
			return fn(tx)
		})
		if err == nil {
			if len(x.reserving) > 0 {
				x.held = x.reserving
			}
			if x.outcome != nil {
				x.ledger = ledgerMark{id: x.outcome.ID, status: x.outcome.Status}
			}
			x.reserve, x.reserving, x.outcome, x.unstored = nil, nil, nil, false
			x.stored, x.storedRev = x.run.Status, x.run.Rev
			if pinned {
				x.e.CrashPoint(CrashAfterPrepared)
			}
			return nil
		}
		*x.run, *x.tr = run, tr
		x.reserving = nil
		if errors.Is(err, store.ErrStale) && tries < maxSaveTries {
			// A row this step held a copy of changed since it wrote it
			// (a person's action, a background check): write again from
			// what is stored, with the reads.
			x.held, x.ledger = nil, ledgerMark{}
			continue
		}
		if errors.Is(err, store.ErrEventChanged) {
			// A reservation refused (writeReservations): the selection is
			// gone, and the consumer prepares again.
			return fmt.Errorf("%w: %w", errSelectionGone, err)
		}
		if !errors.Is(err, store.ErrConflict) || tries == maxSaveTries {
			return err
		}
		if err := x.takeDecision(); err != nil {
			return err
		}
	}
}

// writeHeld writes what the run holds for its next write: the selection
// (reserved by the run) and a write's outcome.
func (x *runExec) writeHeld(tx store.Tx) error {
	var err error
	if x.reserving, err = writeReservations(tx, x.run, x.reserve, x.e.NowMs()); err != nil {
		return err
	}
	switch {
	case x.outcome == nil:
		return nil
	case x.ledger.holds(x.outcome.ID):
		return transition.PutMutationHeld(tx, *x.outcome, x.ledger.status)
	}
	return transition.PutMutation(tx, *x.outcome)
}

// ledgerMark is a ledger row as this step wrote it last (runExec.ledger).
type ledgerMark struct {
	id     string
	status kt.MutationStatus
}

// holds says the mark is row id's.
func (m ledgerMark) holds(id string) bool { return m.id != "" && m.id == id }

// heldReads are the reads writeHeld makes (store.Prefetch); its
// reservations read nothing (writeReservations).
func (x *runExec) heldReads(tx store.Tx) {
	if x.outcome != nil && !x.ledger.holds(x.outcome.ID) {
		_, _ = tx.MutationGet(x.outcome.ID)
	}
}

// maxSaveTries bounds how often one write of a step takes a decision over:
// a person decides once per run (Resolve refuses a second), so more is a bug.
const maxSaveTries = 3

// takeDecision re-reads the run after a write of this step found it written
// since: a person's decision came in while the step was under way. The
// step's findings are facts (what the target answered) and stay; the
// decision stays on the run and is carried out after this step
// (handleOpen), against what the step found — proof that a write applied
// wins over "it didn't happen". A run closed meanwhile ends the step.
func (x *runExec) takeDecision() error {
	var cur kt.Run
	if err := x.e.store.View(x.ctx, func(tx store.Tx) error {
		var err error
		cur, err = tx.RunGet(x.run.ID)
		return err
	}); err != nil {
		return err
	}
	if cur.Status.Finished() {
		return fmt.Errorf("run %s was closed (%s) while this step was under way: %w", cur.ID, cur.Status, store.ErrConflict)
	}
	x.run.Rev = cur.Rev
	if cur.Action != "" {
		x.run.Action = cur.Action
	}
	if cur.ApprovedHash != "" {
		x.run.ApprovedHash = cur.ApprovedHash
	}
	x.phaseNote(string(x.run.Phase), fmt.Sprintf("a person's decision (%s) came in while keep was working on this run; keep carries it out after this step", cur.Action))
	return nil
}

// decodeStored decodes JSON keep stored itself in the row id of table.
// JSON that does not decode was changed outside keep or is damaged: the
// caller stops with this clear error (damaged storage, issue 44) instead
// of acting on a guess (issue 24 #3).
func decodeStored(what, table, id string, raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return kt.UndecodableJSON(fmt.Sprintf("the stored %s of %s %s", what, strings.TrimSuffix(table, "s"), id), table, "id="+id, err)
	}
	return nil
}

// do makes a connector call with the run's secrets at hand and returns its
// answer with every value keep knows to be secret masked (redact.Learn):
// a server that echoes a header back shows the script, the trace and the
// ledger only the mask. The call has its span when keep traces.
func (x *runExec) do(ctx context.Context, tool string, m *connector.Method, call connector.Call) connector.Result {
	ctx, span := x.startCall(ctx, "call", tool, m.Name)
	defer x.e.flight.call(ctx, x.callOf(tool, m, call))()
	call.Secret = x.secrets(call.Args)
	res := maskResult(m.Do(ctx, call))
	endCall(span, m, call, res)
	return res
}

// probe is do for a reconcile probe.
func (x *runExec) probe(ctx context.Context, tool string, m *connector.Method, call connector.Call) (connector.ReconcileStatus, any, error) {
	ctx, span := x.startCall(ctx, "reconcile", tool, m.Name)
	probe := x.callOf(tool, m, connector.Call{Args: call.Args})
	probe.Call += " (reconcile)"
	defer x.e.flight.call(ctx, probe)()
	call.Secret = x.secrets(call.Args)
	status, value, err := m.Reconcile(ctx, call)
	if err != nil {
		err = errors.New(redact.String(err.Error()))
	}
	endProbe(span, status, err)
	return status, maskKnown(value), err
}

func maskResult(res connector.Result) connector.Result {
	res.Value = maskKnown(res.Value)
	if res.Err != nil {
		e := *res.Err
		e.Message = redact.String(e.Message)
		res.Err = &e
	}
	return res
}

// maskKnown masks the secret values in a connector's answer, and nothing
// else: an answer's "nextPageToken" is the script's to read.
func maskKnown(v any) any {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil || !redact.Known(string(b)) {
		return v
	}
	var out any
	if json.Unmarshal([]byte(redact.MaskKnown(string(b))), &out) != nil {
		return v
	}
	return out
}

// host builds the server of one phase's ctx calls.
func (x *runExec) host(phase hostPhase) *host {
	return &host{runExec: x, phase: phase, handler: x.run.Handler}
}

// invoke runs the phase of the run's handler that h serves, in the sandbox.
func (x *runExec) invoke(h *host, args ...json.RawMessage) (script.Outcome, error) {
	return x.e.invoke(x.prog, x.invocation(h, args...))
}

// invocation is the sandbox's invocation of the phase h serves.
func (x *runExec) invocation(h *host, args ...json.RawMessage) script.Invocation {
	kind, name := h.phase.invocation()
	return script.Invocation{Kind: kind, Name: x.run.Handler, Phase: name,
		Args: args, Tools: x.reg.Tools(), Host: h.call, Limits: x.limits(), Answers: h.answers(), Writes: h.writeRules(), Runtime: x.e.sandbox}
}

// writeRules tell the sandbox, in a consumer's mutate, which calls are
// writes the host takes over (connectorCall captures them), so that it
// need not ask (issue 25: a round trip fewer per run). Elsewhere a write
// is made at once (an item's) or refused.
func (h *host) writeRules() map[string]*kt.ReadsBy {
	if h.phase != phaseMutate {
		return nil
	}
	return h.reg.WriteRules()
}

// hostPhase is the handler phase a host serves; SPEC §3's table of what
// each may call is keyed by it (host.allowed).
type hostPhase string

const (
	phaseProducer hostPhase = "producer"
	phasePrepare  hostPhase = "prepare"
	phaseMutate   hostPhase = "mutate"
	phaseNext     hostPhase = "next"
	phaseTask     hostPhase = "task"
	// phaseWebhook serves a webhook's handler: a producer's calls (reads,
	// registerInput, publish) for one delivery.
	phaseWebhook hostPhase = "webhook"
)

// invocation names the handler kind and the phase as the sandbox knows them.
func (p hostPhase) invocation() (kt.HandlerType, string) {
	switch p {
	case phaseProducer:
		return kt.HandlerProducer, "handler"
	case phaseTask:
		return kt.HandlerTask, "run"
	case phaseWebhook:
		return kt.HandlerWebhook, "handler"
	}
	return kt.HandlerConsumer, string(p)
}

// phaseNote adds a phase line to the trace.
func (x *runExec) phaseNote(phase, text string) {
	x.tr.add(kt.TraceEntry{At: x.e.NowMs(), Kind: "phase", Phase: phase, Text: text})
}

// declView is the part of the run's consumer declaration the host checks
// calls against.
func (x *runExec) declView() declView {
	d := x.prog.Decl.Consumers[x.run.Handler]
	return declView{publishes: set(d.Publishes), subscribe: set(d.Subscribe)}
}

// seenKey names an event a handler read.
type seenKey struct{ topic, messageID string }

// sawPending notes an event the handler read while it was pending.
func (x *runExec) sawPending(ev kt.Event) {
	if x.seenPending == nil {
		x.seenPending, x.seenEvents = map[int64]bool{}, map[seenKey]kt.Event{}
	}
	x.seenPending[ev.ID] = true
	x.seenEvents[seenKey{ev.Topic, ev.MessageID}] = ev
}
