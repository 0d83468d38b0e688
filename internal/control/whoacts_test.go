package control

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
		want   Who
	}{
		{"committed", kt.Run{Status: kt.StatusCommitted}, kt.Mutation{}, false, Nobody},
		{"retried", kt.Run{Status: kt.StatusRetried}, kt.Mutation{}, false, Nobody},
		{"running", kt.Run{Status: kt.StatusActive}, kt.Mutation{}, false, Nobody},
		{"crashed", kt.Run{Status: kt.StatusCrashed}, kt.Mutation{}, false, Keep},
		{"a decision to carry out", kt.Run{Status: kt.StatusFailedLogic, Action: kt.ActionRetry}, kt.Mutation{}, false, Keep},
		{"a timed retry", kt.Run{Status: kt.StatusTransient, NextAttemptAt: 1}, kt.Mutation{}, false, Keep},
		{"retries given up", kt.Run{Status: kt.StatusTransient}, kt.Mutation{}, false, APerson},
		{"keep still checking", kt.Run{Status: kt.StatusReconciliation}, checking, true, Keep},
		{"outcome unknown", kt.Run{Status: kt.StatusReconciliation}, unknown, true, APerson},
		{"approval", kt.Run{Status: kt.StatusApproval}, kt.Mutation{}, false, APerson},
		{"logic failure", kt.Run{Status: kt.StatusFailedLogic}, kt.Mutation{}, false, APerson},
		{"internal failure", kt.Run{Status: kt.StatusFailedInternal}, kt.Mutation{}, false, APerson},
	}
	for _, c := range cases {
		if got := WhoActs(c.run, c.mut, c.hasMut); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
