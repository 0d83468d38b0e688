package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/keep-run/keep/internal/clock"
	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// ledgerCall is one mutation on its way through the ledger (ch 13, ch 14,
// SPEC §7): lookup → compare payload → approval → in_flight durable → call
// → outcome → reconcile. It is the one I/O shell of that protocol, used by
// consumer runs (mutation.go) and item scripts (items.go) alike; its
// decisions are ledger.go's pure functions. What a step means for the run
// (fail it, block it, hand a result to the script) is the caller's.
type ledgerCall struct {
	x     *runExec
	phase string // the phase its trace lines carry: "mutating" or "task"
	tool  string
	m     *connector.Method
	args  map[string]any

	payload     map[string]any
	redacted    map[string]any
	identityKey string
	target      string
	payloadHash string
	callHash    string

	// installation is the store's id, mixed into a new row's key.
	installation string
	// mut is the ledger row: the one the identity found, or a new one.
	mut   kt.Mutation
	found bool
	// fresh: mut is a new row under a fresh id (newRow), not stored yet.
	fresh bool
	// unlooked: the identity was not looked up yet; the in_flight commit
	// looks it up (recordInFlight), and a row it finds there is handed
	// back (identityFound), nothing written.
	unlooked bool
	// cmp is how an applied row's payload compares with this call's, when
	// they differ (set by step).
	cmp connector.Comparison
}

// identityFunc makes a call's identity key: Identity.ConsumerKey for
// consumers, Identity.ItemKey for items.
type identityFunc func(Identity) string

// openLedger previews a call on the run (its PendingCall: what a person
// approves and a card shows) and looks its identity up in the ledger.
func (x *runExec) openLedger(phase, tool string, m *connector.Method, args map[string]any, key identityFunc) (*ledgerCall, error) {
	lc, err := x.previewLedger(phase, tool, m, args, key)
	if err != nil {
		return lc, err
	}
	return lc, lc.lookup()
}

// previewLedger is openLedger without the look-up.
func (x *runExec) previewLedger(phase, tool string, m *connector.Method, args map[string]any, key identityFunc) (*ledgerCall, error) {
	identity, payload := m.Split(args)
	subkey, _ := args["subkey"].(string)
	lc := &ledgerCall{x: x, phase: phase, tool: tool, m: m, args: args, payload: payload, redacted: m.Redact(args),
		identityKey: key(Identity{Workflow: x.run.Workflow, Handler: x.run.Handler, Tool: tool, Method: m.Name, Params: identity, Subkey: subkey}), target: targetOf(m, tool, args), payloadHash: PayloadHash(payload)}
	lc.callHash = CallHash(tool, m.Name, lc.target, identity, payload)
	x.run.PendingCall, _ = json.Marshal(lc.pending())
	var err error
	lc.installation, err = x.e.installationID(x.ctx)
	return lc, err
}

// lookup looks the call's identity up in the ledger (one read).
func (lc *ledgerCall) lookup() error {
	mut, found, err := lc.x.e.lookupMutation(lc.x.ctx, lc.identityKey)
	if err != nil || !found {
		return err
	}
	return lc.foundRow(mut)
}

// foundRow takes the row the call's identity found.
func (lc *ledgerCall) foundRow(mut kt.Mutation) error {
	lc.mut, lc.found, lc.fresh, lc.unlooked = mut, true, false, false
	if len(mut.Params) == 0 {
		return nil
	}
	// comparePayloads reads them: a row that does not decode stops here.
	var stored map[string]any
	return decodeStored("params", "mutations", mut.ID, mut.Params, &stored)
}

// identityFound is the in_flight commit's answer when the call's identity
// found a row there (ledgerCall.unlooked): nothing was written.
type identityFound struct{ row kt.Mutation }

func (f *identityFound) Error() string {
	return "the write's identity has a ledger row already (" + f.row.ID + ", " + string(f.row.Status) + ")"
}

func (lc *ledgerCall) pending() kt.PendingCall {
	return kt.PendingCall{Tool: lc.tool, Method: lc.m.Name, Target: lc.target, Args: lc.redacted, PayloadHash: lc.payloadHash, CallHash: lc.callHash}
}

func (lc *ledgerCall) method() string { return lc.tool + "." + lc.m.Name }

// step decides what the row the identity found leads to (onFound).
func (lc *ledgerCall) step() ledgerStep {
	return onFound(lc.found, lc.mut, lc.payloadHash, func() connector.Comparison {
		lc.cmp = comparePayloads(lc.m, lc.mut, lc.payload)
		return lc.cmp
	})
}

