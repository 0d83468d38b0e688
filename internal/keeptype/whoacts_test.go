package keeptype_test

import (
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// WhoActs is the one rule for who must move a run on.
func TestWhoActs(t *testing.T) {
	t.Parallel()
	unknown := kt.Mutation{Status: kt.MutationIndeterminate}
	checking := kt.Mutation{Status: kt.MutationNeedsReconcile}
	cases := []struct {
		name   string
		run    kt.Run
		mut    kt.Mutation
		hasMut bool
		want   kt.Who
	}{
		{"committed", kt.Run{Status: kt.StatusCommitted}, kt.Mutation{}, false, kt.Nobody},
		{"retried", kt.Run{Status: kt.StatusRetried}, kt.Mutation{}, false, kt.Nobody},
		{"running", kt.Run{Status: kt.StatusActive}, kt.Mutation{}, false, kt.Nobody},
		{"crashed", kt.Run{Status: kt.StatusCrashed}, kt.Mutation{}, false, kt.Keep},
		{"a decision to carry out", kt.Run{Status: kt.StatusFailedLogic, Action: kt.ActionRetry}, kt.Mutation{}, false, kt.Keep},
		{"a timed retry", kt.Run{Status: kt.StatusTransient, NextAttemptAt: 1}, kt.Mutation{}, false, kt.Keep},
		{"retries given up", kt.Run{Status: kt.StatusTransient}, kt.Mutation{}, false, kt.APerson},
		{"keep still checking", kt.Run{Status: kt.StatusReconciliation}, checking, true, kt.Keep},
		{"outcome unknown", kt.Run{Status: kt.StatusReconciliation}, unknown, true, kt.APerson},
		{"approval", kt.Run{Status: kt.StatusApproval}, kt.Mutation{}, false, kt.APerson},
		{"logic failure", kt.Run{Status: kt.StatusFailedLogic}, kt.Mutation{}, false, kt.APerson},
		{"internal failure", kt.Run{Status: kt.StatusFailedInternal}, kt.Mutation{}, false, kt.APerson},
	}
	for _, c := range cases {
		if got := kt.WhoActs(c.run, c.mut, c.hasMut); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
