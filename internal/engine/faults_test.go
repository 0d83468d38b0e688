package engine_test

import (
	"fmt"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testsink"
)

// TestFaultMatrix injects each fault into the one write of a consumer run,
// with and without a reconcile probe, and checks what a user would see:
// the mutation's state, the run's status and class, and the writes applied.
func TestFaultMatrix(t *testing.T) {
	t.Parallel()
	type want struct {
		mutation string
		status   kt.Status // "" = the run committed
		class    kt.ErrorClass
		writes   int
	}
	cases := []struct {
		fault          testsink.Fault
		probe, noProbe want
	}{
		{testsink.OK, want{"applied", "", "", 1}, want{"applied", "", "", 1}},
		{testsink.Slow, want{"applied", "", "", 1}, want{"applied", "", "", 1}},
		// Applied, then no answer: the probe finds it; without one, a person must decide.
		{testsink.TimeoutAfter, want{"applied", "", "", 1}, want{"indeterminate", kt.StatusReconciliation, kt.ClassIndeterminate, 1}},
		{testsink.Status500, want{"applied", "", "", 1}, want{"indeterminate", kt.StatusReconciliation, kt.ClassIndeterminate, 1}},
		{testsink.ResetAfter, want{"applied", "", "", 1}, want{"indeterminate", kt.StatusReconciliation, kt.ClassIndeterminate, 1}},
		{testsink.TruncAfter, want{"applied", "", "", 1}, want{"indeterminate", kt.StatusReconciliation, kt.ClassIndeterminate, 1}},
		// Not applied, no answer: the probe proves it and keep sends again (one write in the end).
		{testsink.TimeoutBefore, want{"applied", "", "", 1}, want{"indeterminate", kt.StatusReconciliation, kt.ClassIndeterminate, 0}},
		{testsink.Status503, want{"applied", "", "", 1}, want{"indeterminate", kt.StatusReconciliation, kt.ClassIndeterminate, 0}},
		{testsink.Status(502), want{"applied", "", "", 1}, want{"indeterminate", kt.StatusReconciliation, kt.ClassIndeterminate, 0}},
		{testsink.Status(504), want{"applied", "", "", 1}, want{"indeterminate", kt.StatusReconciliation, kt.ClassIndeterminate, 0}},
		// Definite answers need no reconcile.
		{testsink.Status(401), want{"failed", kt.StatusApproval, kt.ClassPermission, 0}, want{"failed", kt.StatusApproval, kt.ClassPermission, 0}},
		{testsink.Status(403), want{"failed", kt.StatusApproval, kt.ClassPermission, 0}, want{"failed", kt.StatusApproval, kt.ClassPermission, 0}},
		{testsink.Status(404), want{"failed", kt.StatusApproval, kt.ClassPrecondition, 0}, want{"failed", kt.StatusApproval, kt.ClassPrecondition, 0}},
		{testsink.Status(409), want{"failed", kt.StatusApproval, kt.ClassPrecondition, 0}, want{"failed", kt.StatusApproval, kt.ClassPrecondition, 0}},
		{testsink.Status(400), want{"failed", kt.StatusFailedLogic, kt.ClassLogic, 0}, want{"failed", kt.StatusFailedLogic, kt.ClassLogic, 0}},
		// 429 is transient: retried with backoff until it goes through.
		{testsink.Status(429), want{"applied", "", "", 1}, want{"applied", "", "", 1}},
	}
	for _, c := range cases {
		for _, probe := range []bool{true, false} {
			w := c.noProbe
			opts := ""
			if probe {
				w, opts = c.probe, withProbe
			}
			t.Run(fmt.Sprintf("%s/probe=%v", c.fault, probe), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				e.sink.Queue(c.fault)
				wf := e.deploy(hookScript("", opts))
				e.settle()
				outs := e.outputs(wf)
				if len(outs) != 1 || outs[0].Status != w.mutation {
					t.Fatalf("mutation %+v, want %s", outs, w.mutation)
				}
				if w.status == "" {
					e.noOpenRun(wf)
				} else {
					r := e.open(wf)
					if r.Status != w.status || r.ErrorClass != w.class {
						t.Fatalf("run %s/%s, want %s/%s: %s", r.Status, r.ErrorClass, w.status, w.class, r.ErrorMessage)
					}
				}
				if n := len(e.sink.Writes()); n != w.writes {
					t.Fatalf("writes applied %d, want %d", n, w.writes)
				}
			})
		}
	}
}
