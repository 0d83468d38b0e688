package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// TestControlDecidesWhoMayAct: a request the API or the page could not
// authenticate (ProofNone) is refused every action, deploys included,
// before anything is read or written (Control has no store here); a
// person who proved who they are — the page, the token, the instance
// secret — may do each; code of keep's own process hands no proof.
func TestControlDecidesWhoMayAct(t *testing.T) {
	c := &engine.Control{}
	anon := engine.WithProof(context.Background(), engine.ProofNone)
	for _, act := range engine.Actions() {
		_, err := c.Do(anon, engine.Request{Action: act, Run: "r", Workflow: "w", Item: "i"})
		var na *engine.NotAllowedError
		if !errors.As(err, &na) || na.Action != act {
			t.Errorf("%s without proof: %v, want refused as not allowed", act, err)
		}
	}
	if err := c.MayAct(anon, kt.ActDeploy); err == nil {
		t.Error("a deploy without proof is allowed")
	}
	for _, p := range []engine.Proof{engine.ProofPage, engine.ProofToken, engine.ProofSecret} {
		ctx := engine.WithProof(context.Background(), p)
		for _, act := range append(engine.Actions(), kt.ActDeploy) {
			if err := c.MayAct(ctx, act); err != nil {
				t.Errorf("%s with proof %d: %v", act, p, err)
			}
		}
	}
	if err := c.MayAct(context.Background(), kt.ActPause); err != nil {
		t.Errorf("keep's own code: %v", err)
	}
}
