package keeptype

import "time"

// History bounded by a policy (issue 44): the rule of what the pruner may
// drop lives here, once; the store offers the batched writes
// (store.Tx.PruneList, PruneBodies) and the engine (engine.Prune) applies
// it. Pruning drops bodies, never rows: every row that makes work
// idempotent — an input's id and key, an event's messageId and status,
// a ledger row's identity key, payload hash, idempotency key and status,
// the decision log — stays, so a re-sent input or a re-published
// messageId older than the horizon is recognized as done, as before.

// Retention is the policy of history ([retention] in keep.toml).
type Retention struct {
	// Horizon is how long finished work's bodies are kept; 0 keeps them
	// forever.
	Horizon time.Duration
	// KeepDoneRuns is how many of the newest done (committed) runs of
	// each workflow's version are kept whole whatever their age: the
	// Maintainer's replay (engine.CompareUnseen, replayDone) reads the
	// newest done runs of a version, traces included.
	KeepDoneRuns int
	// Batch bounds the rows one write transaction prunes.
	Batch int
}

// RunPrunable says a run in status s is finished work whose bodies may go:
// done, skipped, or replaced by a retry. Blocked, waiting, active and
// failed runs never are (their card, their reads, their call wait).
func RunPrunable(s Status) bool {
	return s == StatusCommitted || s == StatusSkipped || s == StatusRetried
}

// EventPrunable says an event in status s was consumed or skipped: no run
// will read its payload again.
func EventPrunable(s EventStatus) bool { return s == EventConsumed || s == EventSkipped }

// MutationPrunable says a ledger row in status s is settled for good:
// applied or skipped. Its identity, payload hash, status and result stay
// (a write found applied is not sent again, and its result is handed to
// the script again); its params go (a write of the same identity with
// another payload hash is then judged a significant change, as for a
// method without comparePayload). In flight, uncertain and failed rows
// keep everything.
func MutationPrunable(s MutationStatus) bool { return s == MutationApplied || s == MutationSkipped }

// DeliveryPrunable says a webhook delivery in status s is settled: its
// request, if one was kept, is no longer needed. A held one waits for it.
func DeliveryPrunable(s DeliveryStatus) bool { return s != DeliveryHeld }

// PruneCount is what a prune did (or would do) to one kind of row.
type PruneCount struct {
	Kind string `json:"kind"`
	// Rows whose bodies were dropped, and the bytes of those bodies.
	Rows  int   `json:"rows"`
	Bytes int64 `json:"bytes"`
}

// PruneReport is what keep prune says.
type PruneReport struct {
	DryRun bool `json:"dryRun"`
	// Before is the horizon: bodies of work finished before it go (ms).
	Before int64        `json:"before"`
	Kinds  []PruneCount `json:"kinds"`
	// Spared counts old runs kept whole: the newest done runs of each
	// version (the Maintainer's replay) and each workflow's last retried
	// run (the last failure's card).
	Spared int `json:"spared"`
	// SizeBefore and SizeAfter are the database's bytes on disk where the
	// store can tell (SQLite), and Freed what the file shrank by.
	SizeBefore int64 `json:"sizeBefore,omitempty"`
	SizeAfter  int64 `json:"sizeAfter,omitempty"`
	Freed      int64 `json:"freed"`
}
