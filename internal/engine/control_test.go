package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/control"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// TestControlDecidesWhoMayAct: a request the API or the page could not
// authenticate (ProofNone) is refused every action, deploys included,
// before anything is read or written (Control has no store here); a
// person who proved who they are — the page, the token, the instance
// secret — may do each; code of keep's own process hands no proof.
func TestControlDecidesWhoMayAct(t *testing.T) {
	c := &control.Control{}
	anon := control.WithProof(context.Background(), control.ProofNone)
	for _, act := range control.Actions() {
		_, err := c.Do(anon, control.Request{Action: act, Run: "r", Workflow: "w", Item: "i"})
		var na *control.NotAllowedError
		if !errors.As(err, &na) || na.Action != act {
			t.Errorf("%s without proof: %v, want refused as not allowed", act, err)
		}
	}
	if err := c.MayAct(anon, kt.ActDeploy); err == nil {
		t.Error("a deploy without proof is allowed")
	}
	for _, p := range []control.Proof{control.ProofPage, control.ProofToken, control.ProofSecret} {
		ctx := control.WithProof(context.Background(), p)
		for _, act := range append(control.Actions(), kt.ActDeploy) {
			if err := c.MayAct(ctx, act); err != nil {
				t.Errorf("%s with proof %d: %v", act, p, err)
			}
		}
	}
	if err := c.MayAct(context.Background(), kt.ActPause); err != nil {
		t.Errorf("keep's own code: %v", err)
	}
}

// TestControlErrorsAreKeepsCodedFamily: Control's refusals are of keep's
// one coded error family — what does not exist (a workflow, a run, an
// item, an action) is a kt.ErrNotFound, an action that does not fit the
// state a kt.ErrConflict — so the API maps each once; every action in
// the table is carried out, none falls through.
func TestControlErrorsAreKeepsCodedFamily(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(hookScript("", ""))
	e.settle()
	c := &control.Control{Store: e.k.Store}
	ctx := e.ctx()
	notFound := []control.Request{
		{Action: kt.ActPause, Workflow: "nope"},
		{Action: kt.ActTryAgain, Run: "nope"},
		{Action: kt.ActSkipItem, Workflow: wf, Item: "nope"},
		{Action: kt.ActResetState, Workflow: wf, Handler: "nope"},
		{Action: "explode", Workflow: wf},
	}
	for _, q := range notFound {
		_, err := c.Do(ctx, q)
		if !errors.Is(err, kt.ErrNotFound) || errors.Is(err, kt.ErrConflict) {
			t.Errorf("%s %+v: %v, want a kt.ErrNotFound only", q.Action, q, err)
		}
	}
	if _, err := c.Do(ctx, control.Request{Action: "explode"}); !errors.Is(err, kt.ErrUnknownAction) {
		t.Errorf("an unknown action: %v, want kt.ErrUnknownAction", err)
	}
	_, err := c.Do(ctx, control.Request{Action: kt.ActResume, Workflow: wf})
	if !errors.Is(err, kt.ErrConflict) || errors.Is(err, kt.ErrNotFound) || !strings.Contains(err.Error(), "is not paused") {
		t.Errorf("resume of a running workflow: %v, want a kt.ErrConflict saying it is not paused", err)
	}
	for _, verb := range []string{"pause", "resume"} {
		act, err := control.ActionOf(control.OnWorkflow, verb)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := c.Do(ctx, control.Request{Action: act, Workflow: wf})
		if err != nil || rep.Workflow != wf || !strings.Contains(rep.Message, wf) {
			t.Errorf("%s: %+v %v", verb, rep, err)
		}
	}
	for _, a := range control.Actions() {
		if _, err := c.Do(ctx, control.Request{Action: a}); errors.Is(err, kt.ErrUnknownAction) {
			t.Errorf("%s is in the list and not carried out: %v", a, err)
		}
	}
}
