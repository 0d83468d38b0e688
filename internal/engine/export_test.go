package engine

import (
	"context"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// DeployUnchecked deploys a script that the static analysis refuses (its
// declaration still checked), so tests can try the run-time checks that
// stand behind the analysis.
func DeployUnchecked(ctx context.Context, e *Engine, file, source string) (kt.DeployResult, error) {
	return e.DeployWith(ctx, file, source, DeployOptions{Grant: true, grantBySystem: true, unchecked: true})
}

// The action functions Control dispatches to, for the engine's own tests
// that call one directly; every other package goes through Control.Do.
var (
	Pause         = pauseWorkflow
	Resume        = resumeWorkflow
	RunNow        = runNow
	GrantAction   = grantAction
	Revoke        = revokeGrants
	SkipPending   = skipPending
	ResetState    = resetState
	SkipItem      = skipItem
	ReprocessItem = reprocessItem
	PostEvent     = postEvent
	HeldAction    = heldAction
)

// Resolve is a person's decision on a blocked run, through Control.
func Resolve(ctx context.Context, st store.Store, runID string, what kt.Resolution, now time.Time) (string, error) {
	c := &Control{Store: st, Now: func() time.Time { return now }}
	rep, err := c.Do(ctx, Request{Action: kt.Action(what), Run: runID})
	return rep.Message, err
}
