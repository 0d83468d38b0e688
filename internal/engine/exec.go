package engine

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
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
	// reg holds the connectors the workflow's runs call (Engine.connectorsOf).
	reg *connector.Registry
	// grants are what a person granted the workflow (read at the first call).
	grants []kt.Grant
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
}

// newExec starts carrying out run; its trace continues the run's own.
func (e *Engine) newExec(ctx context.Context, wf kt.Workflow, prog *script.Program, run *kt.Run) *runExec {
	return &runExec{e: e, ctx: ctx, wf: wf, prog: prog, run: run, tr: loadTrace(run.Trace), reg: e.connectorsOf(wf)}
}

// finished tells the observer about a run that ended its step without an
// error of the host (err is the step's result).
func (x *runExec) finished(err error) {
	if err == nil {
		x.e.runFinished(x.run)
	}
}

// save writes the run, with its trace, in one transition together with
// what with writes (nil: the run alone).
func (x *runExec) save(with func(tx store.Tx) error) error {
	x.run.Trace = x.tr.json()
	return x.e.update(x.ctx, x.wf.Name, func(tx store.Tx) error {
		if with != nil {
			if err := with(tx); err != nil {
				return err
			}
		}
		return putRun(tx, *x.run)
	})
}

// secrets opens the secrets this run's calls name (connector.FillSecrets).
func (x *runExec) secrets() connector.SecretFunc {
	if x.e.secret == nil {
		return nil
	}
	return func(name string) (string, error) { return x.e.secret(x.ctx, name) }
}

// do makes a connector call with the run's secrets at hand and returns its
// answer with every value keep knows to be secret masked (redact.Learn):
// a server that echoes a header back shows the script, the trace and the
// ledger only the mask.
func (x *runExec) do(ctx context.Context, m *connector.Method, call connector.Call) connector.Result {
	call.Secret = x.secrets()
	return maskResult(m.Do(ctx, call))
}

// probe is do for a reconcile probe.
func (x *runExec) probe(ctx context.Context, m *connector.Method, call connector.Call) (connector.ReconcileStatus, any, error) {
	call.Secret = x.secrets()
	status, value, err := m.Reconcile(ctx, call)
	if err != nil {
		err = errors.New(redact.String(err.Error()))
	}
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
	kind, name := h.phase.invocation()
	return x.e.invoke(x.prog, script.Invocation{Kind: kind, Name: x.run.Handler, Phase: name,
		Args: args, Tools: x.reg.Tools(), Host: h.call, Limits: x.e.limits()})
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
)

// invocation names the handler kind and the phase as the sandbox knows them.
func (p hostPhase) invocation() (kt.HandlerType, string) {
	switch p {
	case phaseProducer:
		return kt.HandlerProducer, "handler"
	case phaseTask:
		return kt.HandlerTask, "run"
	}
	return kt.HandlerConsumer, string(p)
}

// phaseNote adds a phase line to the trace.
func (x *runExec) phaseNote(phase, text string) {
	x.tr.add(TraceEntry{At: x.e.nowMs(), Kind: "phase", Phase: phase, Text: text})
}

// declView is the part of the run's consumer declaration the host checks
// calls against.
func (x *runExec) declView() declView {
	d := x.prog.Decl.Consumers[x.run.Handler]
	return declView{publishes: set(d.Publishes), subscribe: set(d.Subscribe)}
}
