package keeptype

import (
	"encoding/json"
	"sort"
)

// People's actions and the other names the API speaks (what a person can
// do, how a version is deployed, a write awaiting a person, a trace line,
// a notice): plain names, here so that the engine, the API and its
// clients share one definition. control.Control decides what each does.

// Action is one thing a person can do to keep's state.
type Action string

// People's actions: the one list. The API, the page and the CLI offer
// these and no others, each carried out by control.Control.Do.
const (
	ActTryAgain      Action = "try-again"      // a run: check again, or retry a failed run
	ActDidntHappen   Action = "didnt-happen"   // a run: the write did not happen, send it again
	ActSkip          Action = "skip"           // a run: give up its write
	ActReprocess     Action = "reprocess"      // a run blocked on an item: a new attempt of the item
	ActApprove       Action = "approve"        // a run waiting for approval of its write
	ActPause         Action = "pause"          // a workflow
	ActResume        Action = "resume"         // a workflow
	ActRunNow        Action = "run-now"        // a workflow: every producer now
	ActGrant         Action = "grant"          // a workflow: allow what its active version uses, or the Items named
	ActRevoke        Action = "revoke"         // a workflow: take the Items granted back
	ActSkipPending   Action = "skip-pending"   // a topic's pending events
	ActResetState    Action = "reset-state"    // a producer's stored state
	ActSkipItem      Action = "skip-item"      // an item
	ActReprocessItem Action = "reprocess-item" // an item
	ActApproveRepair Action = "approve-repair" // a repair the Maintainer held
	ActRejectRepair  Action = "reject-repair"  // a repair the Maintainer held
	ActPublish       Action = "publish"        // a topic open to the event API: post one event
	ActTakeHeld      Action = "take-held"      // a workflow's held webhook deliveries: take them now
	ActDropHeld      Action = "drop-held"      // a workflow's held webhook deliveries: drop them (recorded refused)
)

// ActDeploy is a deploy: carried out by control.Deploy, and allowed or
// refused by control.Control.MayAct like every action Do carries out.
const ActDeploy Action = "deploy"

// ActPrune is a prune of finished work's history by the retention policy
// (engine.Engine.Prune; keep prune, POST /api/v1/prune): allowed or
// refused by control.Control.MayAct like every action.
const ActPrune Action = "prune"

// Resolution is what a person can do with a blocked run (ch 13 §13.9).
type Resolution string

const (
	ResolveTryAgain    Resolution = "try-again"
	ResolveDidntHappen Resolution = "didnt-happen"
	ResolveSkip        Resolution = "skip"
	ResolveApprove     Resolution = "approve"
	// ResolveReprocess starts a new attempt of the done item a task run
	// tried to mutate, and retries the run (offered only there).
	ResolveReprocess Resolution = "reprocess"
)

// DeployKind chooses how a new version relates to the current one (SPEC §9).
type DeployKind string

const (
	DeployMinor DeployKind = "minor"
	DeployMajor DeployKind = "major"
)

// PendingCall is the preview of a mutation kept on a run: what a person
// approves and what a blocked card shows. Its args are redacted.
type PendingCall struct {
	Tool        string         `json:"tool"`
	Method      string         `json:"method"`
	Target      string         `json:"target"`
	Args        map[string]any `json:"args"`
	PayloadHash string         `json:"payloadHash"`
	// CallHash binds an approval to the whole call (engine.CallHash).
	CallHash string `json:"callHash"`
	// DoneItem is the key of the item this call was made on although the
	// item is done: the run failed before sending it, and Skip cannot end
	// that block; Reprocess of the item can (ch 14 §14.2.2).
	DoneItem string `json:"doneItem,omitempty"`
	// Item is the key of the task item this call was made on: when the run
	// blocks on it (the item needs attention), its card offers Reprocess.
	Item string `json:"item,omitempty"`
	// Conflict says the call was refused because the same write was
	// already applied for these inputs with significantly different
	// content (ch 14 §14.5): a consumer's inputs then need attention, and
	// its card offers Reprocess (a new attempt writes the new content).
	Conflict bool `json:"conflict,omitempty"`
}

