package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/keep-run/keep/internal/clock"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
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

// Actions lists every action Control carries out, in the order above.
func Actions() []kt.Action {
	return []kt.Action{kt.ActTryAgain, kt.ActDidntHappen, kt.ActSkip, kt.ActReprocess, kt.ActApprove, kt.ActPause, kt.ActResume, kt.ActRunNow,
		kt.ActGrant, kt.ActRevoke, kt.ActSkipPending, kt.ActResetState, kt.ActSkipItem, kt.ActReprocessItem, kt.ActApproveRepair, kt.ActRejectRepair, kt.ActPublish, kt.ActTakeHeld, kt.ActDropHeld}
}

// Request names an action and what it acts on: Run for the run actions,
// Workflow for the others (with Topic, Handler, Item or Repair).
type Request struct {
	Action                                      kt.Action
	Run, Workflow, Topic, Handler, Item, Repair string
	Items                                       []string // grant, revoke: what, as it is granted
	Event                                       APIEvent // publish: the event (its Workflow and Topic are the request's)
	Deliveries                                  []int64  // take-held, drop-held: the held deliveries' records (nil: all)
}

// Reply is what a carried-out action says, and the workflow it touched.
type Reply struct {
	Message  string
	Workflow string
	Queued   int    // run-now: producers queued
	Posted   Posted // publish: the input and event, and whether they were there already
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

// Do carries out one action.
func (c *Control) Do(ctx context.Context, q Request) (Reply, error) {
	now := clock.Now()
	if c.Now != nil {
		now = c.Now()
	}
	if _, known := mayAct[q.Action]; known && q.Action != kt.ActDeploy {
		if err := c.MayAct(ctx, q.Action); err != nil {
			return Reply{}, err
		}
	}
	var msg string
	var err error
	rep := Reply{Workflow: q.Workflow}
	switch q.Action {
	case kt.ActTryAgain, kt.ActDidntHappen, kt.ActSkip, kt.ActReprocess, kt.ActApprove:
		msg, err = Resolve(ctx, c.Store, q.Run, kt.Resolution(q.Action), now)
		if err == nil && rep.Workflow == "" {
			rep.Workflow, err = c.workflowOfRun(ctx, q.Run)
		}
	case kt.ActPause, kt.ActResume, kt.ActRunNow:
		msg, rep.Queued, err = WorkflowAction(ctx, c.Store, q.Workflow, string(q.Action), now)
	case kt.ActGrant:
		msg, err = GrantAction(ctx, c.Store, q.Workflow, q.Items, now)
	case kt.ActRevoke:
		msg, err = Revoke(ctx, c.Store, q.Workflow, q.Items, now)
	case kt.ActSkipPending:
		msg, err = SkipPending(ctx, c.Store, q.Workflow, q.Topic, now)
	case kt.ActResetState:
		msg, err = ResetState(ctx, c.Store, q.Workflow, q.Handler, now)
	case kt.ActSkipItem, kt.ActReprocessItem:
		verb := map[kt.Action]string{kt.ActSkipItem: "skip", kt.ActReprocessItem: "reprocess"}[q.Action]
		msg, err = ItemAction(ctx, c.Store, ItemRef{Workflow: q.Workflow, Ref: q.Item}, verb, now)
		if err == nil && rep.Workflow == "" {
			err = c.Store.View(ctx, func(tx store.Tx) error {
				it, err := FindItem(tx, "", q.Item)
				rep.Workflow = it.Workflow
				return err
			})
		}
	case kt.ActPublish:
		ev := q.Event
		ev.Workflow, ev.Topic = q.Workflow, q.Topic
		rep.Posted, err = PostEvent(ctx, c.Store, ev, now)
		msg = rep.Posted.Message
	case kt.ActTakeHeld, kt.ActDropHeld:
		msg, err = HeldAction(ctx, c.Store, q.Workflow, q.Deliveries, q.Action == kt.ActTakeHeld, now)
	case kt.ActApproveRepair, kt.ActRejectRepair:
		if c.DecideRepair == nil {
			return Reply{}, &ActionError{Msg: "repairs are decided where the Maintainer runs: keep serve, or keep repairs", Code: CodeUnknownAction}
		}
		msg, err = c.DecideRepair(ctx, q.Workflow, q.Repair, q.Action == kt.ActApproveRepair, now)
	default:
		return Reply{}, &ActionError{Msg: fmt.Sprintf("no action %q (%v)", q.Action, Actions()), Code: CodeUnknownAction}
	}
	if err != nil {
		return Reply{}, err
	}
	rep.Message = msg
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