// note adds a trace line about this mutation, and the span's event.
func (lc *ledgerCall) note(outcome string, withArgs bool) {
	lc.traceNote(outcome, withArgs)
	lc.x.mutationEvent(lc.method(), outcome)
}

// traceNote adds the trace line alone: the line of a commit goes in before
// it, with the run it writes, its span's event after it held.
func (lc *ledgerCall) traceNote(outcome string, withArgs bool) {
	e := kt.TraceEntry{At: lc.x.e.NowMs(), Phase: lc.phase, Kind: "mutation", Method: lc.method(), Outcome: outcome}
	if withArgs {
		e.Args = lc.redacted
	}
	lc.x.tr.add(e)
}

// noteConflict and noteReplay say why a found row is not sent again.
func (lc *ledgerCall) noteConflict() {
	lc.note("already applied; payload differs: "+string(lc.cmp), false)
}

func (lc *ledgerCall) noteReplay() {
	if lc.cmp != "" {
		lc.noteConflict()
		return
	}
	lc.note("already applied: cached result returned, not sent again", true)
}

// cachedResult is the result recorded on an applied row.
func (lc *ledgerCall) cachedResult() json.RawMessage {
	if len(lc.mut.Result) == 0 {
		return json.RawMessage("null")
	}
	return lc.mut.Result
}

// newRow starts the ledger row of a call whose identity found nothing.
func (lc *ledgerCall) newRow(itemKeys []string, attempt int) {
	if lc.found {
		return
	}
	run := lc.x.run
	lc.fresh = true
	lc.mut = kt.Mutation{ID: transition.NewID(), Workflow: run.Workflow, Handler: run.Handler, ItemKeys: itemKeys, Attempt: attempt,
		Tool: lc.tool, Method: lc.m.Name, IdentityKey: lc.identityKey, IdempotencyKey: IdempotencyKey(lc.installation, lc.identityKey),
		CreatedAt: lc.x.e.NowMs()}
}

// IdempotencyKey is the key a new write carries to the service: its
// identity mixed with the installation's id (store.Tx.InstallationID), so
// two installations writing to one service (dev and prod) never send the
// same key, which the service would take for a repeat and drop (issue 24
// #9). A ledger row keeps the key it was created with: a write in flight
// when keep was upgraded is reconciled and re-sent under its old key.
func IdempotencyKey(installation, identityKey string) string {
	return "keep-" + hashOf("idempotency", installation, identityKey)[:32]
}

// needsApproval says the call waits for a person's approval of exactly
// this call (CallHash) before it may go out.
func (lc *ledgerCall) needsApproval() bool {
	return lc.x.e.needsApproval(lc.x.prog, lc.m, lc.tool) && lc.x.run.ApprovedHash != lc.callHash
}

// recordInFlight writes the row in_flight, with the run, before the call
// starts (ch 13 §13.7.1): a consumer's first commit, which makes prepare's
// result and the events it selected (x.reserve) durable with it. A crash
// before it re-runs prepare (prepare has no side effects); from here on,
// the write may have happened.
func (lc *ledgerCall) recordInFlight() error {
	x, mut, now := lc.x, &lc.mut, lc.x.e.NowMs()
	params, _ := json.Marshal(lc.args)
	mut.RunID, mut.Params, mut.PayloadHash, mut.Target = x.run.ID, params, lc.payloadHash, lc.target
	mut.CanReconcile = lc.m.CanReconcile(lc.args)
	mut.Status, mut.ErrorClass, mut.ErrorMessage, mut.ResolvedBy, mut.Result, mut.UpdatedAt = kt.MutationInFlight, "", "", "", nil, now
	// Each call that goes out has its own reconcile attempts: after It didn't
	// happen a new uncertain send starts again at attempt 1 of the policy's.
	mut.SentAt, mut.NotFoundAt, mut.ReconcileAttempts = now, 0, 0
	lc.traceNote("in_flight", true)
	x.run.UpdatedAt = now
	// A fresh row not looked up yet (the usual case) is inserted on the
	// condition that its identity is new (MutationInsert), with no read:
	// on PostgreSQL the commit is one round trip. When a row has that
	// identity after all (a retry's case), the commit is made again with
	// the look-up, which hands that row back (identityFound).
	err := lc.commitInFlight(lc.unlooked && lc.fresh)
	if errors.Is(err, store.ErrIdentityTaken) {
		err = lc.commitInFlight(false)
	}
	if err != nil {
		return fmt.Errorf("record mutation in_flight (the call was not started): %w", err)
	}
	x.ledger = ledgerMark{id: mut.ID, status: mut.Status}
	x.mutationEvent(lc.method(), "in_flight")
	x.e.CrashPoint(CrashAfterInFlight)
	return nil
}

