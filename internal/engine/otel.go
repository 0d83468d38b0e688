package engine

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	otrace "go.opentelemetry.io/otel/trace"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// Traces in OpenTelemetry (keep.toml's [otel], docs/design.md): a span per
// run step, a child per phase, a grandchild per connector call. They are
// made here, where runs and calls happen; package daemon builds the
// exporter and hands the engine a Tracer (Options.Tracer). Without one,
// x.span stays nil and every function below returns at its first line:
// no span, no attribute, no allocation. The run's own trace (TraceEntry,
// what keep show run and the page show) is written as before, whatever
// this does.

// The attributes of keep's spans.
const (
	AttrRunID        = "keep.run.id"
	AttrWorkflow     = "keep.workflow"
	AttrVersion      = "keep.workflow.version"
	AttrHandler      = "keep.handler"
	AttrHandlerType  = "keep.handler.type"
	AttrRetryOf      = "keep.run.retry_of"
	AttrRunStatus    = "keep.run.status"
	AttrRunPhase     = "keep.run.phase"
	AttrRecorded     = "keep.run.recorded"
	AttrInputID      = "keep.input.id"
	AttrInputIDs     = "keep.input.ids"
	AttrTool         = "keep.call.tool"
	AttrMethod       = "keep.call.method"
	AttrCallKind     = "keep.call.kind"
	AttrOutcome      = "keep.call.outcome"
	AttrReconcile    = "keep.reconcile.answer"
	AttrErrorClass   = "keep.error.class"
	AttrMutationNote = "keep.mutation.note"
	AttrWebhook      = "keep.webhook"
	AttrDeliveryID   = "keep.delivery.id"
	AttrDelivery     = "keep.delivery.status"
	AttrDeliveryWhy  = "keep.delivery.why"
	AttrInputs       = "keep.delivery.inputs"
	AttrEvents       = "keep.delivery.events"
)

// maxSpanInputs bounds the inputs one run span names: a producer may
// register thousands, and a span is no place for a list that long.
const maxSpanInputs = 100

// carryOut carries out run: its runExec (newExec), the run's span around
// do, ended with what the run came to.
func (e *Engine) carryOut(ctx context.Context, wf kt.Workflow, prog *script.Program, run *kt.Run, do func(x *runExec) error) error {
	x, err := e.newExec(ctx, wf, prog, run)
	if err != nil {
		return err
	}
	x.startRun()
	err = do(x)
	x.endRun(err)
	return err
}

// startRun opens the run's span when keep traces and the sampler keeps it
// (a run sampled out makes no child spans either).
func (x *runExec) startRun() {
	if x.e.tracer == nil || x.dry {
		return
	}
	r := x.run
	attrs := []attribute.KeyValue{attribute.String(AttrRunID, r.ID), attribute.String(AttrWorkflow, r.Workflow),
		attribute.Int64(AttrVersion, r.Version), attribute.String(AttrHandler, r.Handler), attribute.String(AttrHandlerType, string(r.HandlerType))}
	if r.RetryOf != "" {
		attrs = append(attrs, attribute.String(AttrRetryOf, r.RetryOf))
	}
	ctx, span := x.e.tracer.Start(x.ctx, "run "+r.Workflow+"/"+r.Handler, otrace.WithAttributes(attrs...))
	if !span.IsRecording() {
		span.End()
		return
	}
	x.ctx, x.span = ctx, span
}

// endRun ends the run's span: where the run got to, the inputs it worked
// on, and an error status when it failed (its class, its message as keep
// stored it: masked and bounded) or the step itself did.
func (x *runExec) endRun(err error) {
	if x.span == nil {
		return
	}
	r := x.run
	x.span.SetAttributes(attribute.String(AttrRunStatus, string(r.Status)), attribute.String(AttrRunPhase, string(r.Phase)))
	if x.unrecorded {
		// Nothing of it was stored — an empty poll (prepare reserved
		// nothing), or a selection a person changed meanwhile: keep runs
		// shows no such run, and the span says it was a poll.
		x.span.SetName("poll " + r.Workflow + "/" + r.Handler)
		x.span.SetAttributes(attribute.Bool(AttrRecorded, false))
	}
	switch len(x.inputs) {
	case 0:
	case 1:
		x.span.SetAttributes(attribute.String(AttrInputID, x.inputs[0]))
	default:
		x.span.SetAttributes(attribute.StringSlice(AttrInputIDs, x.inputs))
	}
	switch {
	case r.ErrorClass != "":
		x.span.SetAttributes(attribute.String(AttrErrorClass, string(r.ErrorClass)))
		x.span.SetStatus(codes.Error, string(r.ErrorClass)+": "+r.ErrorMessage)
	case errors.Is(err, script.ErrStopping), errors.Is(err, store.ErrFenced):
		// Not the run's failure: it is recovered by the next start, or
		// by the node that took the workflow over.
		x.span.AddEvent(kt.Clip(redact.String(err.Error()), MaxErrorText))
	case err != nil:
		x.span.SetStatus(codes.Error, kt.Clip(redact.String(err.Error()), MaxErrorText))
	}
	x.span.End()
}

// phaseSpan is one phase's span; nil when the run is not traced.
type phaseSpan struct {
	span   otrace.Span
	parent context.Context
}

