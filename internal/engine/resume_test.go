package engine

import (
	"fmt"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// TestOneResumeRule enumerates the states a consumer run can be retried
// from (every phase, status, ledger row and pinned count) and checks
// resumeAt against SPEC §4's reset rules written out independently here,
// and that the real retry's starting phase and the dry run's replay are
// the same step (issue 41: they were two rules that disagreed).
func TestOneResumeRule(t *testing.T) {
	phases := []kt.Phase{kt.PhasePreparing, kt.PhasePrepared, kt.PhaseMutating, kt.PhaseMutated, kt.PhaseEmitting}
	statuses := []kt.Status{kt.StatusTransient, kt.StatusApproval, kt.StatusReconciliation, kt.StatusFailedLogic, kt.StatusFailedInternal, kt.StatusCrashed}
	ledger := []kt.MutationStatus{"", kt.MutationInFlight, kt.MutationApplied, kt.MutationFailed, kt.MutationNeedsReconcile, kt.MutationIndeterminate, kt.MutationSkipped}
	cases := 0
	for _, ph := range phases {
		for _, st := range statuses {
			for _, ms := range ledger {
				for _, pinned := range []int{0, 2} {
					old := kt.Run{Phase: ph, Status: st}
					var mut *kt.Mutation
					if ms != "" {
						mut = &kt.Mutation{Status: ms}
					}
					name := fmt.Sprintf("%s/%s/ledger=%q/pinned=%d", ph, st, ms, pinned)
					got := resumeAt(old, mut, pinned)
					// SPEC §4, as a person reads it.
					mayHave := ms == kt.MutationInFlight || ms == kt.MutationNeedsReconcile
					pastWrite := ph == kt.PhaseMutated || ph == kt.PhaseEmitting
					wantPhase, wantReplay := kt.PhasePreparing, "prepare"
					switch {
					case pastWrite:
						wantPhase, wantReplay = kt.PhaseEmitting, "next"
					case st == kt.StatusFailedLogic && !mayHave:
					case ph == kt.PhaseMutating && pinned > 0:
						wantPhase, wantReplay = kt.PhaseMutating, "mutate"
					}
					if got.phase() != wantPhase || got.replayed() != wantReplay {
						t.Errorf("%s: the retry starts in %s and the dry run replays %q; want %s and %q", name, got.phase(), got.replayed(), wantPhase, wantReplay)
					}
					// Mutate is skipped (reconciled) exactly when the write may have happened.
					if (got == resumeReconcile) != (wantPhase == kt.PhaseMutating && mayHave) {
						t.Errorf("%s: step %d; reconcile is for a write that may have happened, resuming in mutating", name, got)
					}
					cases++
				}
			}
		}
	}
	if cases != len(phases)*len(statuses)*len(ledger)*2 {
		t.Fatalf("enumerated %d cases", cases)
	}
}