// commitInFlight is recordInFlight's commit: the row inserted on the
// condition that its identity is new (insert), or looked up first when
// not looked up yet (lc.unlooked) and then written.
func (lc *ledgerCall) commitInFlight(insert bool) error {
	x, mut := lc.x, &lc.mut
	lookUp := lc.unlooked && !insert
	var reads func(tx store.Tx)
	if lookUp {
		reads = func(tx store.Tx) { _, _ = tx.MutationByIdentity(lc.identityKey) }
	}
	return x.writeReading(reads, func(tx store.Tx) error {
		if lookUp {
			// The look-up, under the lock the row is written under.
			switch row, err := tx.MutationByIdentity(lc.identityKey); {
			case err == nil:
				return &identityFound{row: row}
			case !errors.Is(err, kt.ErrNotFound):
				return err
			}
		}
		var err error
		switch {
		case insert:
			err = transition.InsertMutation(tx, *mut)
		case lc.fresh: // a row newRow made under a fresh id: not stored yet
			err = transition.PutMutationFrom(tx, "", *mut)
		default:
			err = transition.PutMutation(tx, *mut)
		}
		if err != nil {
			return err
		}
		x.e.CrashPoint(CrashInsideInFlight)
		return x.putRun(tx)
	})
}

// send makes the call with the row's idempotency key and says what its
// answer leads to (onOutcome); the answer is on the trace.
func (lc *ledgerCall) send() (connector.Result, callStep, error) {
	e := lc.x.e
	// Several nodes: past this node's lease (on its monotonic clock: after
	// a pause it has run out) the write is not started; the workflow's new
	// owner finds it in_flight and reconciles it.
	if f, ok := store.FenceOf(lc.x.ctx); ok && !f.Live(clock.MonoMs()) {
		return connector.Result{}, "", fmt.Errorf("%w: the lease ran out before %s was sent; it was not sent", store.ErrFenced, lc.target)
	}
	start, sent := time.Now(), e.monoNow()
	cctx, cancel := context.WithTimeout(lc.x.ctx, lc.x.toolTimeout(lc.args))
	res := lc.x.do(cctx, lc.tool, lc.m, connector.Call{Args: lc.args, IdempotencyKey: lc.mut.IdempotencyKey})
	cancel()
	e.CrashPoint(CrashAfterCall)
	outcome := map[connector.Outcome]string{connector.OutcomeApplied: "applied", connector.OutcomeFailed: "failed", connector.OutcomeUncertain: "uncertain"}[res.Outcome]
	if res.Err != nil {
		outcome += ": " + res.Err.Message
	}
	lc.x.tr.add(kt.TraceEntry{At: start.UnixMilli(), Phase: lc.phase, Kind: "call", Method: lc.method(), Args: lc.redacted,
		Duration: time.Since(start).Milliseconds(), Outcome: outcome})
	next := onOutcome(res.Outcome, lc.mut.CanReconcile)
	if next == callReconcile || next == callIndeterminate {
		lc.mut.ErrorClass, lc.mut.ErrorMessage = kt.ClassIndeterminate, res.Err.Message
	}
	if next == callReconcile {
		// The settle window counts from here, on this process's clock.
		e.sends.sent(lc.mut, sent)
	}
	return res, next, nil
}

// reconcileAnswer is what one reconcile attempt found and leads to.
type reconcileAnswer struct {
	step  reconcileStep
	value any   // the result, when it happened
	err   error // the connector's reason, when it could not tell
	// settleAt is when a "did not happen" may be believed (recRecheck).
	settleAt int64
	// retryAt is when to ask again (recRetryLater), and delay the wait.
	retryAt int64
	delay   time.Duration
}