// TraceEntry is one line of a run's trace: a tool call, a log line, a
// ctx.now/random value, a phase change or an error.
type TraceEntry struct {
	At       int64  `json:"at"`
	Phase    string `json:"phase,omitempty"`
	Kind     string `json:"kind"` // call, log, now, random, phase, error, mutation
	Method   string `json:"method,omitempty"`
	Args     any    `json:"args,omitempty"`
	Duration int64  `json:"durationMs,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
	Text     string `json:"text,omitempty"`
	// ArgsHash and Result record a read (a call that succeeded without
	// writing): the hash of its whole arguments and what it answered, so
	// that a dry run answers the same read from here and never from the
	// world (issue 22). Results past maxTraceResult, or past
	// maxTraceResults in one trace, are not kept: such a read cannot be
	// replayed, and a dry run that makes it stops there.
	ArgsHash string          `json:"argsHash,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	// JSONOfBody says the result is stored once (StoredOnce): its `json`
	// is its `body` parsed, made again when the trace is read. Only a
	// stored trace has it set; a decoded entry has its result whole.
	JSONOfBody bool `json:"jsonOfBody,omitempty"`
	// ArgsAsBefore says the arguments are those of the last entry before
	// this one of the same method that has them (a write's arguments:
	// requested, in flight, applied), stored once (TraceEntries).
	ArgsAsBefore bool `json:"argsAsBefore,omitempty"`
}

// Notice is something a person watching should know, as one line.
type Notice struct {
	Workflow string
	RunID    string
	Text     string
}

// Risk is what a person's choice on a blocked run risks (issue 42): the
// card orders its choices by it, safest first, colours each by it and
// says it on the choice's line; the CLI's card prints them in that order.
type Risk string

const (
	// RiskNone: nothing is sent twice and nothing is given up.
	RiskNone Risk = "none"
	// RiskMissing: nothing is sent; the write may never happen.
	RiskMissing Risk = "missing"
	// RiskTwice: a write is sent again; it may happen twice.
	RiskTwice Risk = "twice"
)

// riskRank orders risks, safest first.
var riskRank = map[Risk]int{RiskNone: 0, RiskMissing: 1, RiskTwice: 2}

// Choice is one thing a person can do with a blocked run, with what it risks.
type Choice struct {
	Action Resolution `json:"action"`
	Risk   Risk       `json:"risk"`
	// Says is the risk in words, for the choice's line.
	Says string `json:"says"`
}

// ChoiceScope is what a person's choice acts on: a blocked run (its card),
// an item (its page: Reprocess, Skip) or a topic (skip its pending events).
// Each place that offers an action says its risk from choiceTable.
type ChoiceScope string

const (
	ScopeRun   ChoiceScope = "run"
	ScopeItem  ChoiceScope = "item"
	ScopeTopic ChoiceScope = "topic"
)

type choiceKey struct {
	scope     ChoiceScope
	action    Resolution
	uncertain bool
}

