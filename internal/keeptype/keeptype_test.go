package keeptype

import (
	"slices"
	"testing"
)

// TestPhaseMachine checks every pair of phases against the forward-only rule.
func TestPhaseMachine(t *testing.T) {
	t.Parallel()
	consumer := []Phase{PhasePreparing, PhasePrepared, PhaseMutating, PhaseMutated, PhaseEmitting, PhaseCommitted}
	allowed := map[[2]Phase]bool{
		{PhasePreparing, PhasePrepared}: true, {PhasePreparing, PhaseMutating}: true, {PhasePreparing, PhaseEmitting}: true,
		{PhasePrepared, PhaseMutating}: true, {PhasePrepared, PhaseEmitting}: true,
		{PhaseMutating, PhaseMutated}: true, {PhaseMutating, PhaseEmitting}: true,
		{PhaseMutated, PhaseEmitting}: true, {PhaseEmitting, PhaseCommitted}: true,
	}
	for _, from := range consumer {
		for _, to := range consumer {
			want := from == to || allowed[[2]Phase{from, to}]
			if got := PhaseTransitionAllowed(from, to); got != want {
				t.Errorf("%s → %s: allowed=%v, want %v", from, to, got, want)
			}
			if want && from != to && PhaseRank(to) <= PhaseRank(from) {
				t.Errorf("%s → %s is allowed but does not move forward", from, to)
			}
		}
	}
	if !PhaseTransitionAllowed(PhaseExecuting, PhaseCommitted) || PhaseTransitionAllowed(PhaseCommitted, PhaseExecuting) || PhaseTransitionAllowed(PhaseExecuting, PhaseMutating) {
		t.Error("producer phases")
	}
}

// TestMutationMachine checks every pair of ledger states.
func TestMutationMachine(t *testing.T) {
	t.Parallel()
	states := []MutationStatus{"", MutationInFlight, MutationApplied, MutationFailed, MutationNeedsReconcile, MutationIndeterminate, MutationSkipped}
	allowed := map[[2]MutationStatus]bool{
		{"", MutationInFlight}:              true,
		{MutationInFlight, MutationApplied}: true, {MutationInFlight, MutationFailed}: true, {MutationInFlight, MutationNeedsReconcile}: true, {MutationInFlight, MutationIndeterminate}: true,
		{MutationNeedsReconcile, MutationApplied}: true, {MutationNeedsReconcile, MutationFailed}: true, {MutationNeedsReconcile, MutationNeedsReconcile}: true,
		{MutationNeedsReconcile, MutationIndeterminate}: true, {MutationNeedsReconcile, MutationSkipped}: true,
		{MutationIndeterminate, MutationNeedsReconcile}: true, {MutationIndeterminate, MutationFailed}: true, {MutationIndeterminate, MutationSkipped}: true,
		{MutationFailed, MutationInFlight}: true, {MutationFailed, MutationSkipped}: true,
		{MutationSkipped, MutationInFlight}: true,
	}
	for _, from := range states {
		for _, to := range states {
			if got, want := MutationTransitionAllowed(from, to), allowed[[2]MutationStatus{from, to}]; got != want {
				t.Errorf("%q → %q: allowed=%v, want %v", from, to, got, want)
			}
		}
	}
	// applied is terminal: nothing ever leaves it.
	for _, to := range states {
		if MutationTransitionAllowed(MutationApplied, to) {
			t.Errorf("applied → %s allowed", to)
		}
	}
}

func TestStatusFinished(t *testing.T) {
	t.Parallel()
	for s, want := range map[Status]bool{StatusCommitted: true, StatusRetried: true, StatusSkipped: true, StatusActive: false, StatusTransient: false,
		StatusApproval: false, StatusReconciliation: false, StatusFailedLogic: false, StatusFailedInternal: false, StatusCrashed: false} {
		if s.Finished() != want {
			t.Errorf("%s finished=%v", s, !want)
		}
	}
}

func TestItemMachine(t *testing.T) {
	t.Parallel()
	states := []ItemStatus{"", ItemProcessing, ItemDone, ItemFailed, ItemSkipped, ItemNeedsAttention}
	allowed := map[[2]ItemStatus]bool{
		{"", ItemProcessing}:       true,
		{ItemProcessing, ItemDone}: true, {ItemProcessing, ItemFailed}: true, {ItemProcessing, ItemNeedsAttention}: true, {ItemProcessing, ItemSkipped}: true, {ItemProcessing, ItemProcessing}: true,
		{ItemFailed, ItemProcessing}: true, {ItemFailed, ItemSkipped}: true,
		{ItemNeedsAttention, ItemProcessing}: true, {ItemNeedsAttention, ItemSkipped}: true,
		{ItemSkipped, ItemProcessing}: true, {ItemDone, ItemProcessing}: true,
	}
	for _, from := range states {
		for _, to := range states {
			if got, want := ItemTransitionAllowed(from, to), allowed[[2]ItemStatus{from, to}]; got != want {
				t.Errorf("%q → %q: allowed=%v, want %v", from, to, got, want)
			}
		}
	}
}

// TestRunStatusMachine checks every pair of run statuses: finished runs
// never change, a new run may start in any status, a blocked run moves on
// in place only from reconciliation, and otherwise is retried or skipped.
func TestRunStatusMachine(t *testing.T) {
	t.Parallel()
	all := []Status{StatusActive, StatusTransient, StatusApproval, StatusReconciliation, StatusFailedLogic, StatusFailedInternal,
		StatusCrashed, StatusCommitted, StatusRetried, StatusSkipped}
	blocked := map[Status]bool{StatusTransient: true, StatusApproval: true, StatusReconciliation: true, StatusFailedLogic: true, StatusFailedInternal: true, StatusCrashed: true}
	for _, to := range all {
		if !RunStatusTransitionAllowed("", to) {
			t.Errorf("a new run may not start as %s", to)
		}
	}
	for _, from := range all {
		for _, to := range all {
			var want bool
			switch {
			case from == to:
				want = true
			case from.Finished():
				want = false
			case from == StatusActive:
				want = to != StatusActive
			case to == StatusRetried || to == StatusSkipped:
				want = blocked[from]
			case from == StatusReconciliation:
				want = to == StatusActive || to == StatusTransient || to == StatusApproval || to == StatusFailedLogic || to == StatusFailedInternal || to == StatusCommitted
			case from == StatusApproval:
				want = to == StatusReconciliation
			}
			if got := RunStatusTransitionAllowed(from, to); got != want {
				t.Errorf("%s → %s: allowed=%v, want %v", from, to, got, want)
			}
		}
	}
}

// RunStatuses and ItemStatuses name every status the state tables know:
// what keep test and keep.d.ts accept is what a run or an item can be.
func TestStatusListsAreComplete(t *testing.T) {
	for from := range runStatusFrom {
		if !slices.Contains(RunStatuses, from) {
			t.Errorf("RunStatuses lacks %s", from)
		}
	}
	if len(RunStatuses) != len(runStatusFrom) {
		t.Errorf("RunStatuses has %d, the table %d", len(RunStatuses), len(runStatusFrom))
	}
	for from, tos := range allowedItem {
		for _, s := range append(tos, from) {
			if s != "" && !slices.Contains(ItemStatuses, s) {
				t.Errorf("ItemStatuses lacks %s", s)
			}
		}
	}
}