// askReconcile asks the connector once whether mut happened (ch 13 §13.8):
// the trace line, a background attempt counted (inline ones are not), the
// settle rule for "did not happen", the policy's attempts. A call that
// cannot be checked (no reconcile) is recUncheckable.
func (x *runExec) askReconcile(mut *kt.Mutation, phase string, when reconcileAttempt) reconcileAnswer {
	e := x.e
	m, merr := x.reg.Method(mut.Tool, mut.Method)
	call, cerr := reconcileCall(*mut)
	if merr != nil || cerr != nil || m.Reconcile == nil || !mut.CanReconcile {
		return reconcileAnswer{step: recUncheckable}
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(x.ctx, x.toolTimeout(call.Args))
	status, value, rerr := x.probe(cctx, mut.Tool, m, call)
	cancel()
	e.CrashPoint(CrashAfterProbe)
	text := string(status)
	if rerr != nil {
		text += ": " + rerr.Error()
	}
	x.tr.add(kt.TraceEntry{At: start.UnixMilli(), Phase: phase, Kind: "call", Method: mut.Tool + "." + mut.Method + ".reconcile",
		Duration: time.Since(start).Milliseconds(), Outcome: text})
	if when == backgroundAttempt && status != connector.ReconcileApplied && status != connector.ReconcileFailed {
		mut.ReconcileAttempts++
	}
	if e.observer != nil {
		// Every question asked is counted for /metrics (issue 42): the
		// ledger's attempts count only the background ones that did not
		// settle, and start again at each new send.
		answer := string(status)
		if rerr != nil && status == "" {
			answer = "error"
		}
		e.observer.Reconciled(mut.Workflow, answer)
	}
	ans := reconcileAnswer{value: value, err: rerr}
	if status == connector.ReconcileApplied {
		e.sends.forget(mut.ID)
	}
	if status == connector.ReconcileFailed {
		ans.settleAt = x.notHappenedYet(mut, call.Args)
	}
	ans.step = onReconcile(status, ans.settleAt, reconcileExhausted(when, mut.ReconcileAttempts, x.pol.ReconcileAttempts))
	if ans.step == recRetryLater {
		ans.delay = config.Backoff(x.pol.ReconcileBackoff, x.pol.ReconcileBackoffMax, mut.ReconcileAttempts+1)
		ans.retryAt = e.NowMs() + ans.delay.Milliseconds()
	}
	return ans
}

// reconcileCall builds the connector call of a ledger row.
func reconcileCall(m kt.Mutation) (connector.Call, error) {
	var args map[string]any
	if err := json.Unmarshal(m.Params, &args); err != nil {
		return connector.Call{}, err
	}
	return connector.Call{Args: args, IdempotencyKey: m.IdempotencyKey}, nil
}

// The ledger row's state changes, shared by every path; the caller writes
// the row (transition.PutMutation checks the move against ch 13's table).

// markApplied records that the write happened, with its result.
func markApplied(mut *kt.Mutation, result json.RawMessage, resolvedBy string, now int64) {
	mut.Status, mut.Result, mut.UpdatedAt, mut.ErrorClass, mut.ErrorMessage = kt.MutationApplied, result, now, "", ""
	if resolvedBy != "" {
		mut.ResolvedBy = resolvedBy
	}
}

// markFailed records that the write certainly did not happen.
func markFailed(mut *kt.Mutation, cause *kt.Error, resolvedBy string, now int64) {
	mut.Status, mut.UpdatedAt = kt.MutationFailed, now
	if cause != nil {
		mut.ErrorClass, mut.ErrorMessage = cause.Class, cause.Message
	}
	if resolvedBy != "" {
		mut.ResolvedBy = resolvedBy
	}
}

// markRecheck keeps the row in needs_reconcile until at.
func markRecheck(mut *kt.Mutation, at, now int64) {
	mut.Status, mut.NextReconcileAt, mut.UpdatedAt = kt.MutationNeedsReconcile, at, now
}

// notHappenedYet applies the settle rule to a reconcile that answered "did
// not happen" (issue 11 #5: a server that took 2 s got a write twice when a
// probe 1 s after a 1 s timeout found nothing yet). Such an answer is proof
// only when an earlier one agrees and the settle time (the policy's, or the
// call's own timeout when longer) has passed since the call went out,
// measured on this process's monotonic clock (settle.go: no step of the
// wall clock shortens it). It returns 0 when the answer is proof, else
// when to check again; it records the first answer on mut.
func (x *runExec) notHappenedYet(mut *kt.Mutation, args map[string]any) int64 {
	now := x.e.NowMs()
	settle := x.toolTimeout(args)
	if x.pol.ReconcileSettle > settle {
		settle = x.pol.ReconcileSettle
	}
	waited, earlier := x.e.sends.notFound(*mut, x.e.monoNow())
	if mut.NotFoundAt == 0 {
		mut.NotFoundAt = now
	}
	if earlier && waited >= settle {
		x.e.sends.forget(mut.ID)
		return 0
	}
	return now + max(settle-waited, settleRecheck).Milliseconds()
}

// settleRecheck is the least wait between two "did not happen" answers.
const settleRecheck = time.Second
