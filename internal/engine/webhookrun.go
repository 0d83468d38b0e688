package engine

import (
	"context"
	"encoding/json"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/transition"
	otrace "go.opentelemetry.io/otel/trace"
)

// A webhook's delivery is intake's (intake.Webhooks: the request, its
// verification, its record and holding, its commit); the engine runs its
// handler in the sandbox, as a producer runs (RunWebhook), and lends it
// the few reads below.

// WebhookTarget is what a delivery runs: the webhook Webhook declared by
// the program Program of the workflow Workflow's active version Version.
type WebhookTarget struct {
	Workflow kt.Workflow
	Version  kt.Version
	Program  *script.Program
	Webhook  script.Webhook
}

// WebhookMade is what a webhook's handler registered and published;
// Created names the inputs that were new when it looked (an earlier
// delivery's inputs are created by "webhook" too: only these get a first
// attempt). Failed is the handler's failure as a run's trace says it
// (redacted, clipped) when HandlerFailed — a flag of its own, so that an
// error whose text is empty is still a failure, never an accepted
// delivery; NeedsGrant is the grant item that failure asks for, "" when it
// asks for none.
type WebhookMade struct {
	Inputs        []kt.Input
	Publishes     []transition.Publish
	Created       map[string]bool
	HandlerFailed bool
	Failed        string
	NeedsGrant    string
}

// RunWebhook runs t's handler on req (hookreq.Request: the handler's
// argument) in the sandbox, under the workflow's policy, with a
// producer's calls (reads, registerInput, publish to what the webhook
// declares), and hands what it made to settle, which writes it (intake's
// commit, or its hold or record of a failure) and whose error it returns.
// settle runs inside the handler's phase, so the phase's span covers the
// delivery's commit as a producer's covers its own. An error before
// settle is keep's own; the handler's failure is in WebhookMade.Failed.
func (e *Engine) RunWebhook(ctx context.Context, t WebhookTarget, req json.RawMessage, settle func(WebhookMade) error) error {
	w, v, wh := t.Workflow, t.Version, t.Webhook
	pol, err := e.PolicyFor(w)
	if err != nil {
		return err
	}
	run := &kt.Run{ID: transition.CreatedByWebhook, Workflow: w.Name, Version: v.ID, Handler: wh.Name, HandlerType: kt.HandlerWebhook, Phase: kt.PhaseExecuting}
	x := &runExec{e: e, ctx: ctx, wf: w, prog: t.Program, run: run, tr: &trace{}, reg: e.connectorsOf(w), pol: pol, span: e.deliverySpan(ctx)}
	defer x.startPhase(string(phaseWebhook)).end(x)
	hs := x.host(phaseWebhook)
	hs.allowPublish, hs.inputByKey, hs.knownInputs = set(wh.Publishes), map[string]string{}, map[string]bool{}
	if _, err := x.invoke(hs, req); err != nil {
		made := WebhookMade{HandlerFailed: true, Failed: kt.Clip(redact.String(err.Error()), maxTraceText)}
		if item := kt.NeededGrant(err.Error()); item != "" && kt.ClassOf(err) == kt.ClassPermission {
			// The input source (or what else the handler reaches) is not
			// granted yet: keep's reason, not the sender's.
			made.NeedsGrant = item
		}
		return settle(made)
	}
	created := map[string]bool{}
	for i := range hs.inputs {
		if hs.inputs[i].LastRun == run.ID {
			hs.inputs[i].LastRun = "" // no run made it
			created[hs.inputs[i].ID] = true
		}
	}
	return settle(WebhookMade{Inputs: hs.inputs, Publishes: hs.publishes, Created: created})
}

// Tracer is the tracer of keep's spans (Options.Tracer), nil when keep
// does not trace: a delivery's span is intake's, its handler's phase and
// calls the engine's, as children (deliverySpan).
func (e *Engine) Tracer() otrace.Tracer { return e.tracer }

// OpensSecrets says whether this engine opens secrets (keep serve's does;
// Options.Secret): a webhook verified with one waits for it otherwise.
func (e *Engine) OpensSecrets() bool { return e.secret != nil }

// OpenSecret opens the secret name through keep's own; kt.ErrNotFound
// when keep does not have it. Only when OpensSecrets.
func (e *Engine) OpenSecret(ctx context.Context, name string) (string, error) {
	return e.secret(ctx, name)
}

// NoteDelivered tells the observer (metrics) what keep made of one
// delivery to a declared webhook.
func (e *Engine) NoteDelivered(wf, webhook string, status kt.DeliveryStatus) {
	if e.observer != nil {
		e.observer.Delivered(wf, webhook, status)
	}
}
