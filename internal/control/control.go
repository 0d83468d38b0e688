// Package control carries out people's actions: Control.Do looks an
// action up in its one table and calls its row (a decision on a blocked
// run, a workflow's pause, resume, run-now, grant and revoke, an item's
// skip and reprocess, a topic's skip-pending, a producer's reset, a
// repair's decision, a published event, a held delivery). Every row
// changes keep's state through transition (or intake, for what comes in
// from outside), never through the engine's steps, and refuses with
// keeptype's one coded error family (kt.ActionError). Deploy (deploy.go)
// is a person's act too: it calls the engine only for what the engine
// judges of a version (its check, the done work it would give other ids)
// and for the engine's writers' lock.
package control

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/clock"
	"github.com/keep-run/keep/internal/intake"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// Proof is how the actor behind a request proved who they are: the API
// authenticates (and only that) and hands Control the proof with
// WithProof; Control decides who may do what (MayAct).
type Proof int

const (
	// ProofNone: nothing (a request without the token or the secret).
	ProofNone Proof = iota + 1
	// ProofPage: keep's own page, calling the API in process (api.ForPage)
	// once keep serve's guard checked its CSRF token, and its session when
	// keep serve has a token.
	ProofPage
	// ProofToken: keep serve's --token.
	ProofToken
	// ProofSecret: the data directory's instance secret (keep's CLI).
	ProofSecret
)

type proofKey struct{}

// WithProof records how the actor of ctx was authenticated.
func WithProof(ctx context.Context, p Proof) context.Context {
	return context.WithValue(ctx, proofKey{}, p)
}

// mayAct is who may do each action, by proof: the one table. Every
// action changes keep's state, so each needs a person who proved who they
// are; none is open to a request without proof.
var mayAct = map[kt.Action][]Proof{}

func init() {
	for _, a := range append(Actions(), kt.ActDeploy, kt.ActPrune) {
		mayAct[a] = []Proof{ProofPage, ProofToken, ProofSecret}
	}
}

// NotAllowedError refuses an action to an actor without the proof it needs.
type NotAllowedError struct{ Action kt.Action }

func (e *NotAllowedError) Error() string {
	return fmt.Sprintf("%s changes keep's state and needs proof of who you are", e.Action)
}

// MayAct says whether the actor of ctx may do act. A context without a
// proof is code of this process (tests, the Maintainer), not a request:
// the API always hands one.
func (c *Control) MayAct(ctx context.Context, act kt.Action) error {
	p, ok := ctx.Value(proofKey{}).(Proof)
	if !ok {
		return nil
	}
	if slices.Contains(mayAct[act], p) {
		return nil
	}
	return &NotAllowedError{Action: act}
}

// Actions lists every action Control carries out, in the table's order.
func Actions() []kt.Action {
	out := make([]kt.Action, len(table))
	for i, a := range table {
		out[i] = a.act
	}
	return out
}

// Target is what an action acts on: the noun of its route, under which
// its verb names it (POST /api/v1/workflows/{wf}/pause, …/items/{ref}/skip).
type Target string

const (
	OnRun      Target = "run"
	OnWorkflow Target = "workflow"
	OnTopic    Target = "topic"
	OnHandler  Target = "handler"
	OnItem     Target = "item"
	OnRepair   Target = "repair"
	OnHeld     Target = "held delivery"
)

// action is one row of the table: the action, what it acts on, its verb
// under that noun, and what carries it out. A row's do fills the
// Reply's Message (and its Workflow when the request names none).
type action struct {
	act  kt.Action
	on   Target
	verb string
	do   func(c *Control, ctx context.Context, q Request, now time.Time) (Reply, error)
}

