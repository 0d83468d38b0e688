package engine

import (
	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// The decisions of the mutation protocol (ch 13, ch 14, SPEC §7) as pure
// functions: what to do with the ledger row a mutation's identity found,
// and with the answer of a call. Consumer runs (mutation.go) and item
// scripts (items.go) both follow them; only their I/O differs.

// ledgerStep is what a mutation does once its identity was looked up.
type ledgerStep string

const (
	// stepExecute: no row, or one that certainly did not happen (failed,
	// skipped): record in_flight durably, then call.
	stepExecute ledgerStep = "execute"
	// stepReplay: applied with the same content, or a difference the
	// connector calls equivalent or minor: return the recorded result.
	stepReplay ledgerStep = "replay"
	// stepConflict: applied, and the new content differs significantly (or
	// the connector cannot compare): never write twice; a person decides.
	stepConflict ledgerStep = "conflict"
	// stepReconcile: the write may have happened (in_flight, needs_reconcile):
	// ask the connector before anything, never resend blindly.
	stepReconcile ledgerStep = "reconcile"
	// stepBlocked: the outcome is unknown and cannot be checked further
	// (indeterminate): a person decides.
	stepBlocked ledgerStep = "blocked"
)

// onFound decides a mutation's next step from the row its identity found.
// compare is called only for an applied row whose payload differs.
func onFound(found bool, row kt.Mutation, payloadHash string, compare func() connector.Comparison) ledgerStep {
	if !found {
		return stepExecute
	}
	switch row.Status {
	case kt.MutationApplied:
		if row.PayloadHash == payloadHash {
			return stepReplay
		}
		if compare() == connector.Significant {
			return stepConflict
		}
		return stepReplay
	case kt.MutationInFlight, kt.MutationNeedsReconcile:
		return stepReconcile
	case kt.MutationIndeterminate:
		return stepBlocked
	}
	return stepExecute // failed or skipped: it certainly did not happen
}

// callStep is what the answer of a call leads to.
type callStep string

const (
	callApplied       callStep = "applied"
	callFailed        callStep = "failed"
	callReconcile     callStep = "reconcile"
	callIndeterminate callStep = "indeterminate"
)

// onOutcome decides what a call's answer leads to (ch 13 §13.7): an
// uncertain answer is reconciled when the call can be checked, else it is
// indeterminate at once.
func onOutcome(o connector.Outcome, canReconcile bool) callStep {
	switch o {
	case connector.OutcomeApplied:
		return callApplied
	case connector.OutcomeFailed:
		return callFailed
	}
	if canReconcile {
		return callReconcile
	}
	return callIndeterminate
}

// reconcileStep is what a reconcile's answer leads to.
type reconcileStep string

const (
	recApplied    reconcileStep = "applied"     // it happened: record the result, go on
	recFailed     reconcileStep = "failed"      // proven not to have happened: send again
	recRecheck    reconcileStep = "recheck"     // "not found" too early to believe (settle rule)
	recRetryLater reconcileStep = "retry-later" // cannot tell yet: check again after a backoff
	recExhausted  reconcileStep = "exhausted"   // cannot tell, and no attempts left: a person decides
	// recUncheckable: the call has no reconcile (or its connector is gone),
	// so keep cannot ask at all: a person decides.
	recUncheckable reconcileStep = "uncheckable"
)

// onReconcile decides what a reconcile's answer leads to. settleAt is when
// a "not found" may be believed (0: now, see Engine.notHappenedYet);
// exhausted says the policy's attempts are used up (reconcileExhausted).
func onReconcile(status connector.ReconcileStatus, settleAt int64, exhausted bool) reconcileStep {
	switch status {
	case connector.ReconcileApplied:
		return recApplied
	case connector.ReconcileFailed:
		if settleAt > 0 {
			return recRecheck
		}
		return recFailed
	}
	if exhausted {
		return recExhausted
	}
	return recRetryLater
}

// reconcileAttempt says when a reconcile attempt is made.
type reconcileAttempt int

const (
	// inlineAttempt: right after the call, or when a run takes the row
	// over (recovery, a retry); it does not count against the policy.
	inlineAttempt reconcileAttempt = iota
	// backgroundAttempt: one of the policy's attempts, after a backoff.
	backgroundAttempt
)

// reconcileExhausted applies the policy's attempts (SPEC §6): the inline
// attempt right after a call does not count; with no background attempts
// at all, an inline "cannot tell" goes to a person at once.
func reconcileExhausted(when reconcileAttempt, attempts, max int) bool {
	if when == inlineAttempt {
		return max == 0
	}
	return attempts >= max
}
