package connector

import (
	kt "github.com/keep-run/keep/internal/keeptype"
)

// FaultClass is what a fault of a write means to keep: the outcome a
// connector reports, the class of its error, and whether the write
// happened before the fault (reconcile must then find it).
type FaultClass struct {
	Outcome Outcome
	Class   kt.ErrorClass
	Applied bool
}

// FaultClasses is the table of "Errors a script sees" for a write, by
// package fault's kinds: an answer lost after the request went out is
// indeterminate (reconcile settles it), a 5xx too (the server may have
// applied it); a 429 is transient with its Retry-After; 401 and 403 are
// permission errors. The connectors' shared suite checks every connector
// against it, and keep test's fake connectors answer by it.
var FaultClasses = map[string]FaultClass{
	kt.FaultTimeoutAfterApply: {OutcomeUncertain, kt.ClassIndeterminate, true},
	kt.FaultDropAfterApply:    {OutcomeUncertain, kt.ClassIndeterminate, true},
	kt.FaultStatus500After:    {OutcomeUncertain, kt.ClassIndeterminate, true},
	kt.FaultTimeout:           {OutcomeUncertain, kt.ClassIndeterminate, false},
	kt.FaultDrop:              {OutcomeUncertain, kt.ClassIndeterminate, false},
	kt.FaultStatus500:         {OutcomeUncertain, kt.ClassIndeterminate, false},
	kt.FaultStatus503:         {OutcomeUncertain, kt.ClassIndeterminate, false},
	kt.FaultStatus429:         {OutcomeFailed, kt.ClassTransient, false},
	kt.FaultStatus401:         {OutcomeFailed, kt.ClassPermission, false},
	kt.FaultStatus403:         {OutcomeFailed, kt.ClassPermission, false},
}
