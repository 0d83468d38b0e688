package keeptype

import "time"

// What a deploy did and what keep run gave up on: plain results the engine
// gives, which keep run prints and the API turns into its replies.

// DeployResult tells what a deploy did.
type DeployResult struct {
	Workflow  string
	Version   Version
	Unchanged bool // the script equals the active version; nothing was created
	Problems  []Problem
	// Warnings are consequences a person should know before the version runs.
	Warnings []string
	// Reprocessed counts the items a major version's choice started again.
	Reprocessed int
	// FilesRoot is the folder the workflow's files connector is rooted at.
	FilesRoot string
	// Granted is what the deploy granted (DeployOptions.Grant); Ungranted
	// what the version uses that still waits for a person's grant.
	Granted, Ungranted []string
	// Unused are grants of the workflow that the new version reaches no
	// more. They stay (a rollback to the version before needs them) and
	// are shown with how to revoke them: grants never pile up unseen.
	Unused []string
	// Stranded are the topics whose waiting events the new version leaves
	// without their consumer or the event API, with what a person can do.
	Stranded []Stranded
}

// Stranded is a topic whose waiting events a deploy leaves without the
// consumer that read them, or without the event API that fed them: the
// deploy says how many wait and what a person can do, instead of letting
// them wait unseen.
type Stranded struct {
	Topic string `json:"topic"`
	// Pending counts the topic's events not consumed or skipped yet.
	Pending int `json:"pending"`
	// Message says it in a sentence, with the commands to use.
	Message string `json:"message"`
}

// CallInFlight is a connector call a step waits on. Every such call is
// safe to give up on by the mutation ledger: a write goes out only once its
// row is durably in_flight (ledgerCall.inFlight), so a write given up on is
// found in_flight by the next run and reconciled, never sent blindly; a
// read or a reconcile probe writes nothing.
type CallInFlight struct {
	Workflow, RunID string
	// Call is "tool.method"; Target what it reaches (a write's target).
	Call, Target string
	// Write: a write, in_flight in the ledger; CanReconcile says whether
	// keep can ask the service about it (else a person decides whether it
	// happened).
	Write, CanReconcile bool
	Since               time.Time
}
