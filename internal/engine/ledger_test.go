package engine

import (
	"testing"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// Every ledger row a mutation's identity can find, against the step the
// protocol must take (ch 13, ch 14 §14.4–14.5).
func TestOnFound(t *testing.T) {
	t.Parallel()
	cmp := func(c connector.Comparison) func() connector.Comparison {
		return func() connector.Comparison { return c }
	}
	never := func() connector.Comparison { t.Error("comparePayload called when the payloads are equal"); return "" }
	cases := []struct {
		name    string
		found   bool
		status  kt.MutationStatus
		hash    string
		compare func() connector.Comparison
		want    ledgerStep
	}{
		{"nothing recorded", false, "", "h", never, stepExecute},
		{"applied, same content", true, kt.MutationApplied, "h", never, stepReplay},
		{"applied, equivalent content", true, kt.MutationApplied, "other", cmp(connector.Equivalent), stepReplay},
		{"applied, minor difference", true, kt.MutationApplied, "other", cmp(connector.Minor), stepReplay},
		{"applied, significant difference", true, kt.MutationApplied, "other", cmp(connector.Significant), stepConflict},
		{"in flight (a crash)", true, kt.MutationInFlight, "h", never, stepReconcile},
		{"needs reconcile", true, kt.MutationNeedsReconcile, "h", never, stepReconcile},
		{"indeterminate", true, kt.MutationIndeterminate, "h", never, stepBlocked},
		{"failed: certainly not done", true, kt.MutationFailed, "h", never, stepExecute},
		{"skipped by a person", true, kt.MutationSkipped, "h", never, stepExecute},
	}
	for _, c := range cases {
		row := kt.Mutation{Status: c.status, PayloadHash: "h"}
		if got := onFound(c.found, row, c.hash, c.compare); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// Every answer of a call, with and without a way to check it.
func TestOnOutcome(t *testing.T) {
	t.Parallel()
	cases := []struct {
		o     connector.Outcome
		check bool
		want  callStep
	}{
		{connector.OutcomeApplied, false, callApplied},
		{connector.OutcomeApplied, true, callApplied},
		{connector.OutcomeFailed, true, callFailed},
		{connector.OutcomeFailed, false, callFailed},
		{connector.OutcomeUncertain, true, callReconcile},
		{connector.OutcomeUncertain, false, callIndeterminate},
	}
	for _, c := range cases {
		if got := onOutcome(c.o, c.check); got != c.want {
			t.Errorf("outcome %d, can reconcile %v: %s, want %s", c.o, c.check, got, c.want)
		}
	}
}

// Every answer of a reconcile, early or settled, with attempts left or not.
func TestOnReconcile(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status    connector.ReconcileStatus
		settleAt  int64
		exhausted bool
		want      reconcileStep
	}{
		{connector.ReconcileApplied, 0, false, recApplied},
		{connector.ReconcileApplied, 0, true, recApplied},
		{connector.ReconcileFailed, 0, false, recFailed},
		{connector.ReconcileFailed, 0, true, recFailed},
		{connector.ReconcileFailed, 5, false, recRecheck},
		{connector.ReconcileFailed, 5, true, recRecheck},
		{connector.ReconcileRetry, 0, false, recRetryLater},
		{connector.ReconcileRetry, 0, true, recExhausted},
		{"", 0, false, recRetryLater},
	}
	for _, c := range cases {
		if got := onReconcile(c.status, c.settleAt, c.exhausted); got != c.want {
			t.Errorf("%q settle %d exhausted %v: %s, want %s", c.status, c.settleAt, c.exhausted, got, c.want)
		}
	}
	for _, c := range []struct {
		when          reconcileAttempt
		attempts, max int
		want          bool
	}{{inlineAttempt, 0, 0, true}, {inlineAttempt, 0, 5, false}, {inlineAttempt, 9, 5, false},
		{backgroundAttempt, 4, 5, false}, {backgroundAttempt, 5, 5, true}, {backgroundAttempt, 0, 0, true}} {
		if got := reconcileExhausted(c.when, c.attempts, c.max); got != c.want {
			t.Errorf("attempt kind %d, %d of %d attempts: exhausted %v, want %v", c.when, c.attempts, c.max, got, c.want)
		}
	}
}