// startPhase opens a phase's span as the parent of what the phase does
// (x.ctx carries it to the calls): defer x.startPhase(name).end(x).
func (x *runExec) startPhase(name string) *phaseSpan {
	if x.span == nil {
		return nil
	}
	ctx, span := x.e.tracer.Start(x.ctx, name, otrace.WithAttributes(x.whose()...))
	p := &phaseSpan{span: span, parent: x.ctx}
	x.ctx, x.phase = ctx, span
	return p
}

func (p *phaseSpan) end(x *runExec) {
	if p == nil {
		return
	}
	x.ctx, x.phase = p.parent, nil
	p.span.End()
}

// whose are the attributes that say whose a phase or a call is: the run's
// id and workflow (a webhook's handler has no run: its workflow alone).
func (x *runExec) whose() []attribute.KeyValue {
	if x.run.HandlerType == kt.HandlerWebhook {
		return []attribute.KeyValue{attribute.String(AttrWorkflow, x.run.Workflow)}
	}
	return []attribute.KeyValue{attribute.String(AttrRunID, x.run.ID), attribute.String(AttrWorkflow, x.run.Workflow)}
}

// phaseReconcile is the span of a step that checks a write whose outcome
// is unknown (a background attempt).
const phaseReconcile = "reconcile"

// reconcileInPhase is reconcile as a phase of its step: a background
// attempt, or a retry's check of a write that may have happened before the
// run goes on (part of mutate).
func (x *runExec) reconcileInPhase(mut *kt.Mutation, when reconcileAttempt) (bool, error) {
	name := phaseReconcile
	if when == inlineAttempt {
		name = string(phaseMutate)
	}
	defer x.startPhase(name).end(x)
	return x.reconcile(mut, when)
}

// phaseFailed marks the phase under way failed with the run's class and
// message (failWith).
func (x *runExec) phaseFailed(class kt.ErrorClass, msg string) {
	if x.phase == nil {
		return
	}
	x.phase.SetAttributes(attribute.String(AttrErrorClass, string(class)))
	x.phase.SetStatus(codes.Error, string(class)+": "+msg)
}

// noteInputs records inputs the run works on, for its span.
func (x *runExec) noteInputs(ids ...string) {
	if x.span == nil {
		return
	}
	for _, id := range ids {
		if len(x.inputs) == maxSpanInputs {
			return
		}
		if id != "" && !containsString(x.inputs, id) {
			x.inputs = append(x.inputs, id)
		}
	}
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// mutationEvent puts a ledger line (already applied, in_flight, a
// conflict) on the phase's span.
func (x *runExec) mutationEvent(method, note string) {
	if x.phase == nil {
		return
	}
	x.phase.AddEvent("mutation", otrace.WithAttributes(attribute.String(AttrMethod, method), attribute.String(AttrMutationNote, note)))
}

// startCall opens a connector call's span under the phase's: name is
// "call" or "reconcile".
func (x *runExec) startCall(ctx context.Context, name, tool, method string) (context.Context, otrace.Span) {
	if x.span == nil {
		return ctx, nil
	}
	attrs := append(x.whose(), attribute.String(AttrTool, tool), attribute.String(AttrMethod, method))
	if in := x.callInput(); in != "" {
		attrs = append(attrs, attribute.String(AttrInputID, in))
	}
	return x.e.tracer.Start(ctx, name+" "+tool+"."+method, otrace.WithSpanKind(otrace.SpanKindClient), otrace.WithAttributes(attrs...))
}

// callInput is the input a call is made for, when it is one: the item a
// task is in, or the one input a consumer's work descends from.
func (x *runExec) callInput() string {
	if x.item != "" {
		return x.item
	}
	if len(x.inputs) == 1 {
		return x.inputs[0]
	}
	return ""
}

// endCall ends a call's span with its outcome: a write applied, failed
// (certainly not applied) or unknown; a read ok or failed; the error's
// class and message (masked by do) as its status.
func endCall(span otrace.Span, m *connector.Method, call connector.Call, res connector.Result) {
	if span == nil {
		return
	}
	kind, outcome := "read", "ok"
	if m.KindFor(call.Args) == connector.KindMutate {
		kind, outcome = "write", "applied"
	}
	if res.Err != nil {
		outcome = "failed"
		if res.Outcome == connector.OutcomeUncertain {
			outcome = "unknown"
		}
		span.SetAttributes(attribute.String(AttrErrorClass, string(res.Err.Class)))
		span.SetStatus(codes.Error, string(res.Err.Class)+": "+kt.Clip(res.Err.Message, MaxErrorText))
	}
	span.SetAttributes(attribute.String(AttrCallKind, kind), attribute.String(AttrOutcome, outcome))
	span.End()
}

// endProbe ends a reconcile probe's span with its answer.
func endProbe(span otrace.Span, status connector.ReconcileStatus, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String(AttrCallKind, "reconcile"), attribute.String(AttrReconcile, string(status)))
	if err != nil {
		span.SetStatus(codes.Error, kt.Clip(err.Error(), MaxErrorText))
	}
	span.End()
}

// deliverySpan is the span intake put in ctx (a delivery's: intake.Webhooks), for the handler's
// runExec; nil when keep does not trace the delivery.
func (e *Engine) deliverySpan(ctx context.Context) otrace.Span {
	if e.tracer == nil {
		return nil
	}
	if s := otrace.SpanFromContext(ctx); s.IsRecording() {
		return s
	}
	return nil
}