// choiceTable is what each action risks where it is offered, and the
// sentence its line says: the one table the card, the item page, the
// topics page and the CLI read. An action without an entry for an
// uncertain write reads its entry for a certain one.
var choiceTable = map[choiceKey]Choice{
	{ScopeRun, ResolveTryAgain, true}:               {Risk: RiskNone, Says: "keep asks the target whether the write applied; nothing is sent again"},
	{ScopeRun, ResolveTryAgain, false}:              {Risk: RiskNone, Says: "runs it again from where it stopped; a write already applied is never sent again"},
	{ScopeRun, ResolveApprove, false}:               {Risk: RiskNone, Says: "sends this write once, as shown"},
	{ScopeRun, ResolveSkip, true}:                   {Risk: RiskMissing, Says: "nothing is sent; if the write did not apply, it never will"},
	{ScopeRun, ResolveSkip, false}:                  {Risk: RiskMissing, Says: "gives up this run's write; its events are skipped"},
	{ScopeRun, ResolveDidntHappen, false}:           {Risk: RiskTwice, Says: "sends the write again: if it did apply, it may happen twice"},
	{ScopeRun, ResolveReprocess, true}:              {Risk: RiskTwice, Says: "a new attempt sends a new write with a new key: if the first applied, it happens twice"},
	{ScopeRun, ResolveReprocess, false}:             {Risk: RiskTwice, Says: "a new attempt of the item: its writes really run again"},
	{ScopeItem, ResolveSkip, true}:                  {Risk: RiskMissing, Says: "nothing is sent; if its unconfirmed write did not apply, it never will"},
	{ScopeItem, ResolveSkip, false}:                 {Risk: RiskMissing, Says: "its pending work is dropped: what it has not written yet never will be"},
	{ScopeItem, ResolveReprocess, true}:             {Risk: RiskTwice, Says: "a new attempt sends a new write with a new key: if the unconfirmed one applied, it happens twice"},
	{ScopeItem, ResolveReprocess, false}:            {Risk: RiskTwice, Says: "a new attempt of the item: its writes really run again, also those already done"},
	{ScopeTopic, Resolution(ActSkipPending), false}: {Risk: RiskMissing, Says: "its consumer never sees them: what they would have written never will be"},
}

// ChoiceOf is what res risks on a blocked run: uncertain says the run's
// write may have applied (its outcome is unknown), where sending anything
// again may write twice.
func ChoiceOf(res Resolution, uncertain bool) Choice {
	return ChoiceIn(ScopeRun, res, uncertain)
}

// ChoiceIn is what action risks offered on scope (choiceTable); an action
// the table does not know is said to risk the most.
func ChoiceIn(scope ChoiceScope, action Resolution, uncertain bool) Choice {
	c, ok := choiceTable[choiceKey{scope, action, uncertain}]
	if !ok {
		c, ok = choiceTable[choiceKey{scope, action, false}]
	}
	if !ok {
		c = Choice{Risk: RiskTwice, Says: "unknown choice"}
	}
	c.Action = action
	return c
}

// Choices are the actions offered on a blocked run with what each risks,
// safest first (actions in the same risk keep their order).
func Choices(actions []string, uncertain bool) []Choice {
	return ChoicesIn(ScopeRun, actions, uncertain)
}

// ChoicesIn is Choices for the actions offered on scope.
func ChoicesIn(scope ChoiceScope, actions []string, uncertain bool) []Choice {
	out := make([]Choice, 0, len(actions))
	for _, a := range actions {
		out = append(out, ChoiceIn(scope, Resolution(a), uncertain))
	}
	sort.SliceStable(out, func(i, j int) bool { return riskRank[out[i].Risk] < riskRank[out[j].Risk] })
	return out
}

// ItemChoices are the item page's Reprocess and Skip with what each risks,
// safest first; uncertain: a write of the item's current attempt has an
// unknown outcome.
func ItemChoices(uncertain bool) []Choice {
	return ChoicesIn(ScopeItem, []string{string(ResolveReprocess), string(ResolveSkip)}, uncertain)
}

// Label is the risk in a few words, as the card and the CLI print it.
func (r Risk) Label() string {
	switch r {
	case RiskNone:
		return "safe"
	case RiskMissing:
		return "risk: the write may be missing"
	}
	return "risk: the write may happen twice"
}

// Command is the CLI command that takes this choice on run runID: what
// the card, keep's card text and a notice print.
func (c Choice) Command(runID string) string {
	if c.Action == ResolveApprove {
		return "keep approve " + runID
	}
	return "keep resolve " + runID + " --" + string(c.Action)
}
