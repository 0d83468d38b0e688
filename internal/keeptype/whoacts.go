package keeptype

// Who says who must move a run on next.
type Who int

const (
	// Nobody: the run is finished, or running right now.
	Nobody Who = iota
	// Keep moves it on by itself: a decision to carry out, a crash to
	// recover, a timed transient retry, a background reconcile under way.
	Keep
	// APerson must act: the run is blocked until someone decides.
	APerson
)

// WhoActs is the one rule for who must act on a run (issue 13): the card,
// the input statuses (checking or needs_attention) and the status line all
// ask it. mut is the run's mutation, hasMut false when it has none. (The
// scheduler's DueWorkflows finds the same "keep acts" cases in SQL, tested
// branch by branch in storetest.)
func WhoActs(r Run, mut Mutation, hasMut bool) Who {
	switch {
	case r.Status.Finished() || r.Status == StatusActive:
		return Nobody
	case r.Action != "", r.Status == StatusCrashed:
		return Keep
	case r.Status == StatusTransient && r.NextAttemptAt > 0:
		return Keep
	case r.Status == StatusReconciliation && hasMut && mut.Status == MutationNeedsReconcile:
		return Keep
	}
	return APerson
}