// table is every person's action, the one list: Control.Do dispatches
// through it, the API maps a route's verb to its action through it
// (ActionOf), and mayAct's rows are its keys.
var table = []action{
	{kt.ActTryAgain, OnRun, "try-again", doResolve((*decision).tryAgain)},
	{kt.ActDidntHappen, OnRun, "didnt-happen", doResolve((*decision).didntHappen)},
	{kt.ActSkip, OnRun, "skip", doResolve((*decision).skip)},
	{kt.ActReprocess, OnRun, "reprocess", doResolve((*decision).reprocessItem)},
	{kt.ActApprove, OnRun, "approve", doResolve((*decision).approve)},
	{kt.ActPause, OnWorkflow, "pause", func(c *Control, ctx context.Context, q Request, now time.Time) (Reply, error) {
		return Reply{Message: q.Workflow + " paused"}, pauseWorkflow(ctx, c.Store, q.Workflow, now)
	}},
	{kt.ActResume, OnWorkflow, "resume", func(c *Control, ctx context.Context, q Request, now time.Time) (Reply, error) {
		return Reply{Message: q.Workflow + " resumed"}, resumeWorkflow(ctx, c.Store, q.Workflow, now)
	}},
	{kt.ActRunNow, OnWorkflow, "run-now", func(c *Control, ctx context.Context, q Request, now time.Time) (Reply, error) {
		n, err := runNow(ctx, c.Store, q.Workflow, now)
		return Reply{Queued: n, Message: fmt.Sprintf("%s of %s queued", kt.Count(n, "producer"), q.Workflow)}, err
	}},
	{kt.ActGrant, OnWorkflow, "grant", func(c *Control, ctx context.Context, q Request, now time.Time) (Reply, error) {
		return message(grantAction(ctx, c.Store, q.Workflow, q.Items, now))
	}},
	{kt.ActRevoke, OnWorkflow, "revoke", func(c *Control, ctx context.Context, q Request, now time.Time) (Reply, error) {
		return message(revokeGrants(ctx, c.Store, q.Workflow, q.Items, now))
	}},
	{kt.ActSkipPending, OnTopic, "skip-pending", func(c *Control, ctx context.Context, q Request, now time.Time) (Reply, error) {
		return message(skipPending(ctx, c.Store, q.Workflow, q.Topic, now))
	}},
	{kt.ActResetState, OnHandler, "reset-state", func(c *Control, ctx context.Context, q Request, now time.Time) (Reply, error) {
		return message(resetState(ctx, c.Store, q.Workflow, q.Handler, now))
	}},
	{kt.ActSkipItem, OnItem, "skip", doItem(skipItem)},
	{kt.ActReprocessItem, OnItem, "reprocess", doItem(reprocessItem)},
	{kt.ActApproveRepair, OnRepair, "approve", doRepair(true)},
	{kt.ActRejectRepair, OnRepair, "reject", doRepair(false)},
	{kt.ActPublish, OnTopic, "publish", func(c *Control, ctx context.Context, q Request, now time.Time) (Reply, error) {
		ev := q.Event
		ev.Workflow, ev.Topic = q.Workflow, q.Topic
		p, err := intake.Post(ctx, c.Store, ev, now)
		return Reply{Posted: p, Message: p.Message}, err
	}},
	{kt.ActTakeHeld, OnHeld, "take-held", doHeld(true)},
	{kt.ActDropHeld, OnHeld, "drop-held", doHeld(false)},
}

// byAction is table by action.
var byAction = func() map[kt.Action]action {
	m := make(map[kt.Action]action, len(table))
	for _, a := range table {
		m[a.act] = a
	}
	return m
}()

// ActionOf is the action a route's verb names under its noun (on): the
// one place a verb becomes an action. A verb that names none is refused
// with kt.ErrUnknownAction (a not-found: the API answers 404), naming the
// verbs there are.
func ActionOf(on Target, verb string) (kt.Action, error) {
	var verbs []string
	for _, a := range table {
		if a.on != on {
			continue
		}
		if a.verb == verb {
			return a.act, nil
		}
		verbs = append(verbs, a.verb)
	}
	return "", &kt.ActionError{Msg: fmt.Sprintf("no %s action %q (%s)", on, verb, strings.Join(verbs, ", ")), Code: kt.CodeUnknownAction}
}

func message(msg string, err error) (Reply, error) { return Reply{Message: msg}, err }

// doResolve carries out a decision on a blocked run by carry, the
// decision's method for the action.
func doResolve(carry func(*decision) (string, error)) func(*Control, context.Context, Request, time.Time) (Reply, error) {
	return func(c *Control, ctx context.Context, q Request, now time.Time) (Reply, error) {
		msg, err := resolveRun(ctx, c.Store, q.Run, resolution{kt.Resolution(q.Action), carry}, now)
		if err != nil || q.Workflow != "" {
			return Reply{Message: msg}, err
		}
		wf, err := c.workflowOfRun(ctx, q.Run)
		return Reply{Message: msg, Workflow: wf}, err
	}
}

