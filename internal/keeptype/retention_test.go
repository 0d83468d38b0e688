package keeptype

import "testing"

// TestOnlyFinishedWorkIsPrunable: every run status but done, skipped and
// retried keeps its bodies (a blocked run's card, reads and call), as do
// pending events, unsettled ledger rows and held deliveries.
func TestOnlyFinishedWorkIsPrunable(t *testing.T) {
	for _, s := range RunStatuses {
		want := s == StatusCommitted || s == StatusSkipped || s == StatusRetried
		if RunPrunable(s) != want {
			t.Errorf("RunPrunable(%s) = %v, want %v", s, !want, want)
		}
	}
	if EventPrunable(EventPending) || !EventPrunable(EventConsumed) || !EventPrunable(EventSkipped) {
		t.Error("a pending event is prunable, or a consumed or skipped one is not")
	}
	for _, s := range []MutationStatus{MutationInFlight, MutationFailed, MutationNeedsReconcile, MutationIndeterminate} {
		if MutationPrunable(s) {
			t.Errorf("a %s ledger row is prunable", s)
		}
	}
	if !MutationPrunable(MutationApplied) || DeliveryPrunable(DeliveryHeld) || !DeliveryPrunable(DeliveryAccepted) {
		t.Error("an applied row is not prunable, or a held delivery is")
	}
}
