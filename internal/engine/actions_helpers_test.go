package engine_test

import (
	"context"
	"time"

	"github.com/keep-run/keep/internal/control"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// A person's actions in the engine's tests, taken as every caller takes
// them: through control.Control (the action functions are control's own).
func act(ctx context.Context, st store.Store, now time.Time, q control.Request) (control.Reply, error) {
	c := &control.Control{Store: st, Now: func() time.Time { return now }}
	return c.Do(ctx, q)
}

func said(ctx context.Context, st store.Store, now time.Time, q control.Request) (string, error) {
	rep, err := act(ctx, st, now, q)
	return rep.Message, err
}

func resolve(ctx context.Context, st store.Store, runID string, what kt.Resolution, now time.Time) (string, error) {
	return said(ctx, st, now, control.Request{Action: kt.Action(what), Run: runID})
}

func grant(ctx context.Context, st store.Store, wf string, items []string, now time.Time) (string, error) {
	return said(ctx, st, now, control.Request{Action: kt.ActGrant, Workflow: wf, Items: items})
}

func revoke(ctx context.Context, st store.Store, wf string, items []string, now time.Time) (string, error) {
	return said(ctx, st, now, control.Request{Action: kt.ActRevoke, Workflow: wf, Items: items})
}

func resetState(ctx context.Context, st store.Store, wf, handler string, now time.Time) (string, error) {
	return said(ctx, st, now, control.Request{Action: kt.ActResetState, Workflow: wf, Handler: handler})
}

func skipRef(ctx context.Context, st store.Store, ref control.ItemRef, now time.Time) (string, error) {
	return said(ctx, st, now, control.Request{Action: kt.ActSkipItem, Workflow: ref.Workflow, Item: ref.Ref})
}

func reprocessRef(ctx context.Context, st store.Store, ref control.ItemRef, now time.Time) (string, error) {
	return said(ctx, st, now, control.Request{Action: kt.ActReprocessItem, Workflow: ref.Workflow, Item: ref.Ref})
}