func doItem(act func(context.Context, store.Store, ItemRef, time.Time) (string, error)) func(*Control, context.Context, Request, time.Time) (Reply, error) {
	return func(c *Control, ctx context.Context, q Request, now time.Time) (Reply, error) {
		msg, err := act(ctx, c.Store, ItemRef{Workflow: q.Workflow, Ref: q.Item}, now)
		if err != nil || q.Workflow != "" {
			return Reply{Message: msg}, err
		}
		rep := Reply{Message: msg}
		err = c.Store.View(ctx, func(tx store.Tx) error {
			it, err := transition.FindItem(tx, "", q.Item)
			rep.Workflow = it.Workflow
			return err
		})
		return rep, err
	}
}

func doRepair(approve bool) func(*Control, context.Context, Request, time.Time) (Reply, error) {
	return func(c *Control, ctx context.Context, q Request, now time.Time) (Reply, error) {
		if c.DecideRepair == nil {
			// A Control without the Maintainer's decider (every one the
			// API builds has it): the action exists, not here.
			return Reply{}, kt.Refuse("repairs are decided where the Maintainer runs: keep serve, or keep repairs")
		}
		return message(c.DecideRepair(ctx, q.Workflow, q.Repair, approve, now))
	}
}

func doHeld(take bool) func(*Control, context.Context, Request, time.Time) (Reply, error) {
	return func(c *Control, ctx context.Context, q Request, now time.Time) (Reply, error) {
		return message(intake.ActOnHeld(ctx, c.Store, intake.Held{Workflow: q.Workflow, IDs: q.Deliveries, Take: take}, now))
	}
}

// Request names an action and what it acts on: Run for the run actions,
// Workflow for the others (with Topic, Handler, Item or Repair).
type Request struct {
	Action                                      kt.Action
	Run, Workflow, Topic, Handler, Item, Repair string
	Items                                       []string        // grant, revoke: what, as it is granted
	Event                                       intake.APIEvent // publish: the event (its Workflow and Topic are the request's)
	Deliveries                                  []int64         // take-held, drop-held: the held deliveries' records (nil: all)
}

// Reply is what a carried-out action says, and the workflow it touched.
type Reply struct {
	Message  string
	Workflow string
	Queued   int           // run-now: producers queued
	Posted   intake.Posted // publish: the input and event, and whether they were there already
}

// Control is the one place people's actions are carried out: the API
// calls Do, and the CLI and the page are clients of the API (keep serve's,
// the CLI's own in process when none runs, the page's in process), so what
// each action does and what it is refused with is written once. Who acts is the
// context's actor (WithActor).
type Control struct {
	Store store.Store
	// DecideRepair approves or rejects a repair the Maintainer held (the
	// maintainer package builds on the engine); nil: refused.
	DecideRepair func(ctx context.Context, wf, id string, approve bool, now time.Time) (string, error)
	// Now is the clock (keep's, clock.Now, when nil).
	Now func() time.Time
}

// Do carries out one action: its row of the table, once the actor of
// ctx may (MayAct). An action not in the table is refused with
// kt.ErrUnknownAction.
func (c *Control) Do(ctx context.Context, q Request) (Reply, error) {
	a, known := byAction[q.Action]
	if !known {
		return Reply{}, &kt.ActionError{Msg: fmt.Sprintf("no action %q (%v)", q.Action, Actions()), Code: kt.CodeUnknownAction}
	}
	if err := c.MayAct(ctx, q.Action); err != nil {
		return Reply{}, err
	}
	now := clock.Now()
	if c.Now != nil {
		now = c.Now()
	}
	rep, err := a.do(c, ctx, q, now)
	if err != nil {
		return Reply{}, err
	}
	if rep.Workflow == "" {
		rep.Workflow = q.Workflow
	}
	return rep, nil
}

func (c *Control) workflowOfRun(ctx context.Context, runID string) (string, error) {
	var wf string
	err := c.Store.View(ctx, func(tx store.Tx) error {
		r, err := tx.RunGet(runID)
		wf = r.Workflow
		return err
	})
	return wf, err
}
