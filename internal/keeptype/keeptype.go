// Package keeptype holds the plain types and enums shared by every part of
// keep: runs, phases, statuses, events, inputs, mutations and the closed
// failure taxonomy. It imports nothing of the project, so any package may use
// it without creating a cycle.
package keeptype

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Phase is how far a run got. Phases only move forward (SPEC §4).
type Phase string

const (
	PhasePreparing Phase = "preparing"
	PhasePrepared  Phase = "prepared"
	PhaseMutating  Phase = "mutating"
	PhaseMutated   Phase = "mutated"
	PhaseEmitting  Phase = "emitting"
	PhaseCommitted Phase = "committed"
	PhaseExecuting Phase = "executing" // producer and item-script runs
)

// phaseOrder gives each phase its rank so "forward only" can be checked.
var phaseOrder = map[Phase]int{
	PhasePreparing: 0, PhaseExecuting: 0,
	PhasePrepared: 1, PhaseMutating: 2, PhaseMutated: 3, PhaseEmitting: 4, PhaseCommitted: 5,
}

// allowedPhase is the consumer/producer phase machine as a table: from → allowed next phases.
var allowedPhase = map[Phase][]Phase{
	PhasePreparing: {PhasePrepared, PhaseMutating, PhaseEmitting},
	PhasePrepared:  {PhaseMutating, PhaseEmitting},
	PhaseMutating:  {PhaseMutated, PhaseEmitting},
	PhaseMutated:   {PhaseEmitting},
	PhaseEmitting:  {PhaseCommitted},
	PhaseExecuting: {PhaseCommitted},
}

// PhaseTransitionAllowed reports whether a run may move from one phase to another.
// Staying in the same phase is always allowed (status changes do not move the phase).
func PhaseTransitionAllowed(from, to Phase) bool {
	if from == to {
		return true
	}
	for _, p := range allowedPhase[from] {
		if p == to {
			return true
		}
	}
	return false
}

// PhaseRank orders phases; used by reset rules ("phase ≥ mutated").
func PhaseRank(p Phase) int { return phaseOrder[p] }

// Status is what is happening to a run now; separate from its phase.
type Status string

const (
	StatusActive         Status = "active"
	StatusTransient      Status = "paused:transient"
	StatusApproval       Status = "paused:approval"
	StatusReconciliation Status = "paused:reconciliation"
	StatusFailedLogic    Status = "failed:logic"
	StatusFailedInternal Status = "failed:internal"
	StatusCrashed        Status = "crashed"
	StatusCommitted      Status = "committed"
	// StatusRetried marks a failed run that a newer run (retry_of → this one)
	// has replaced. It no longer blocks its workflow; its history stays visible.
	StatusRetried Status = "retried"
	// StatusSkipped marks a run a person skipped before its mutation was applied:
	// its reserved events were skipped and nothing of it was committed.
	StatusSkipped Status = "skipped"
)

// runStatusFrom is the run status machine as a table: the statuses a run
// may move to from each one. A new run ("") may be written in any status (a
// producer's run is first written at its commit or its failure). A blocked
// run moves on in place only from reconciliation (the write turned out
// applied — the run may then commit in place, its outcome with next's —
// or failed, or stays unknown); otherwise it is replaced by a
// retry (retried) or closed by a person (skipped). Finished runs never
// change: a stale worker, or a second node, cannot write over them.
var runStatusFrom = map[Status][]Status{
	StatusActive:         {StatusTransient, StatusApproval, StatusReconciliation, StatusFailedLogic, StatusFailedInternal, StatusCrashed, StatusCommitted, StatusRetried, StatusSkipped},
	StatusTransient:      {StatusRetried, StatusSkipped},
	StatusApproval:       {StatusRetried, StatusSkipped, StatusReconciliation},
	StatusReconciliation: {StatusActive, StatusTransient, StatusApproval, StatusFailedLogic, StatusFailedInternal, StatusCommitted, StatusRetried, StatusSkipped},
	StatusFailedLogic:    {StatusRetried, StatusSkipped},
	StatusFailedInternal: {StatusRetried, StatusSkipped},
	StatusCrashed:        {StatusRetried, StatusSkipped},
	StatusCommitted:      {},
	StatusRetried:        {},
	StatusSkipped:        {},
}

// RunStatuses lists every run status, for what names them (keep test's
// expectations, keep.d.ts).
var RunStatuses = []Status{StatusActive, StatusTransient, StatusApproval, StatusReconciliation, StatusFailedLogic, StatusFailedInternal, StatusCrashed, StatusCommitted, StatusRetried, StatusSkipped}

// RunStatusTransitionAllowed reports whether a stored run may move from one
// status to another. Writing the same status again is always allowed (a
// run records its trace, phase or a person's decision without moving).
func RunStatusTransitionAllowed(from, to Status) bool {
	if from == "" || from == to {
		return true
	}
	for _, s := range runStatusFrom[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Finished reports whether a run with this status no longer blocks its workflow.
func (s Status) Finished() bool {
	return s == StatusCommitted || s == StatusRetried || s == StatusSkipped
}

// HandlerType is the kind of handler a run executes.
type HandlerType string

const (
	HandlerProducer HandlerType = "producer"
	HandlerConsumer HandlerType = "consumer"
	HandlerTask     HandlerType = "task"
	// HandlerWebhook is a webhook's handler (issue 26): producer-like, run
	// for one delivery while its sender waits; it has no run of its own.
	HandlerWebhook HandlerType = "webhook"
)

// HandlerTypes lists every handler type (the store writes one into a
// statement only when it is among them).
var HandlerTypes = []HandlerType{HandlerProducer, HandlerConsumer, HandlerTask, HandlerWebhook}

// ErrorClass is the closed failure taxonomy of SPEC §6.
type ErrorClass string

const (
	ClassTransient     ErrorClass = "transient"
	ClassLogic         ErrorClass = "logic"
	ClassPermission    ErrorClass = "permission"
	ClassPrecondition  ErrorClass = "precondition"
	ClassIndeterminate ErrorClass = "indeterminate"
	ClassInternal      ErrorClass = "internal"
)

// Error is keep's coded error: a class that callers branch on and a message for people.
type Error struct {
	Class   ErrorClass
	Message string
	Err     error
	// RetryAfter, for a transient error, is the least wait the service
	// asked for (a 429's Retry-After); the retry waits at least that long.
	RetryAfter time.Duration
	// Progressed, for a transient error, says the call got somewhere
	// before it failed and kept it (pages of a listing a rate limit cut
	// short), so its retry goes on from there: the retry is not counted
	// against the policy's transient_retries, which bound retries that
	// get nowhere.
	Progressed bool
}

// ReconnectSuffix ends the message of a permission error that a person
// fixes by connecting an account again; ReconnectOf finds it, so a card can
// offer Reconnect.
func ReconnectSuffix(provider string) string { return " — reconnect it: keep connect " + provider }

// ReconnectOf returns the provider a message asks to connect again, or "".
func ReconnectOf(msg string) string {
	const marker = " — reconnect it: keep connect "
	i := strings.LastIndex(msg, marker)
	if i < 0 {
		return ""
	}
	p := msg[i+len(marker):]
	if j := strings.IndexAny(p, " ;,.\n"); j >= 0 {
		p = p[:j]
	}
	return p
}

func (e *Error) Error() string {
	if e.Err != nil && e.Message == "" {
		return e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Is compares classes, so errors.Is(err, &Error{Class: ClassLogic}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Class == e.Class && t.Message == ""
}

// Errorf builds a classified error.
func Errorf(class ErrorClass, format string, args ...any) *Error {
	return &Error{Class: class, Message: fmt.Sprintf(format, args...)}
}

// ClassOf returns the class of err, or internal when it carries none.
func ClassOf(err error) ErrorClass {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return ClassInternal
}

// Sentinel errors that the store and CLI branch on.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
)

// EventStatus is the state of an event in its topic.
type EventStatus string

const (
	EventPending  EventStatus = "pending"
	EventConsumed EventStatus = "consumed"
	EventSkipped  EventStatus = "skipped"
)

// EventStatuses lists every event status.
var EventStatuses = []EventStatus{EventPending, EventConsumed, EventSkipped}

// Event is one message in a topic.
type Event struct {
	ID         int64
	Workflow   string
	Topic      string
	MessageID  string
	Payload    json.RawMessage
	Status     EventStatus
	ReservedBy string
	CreatedBy  string
	CausedBy   []string
	Attempt    int
	CreatedAt  int64
	UpdatedAt  int64
	// PrunedAt is when the retention dropped the payload of this
	// consumed or skipped event (issue 44); 0: it is kept.
	PrunedAt int64
}

// Published is what an event becomes when it is published (ch 06a, SPEC
// §4): a new one starts pending in attempt 1 (unless said otherwise); one
// published again, found as had, takes the new payload (last write wins)
// and the union of the causes, and keeps its status, reservation, attempt
// and creation (time and run) — unless the publish comes from a newer attempt of its
// input (a reprocess, SPEC §8.2), which re-opens it. Every store applies
// this rule as it is; storage only stores the result.
func Published(had *Event, e Event) Event {
	if had == nil {
		if e.Status == "" {
			e.Status = EventPending
		}
		if e.Attempt == 0 {
			e.Attempt = 1
		}
		return e
	}
	e.ID, e.CreatedAt, e.CreatedBy = had.ID, had.CreatedAt, had.CreatedBy
	e.CausedBy = UnionCauses(had.CausedBy, e.CausedBy)
	if e.Attempt > had.Attempt {
		e.Status, e.ReservedBy = EventPending, ""
	} else {
		e.Status, e.ReservedBy, e.Attempt = had.Status, had.ReservedBy, had.Attempt
		// A finished event whose payload the retention dropped stays so
		// (issue 44): nothing reads it again, and the stored "null" tells
		// nothing of what it was, so taking the publish's payload would
		// make every poll that sees old work again a change (never quiet)
		// and bring the payload back for good.
		if had.PrunedAt != 0 {
			e.Payload, e.PrunedAt = had.Payload, had.PrunedAt
		}
	}
	return e
}

// PublishChanges says whether publishing had again as merged (Published)
// changes anything of it but its time: its payload, causes, status,
// reservation or attempt. A publish that does not is not written (a
// producer that publishes what it published before found nothing new).
func PublishChanges(had, merged Event) bool {
	return string(had.Payload) != string(merged.Payload) || had.PrunedAt != merged.PrunedAt || !slices.Equal(had.CausedBy, merged.CausedBy) ||
		had.Status != merged.Status || had.ReservedBy != merged.ReservedBy || had.Attempt != merged.Attempt
}

// UnionCauses is the caused_by of an event published again (last write
// wins on the payload): the union of what it had and what the new publish
// brings, sorted, so that an input never loses what it caused (ch 06a;
// issue 10: a republish from a run that reserved nothing once left []).
func UnionCauses(had, adds []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, list := range [][]string{had, adds} {
		for _, c := range list {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	sort.Strings(out)
	return out
}

// RunAction is a person's decision recorded on a blocked run, which the
// engine carries out at its next step.
type RunAction string

const (
	ActionRetry RunAction = "retry"
	ActionSkip  RunAction = "skip"
	// ActionCheckAgain: Try again on a write whose outcome is unknown —
	// keep asks the target once more (reconcile), attempts reset.
	ActionCheckAgain RunAction = "check-again"
	// ActionDidntHappen: a person states that an unknown write did not
	// happen; carried out only while no proof says it did (proof wins).
	ActionDidntHappen RunAction = "didnt-happen"
)

// Input is one external thing that happened (the input ledger; an item of kind "input").
type Input struct {
	ID             string
	Workflow       string
	Key            string // source:type:id
	Kind           ItemKind
	Source         string
	Type           string
	ExternalID     string
	Title          string
	Status         ItemStatus // stored for task items; derived for inputs (report.InputStatus)
	CurrentAttempt int
	CreatedBy      string
	LastRun        string
	LastVersion    int64 // version id of the last run that touched the item
	CreatedAt      int64
	UpdatedAt      int64
}

// ItemKind tells an input (registered by a producer) from a task item
// (entered with withItem).
type ItemKind string

const (
	KindInput ItemKind = "input"
	KindTask  ItemKind = "task"
)

// ItemStatus is an item's status (ch 12 §12.4).
type ItemStatus string

// Item statuses of ch 12 §12.4 (stored for task items; derived for inputs).
const (
	ItemProcessing     ItemStatus = "processing"
	ItemDone           ItemStatus = "done"
	ItemFailed         ItemStatus = "failed"
	ItemSkipped        ItemStatus = "skipped"
	ItemNeedsAttention ItemStatus = "needs_attention"
	ItemPending        ItemStatus = "pending" // inputs only: an event caused by it is waiting
)

// Finished says an item is done or skipped: no run takes it again on its
// own, and a version that gives items other ids leaves behind only the
// ones not finished.
func (s ItemStatus) Finished() bool { return s == ItemDone || s == ItemSkipped }

// ItemStatuses lists every status an item or input shows.
var ItemStatuses = []ItemStatus{ItemPending, ItemProcessing, ItemDone, ItemFailed, ItemSkipped, ItemNeedsAttention}

// allowedItem is the item state machine of ch 12 §12.4 for task items,
// plus "skip" of a stuck or orphaned item and "reprocess" (a new attempt)
// from any settled state (§12.5, §12.7).
var allowedItem = map[ItemStatus][]ItemStatus{
	"":                 {ItemProcessing},
	ItemProcessing:     {ItemDone, ItemFailed, ItemNeedsAttention, ItemSkipped, ItemProcessing},
	ItemFailed:         {ItemProcessing, ItemSkipped},
	ItemNeedsAttention: {ItemProcessing, ItemSkipped},
	ItemSkipped:        {ItemProcessing},
	ItemDone:           {ItemProcessing},
}

// ItemTransitionAllowed reports whether a task item may move between states.
func ItemTransitionAllowed(from, to ItemStatus) bool {
	for _, s := range allowedItem[from] {
		if s == to {
			return true
		}
	}
	return false
}

// ItemAttempt is one pass of processing of an item (ch 12 §12.5).
type ItemAttempt struct {
	ItemID    string
	Attempt   int
	Status    ItemStatus
	Version   int64
	StartedAt int64
	UpdatedAt int64
}

// Run is one execution of one handler.
type Run struct {
	ID             string
	Workflow       string
	Version        int64
	Handler        string
	HandlerType    HandlerType
	Phase          Phase
	Status         Status
	RetryOf        string
	RetryCount     int // how many transient retries led to this run
	PrepareResult  json.RawMessage
	MutationResult json.RawMessage // {status, result} handed to next
	PendingCall    json.RawMessage // the mutation captured from mutate, kept while awaiting approval
	ApprovedHash   string
	Action         RunAction // a person's decision waiting for the engine to carry it out
	ErrorClass     ErrorClass
	ErrorMessage   string
	Trace          json.RawMessage
	NextAttemptAt  int64
	CreatedAt      int64
	UpdatedAt      int64
	FinishedAt     int64
	// Rev counts the writes of the run: every write after the first is
	// conditional on the revision its writer read (store.Tx.RunSetIfRev).
	Rev int64
	// QuietPolls, on a producer's committed run, counts the polls that
	// found nothing new this one row stands for (issue 44): its trace,
	// CreatedAt, UpdatedAt and FinishedAt are the last one's, and
	// QuietSince is when the first of them started. 0: an ordinary run.
	QuietPolls int64
	QuietSince int64
	// PrunedAt is when the retention dropped the run's bodies (trace,
	// prepare and mutation results, pending call; issue 44); 0: they are
	// kept. A replay reads nothing of a pruned run.
	PrunedAt int64
	// BlockedAt is when the run began to wait for a person (engine.WhoActs
	// says a person acts; issue 42's time blocked); 0: it does not wait.
	BlockedAt int64
}

// MutationStatus is the mutation ledger state of chapter 13.
type MutationStatus string

const (
	MutationInFlight       MutationStatus = "in_flight"
	MutationApplied        MutationStatus = "applied"
	MutationFailed         MutationStatus = "failed"
	MutationNeedsReconcile MutationStatus = "needs_reconcile"
	MutationIndeterminate  MutationStatus = "indeterminate"
	MutationSkipped        MutationStatus = "skipped"
)

// allowedMutation is the mutation state machine of chapter 13 §13.8 plus the
// people's actions of §13.9 (try again, it didn't happen, skip).
var allowedMutation = map[MutationStatus][]MutationStatus{
	"":                     {MutationInFlight},
	MutationInFlight:       {MutationApplied, MutationFailed, MutationNeedsReconcile, MutationIndeterminate},
	MutationNeedsReconcile: {MutationApplied, MutationFailed, MutationNeedsReconcile, MutationIndeterminate, MutationSkipped},
	MutationIndeterminate:  {MutationNeedsReconcile, MutationFailed, MutationSkipped},
	MutationFailed:         {MutationInFlight, MutationSkipped},
	MutationApplied:        {},
	MutationSkipped:        {MutationInFlight},
}

// MutationTransitionAllowed reports whether the ledger may move from one state to another.
func MutationTransitionAllowed(from, to MutationStatus) bool {
	for _, s := range allowedMutation[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Mutation is one row of the mutation ledger.
type Mutation struct {
	ID                string
	Workflow          string
	RunID             string
	Handler           string
	ItemKeys          []string
	Attempt           int
	Tool              string
	Method            string
	Params            json.RawMessage
	Target            string // human-readable target, e.g. "POST http://host/orders"
	IdentityKey       string
	PayloadHash       string
	IdempotencyKey    string
	Status            MutationStatus
	Result            json.RawMessage
	ErrorClass        ErrorClass
	ErrorMessage      string
	CanReconcile      bool
	ReconcileAttempts int
	NextReconcileAt   int64
	ResolvedBy        string
	CreatedAt         int64
	UpdatedAt         int64
	// SentAt is when the call last went out (in_flight recorded).
	SentAt int64
	// NotFoundAt is when a reconcile first answered "did not happen" since
	// the call went out; one answer is not enough (see engine.notHappenedYet).
	NotFoundAt int64
	// PrunedAt is when the retention dropped the row's params (issue 44);
	// 0: they are kept. A pruned row's payload cannot be compared.
	PrunedAt int64
}

// Resolution sources recorded in Mutation.ResolvedBy.
const (
	ResolvedByReconciliation   = "reconciliation"
	ResolvedByUserRetry        = "user_retry"
	ResolvedByUserAssertFailed = "user_assert_failed"
	ResolvedByUserSkip         = "user_skip"
)

// Decision is one entry of the append-only decision log: what a person
// decided, on what, when and who (issue 10: "It didn't happen" once left no
// record once the write was sent again).
type Decision struct {
	ID         int64
	Workflow   string
	RunID      string // the run decided on, if any
	MutationID string // the mutation it concerns, if any
	ItemID     string // the item or input it concerns, if any
	Action     string // try-again, didnt-happen, skip, approve, skip-item, reprocess, pause, resume, run-now, deploy
	By         string // who: --by, the page's signed-in person, or "cli"
	Detail     string // what keep said it would do
	At         int64
}

// Workflow is a deployed script and its durable state.
type Workflow struct {
	Name          string
	ActiveVersion int64
	Paused        bool
	PausedReason  string
	// FilesRoot is the folder its files connector is rooted at, recorded
	// at deploy ("" for workflows deployed before it was recorded).
	FilesRoot string
	// Policy is the [policy] the workflow was last deployed under (JSON
	// of config.Policy; "" before it was recorded): the decisions the CLI
	// carries out for it run under it, wherever they are typed.
	Policy    string
	CreatedAt int64
	UpdatedAt int64
}

// Version is one deployed script of a workflow.
type Version struct {
	Workflow string
	ID       int64
	Major    int
	Minor    int
	Script   string
	File     string
	// Test is the workflow's test file (keep test) as it was at this
	// version's deploy, "" when it had none: a Maintainer repair must pass
	// it before it is activated.
	Test      string
	CreatedAt int64
}

// Label renders "major.minor".
func (v Version) Label() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Handler is the durable scheduling state of one producer, consumer or task.
type Handler struct {
	Workflow  string
	Name      string
	Type      HandlerType
	State     json.RawMessage
	Dirty     bool
	WakeAt    int64
	NextRunAt int64 // producers and tasks: when the schedule is next due; 0 = not scheduled
	Queued    bool  // run-now or a coalesced trigger
	UpdatedAt int64
	// QuietRun, on a producer, is the run that counts its polls that
	// found nothing new since its last run that found something (Run.
	// QuietPolls): the next such poll is folded into it. "": none.
	QuietRun string
}

// Lease is a node's right to step one workflow until ExpiresAt (ms). Token
// grows by one each time another node takes the workflow over: every
// durable write of a step is conditional on it (fencing), so a node that
// lost its lease — paused, partitioned, slow — can never write over the
// new owner's work.
type Lease struct {
	Workflow  string
	Node      string
	Token     int64
	ExpiresAt int64
}

// GrantLease decides whether node may step a workflow whose lease is cur
// (nil: none yet) at time now, until until: the holder renews it, anyone
// takes a free or expired one (with the next token), nobody else gets it.
func GrantLease(cur *Lease, workflow, node string, now, until int64) (Lease, bool) {
	switch {
	case cur == nil:
		return Lease{Workflow: workflow, Node: node, Token: 1, ExpiresAt: until}, true
	case cur.Node == node && cur.ExpiresAt > now:
		l := *cur
		l.ExpiresAt = until
		return l, true
	case cur.ExpiresAt <= now:
		return Lease{Workflow: workflow, Node: node, Token: cur.Token + 1, ExpiresAt: until}, true
	}
	return *cur, false
}

// RenewLease extends the lease a node holds with token: only while the
// store still shows it (nobody took it over, even if it expired meanwhile:
// then nobody acted on the workflow, and the holder may go on).
func RenewLease(cur Lease, node string, token, until int64) (Lease, bool) {
	if cur.Node != node || cur.Token != token {
		return cur, false
	}
	cur.ExpiresAt = until
	return cur, true
}

// Node is a keep serve process sharing a store with others.
type Node struct {
	ID        string
	Addr      string
	StartedAt int64
	SeenAt    int64
	// StoppedAt is when the node stopped cleanly (its leases released), 0
	// while it runs: a stopped node is not counted alive, though it was
	// seen a moment ago, and the others share its work out at their next
	// heartbeat instead of three heartbeats later.
	StoppedAt int64
}

// NodeHeartbeatEvery is how often a keep serve node records that it is alive.
const NodeHeartbeatEvery = 5 * time.Second

// AliveAt says whether the node was seen recently enough at now (ms) to be
// counted alive — by the scheduler's fair share and by what people see
// (keep status, the page), one rule for both: three missed heartbeats,
// about when lease_ttl's default (15 s) hands its workflows to others;
// none once it said it stopped.
func (n Node) AliveAt(now int64) bool {
	return n.StoppedAt == 0 && now-n.SeenAt < 3*NodeHeartbeatEvery.Milliseconds()
}

// NodeForgetAfter is how long a node that stopped or went silent is still
// listed (keep status, the page: "(stopped)", "(gone)") before the nodes
// alive forget it: each process is a node of its own, so without it
// every restart would stay listed for good.
const NodeForgetAfter = time.Hour

// ForgottenAt says whether the node, not alive, was last seen long enough
// before now (ms) to be forgotten.
func (n Node) ForgottenAt(now int64) bool {
	return !n.AliveAt(now) && now-n.SeenAt > NodeForgetAfter.Milliseconds()
}

// Connection is an account keep acts with on a provider's behalf (`keep
// connect google`). Sealed holds the credentials encrypted (package
// account); the store never sees them in the clear.
type Connection struct {
	Provider string
	Account  string
	Scopes   []string
	Sealed   []byte
	// Broken says why the credentials stopped working (a revoked grant), or "".
	Broken    string
	CreatedAt int64
	UpdatedAt int64
}

// Secret is a named credential a person gave keep (`keep secret set
// NAME`): what scripts name as {secret:NAME} in a call's headers, and what
// a webhook's signature is checked with. Sealed by package account; the
// store keeps only the sealed bytes.
type Secret struct {
	Name   string
	Sealed []byte
	// Hosts are where a call may send the secret (issue 38): hosts as a
	// grant names them ("api.crm.example", "127.0.0.1:8090"), sorted. A
	// secret without hosts goes nowhere (a webhook's verify needs none).
	Hosts     []string
	CreatedAt int64
	UpdatedAt int64
}

// SecretSuffix ends the message of a call that named a secret keep does
// not have: the card says how to give it.
func SecretSuffix(name string) string { return " — set it: keep secret set " + name }

// SecretsIn reads the {secret:NAME}s a text names, as a call's fill does
// (connector.FillSecrets): the names, sorted and once each; partial says
// the text holds a "{secret:" that names no secret whole (the start of a
// name built at run time, "{secret:" + name + "}").
func SecretsIn(s string) (names []string, partial bool) {
	const open, close = "{secret:", "}"
	seen := map[string]bool{}
	for {
		i := strings.Index(s, open)
		if i < 0 {
			break
		}
		rest := s[i+len(open):]
		j := strings.Index(rest, close)
		if j < 0 || CheckSecretName(rest[:j]) != nil {
			partial = true
			s = rest
			continue
		}
		if name := rest[:j]; !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
		s = rest[j+len(close):]
	}
	sort.Strings(names)
	return names, partial
}

// CheckSecretName says what is wrong with a secret's name, or nil: letters,
// digits, '_', '-' and '.', at most 100, so that {secret:NAME} reads the
// same in a header and on a card.
func CheckSecretName(name string) error {
	if name == "" || len(name) > 100 {
		return fmt.Errorf("a secret's name has 1 to 100 characters (got %d)", len(name))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("a secret's name has only letters, digits, '_', '-' and '.' (%q has %q)", name, r)
		}
	}
	return nil
}

// Grant is one thing a person allowed a workflow to use: a connector
// method ("gmail.send"), an input source ("source:gmail"), or all ("*").
type Grant struct {
	Workflow  string
	Item      string
	GrantedBy string
	GrantedAt int64
}

// RepairStatus is where a Maintainer's repair attempt stands (issue 17).
type RepairStatus string

const (
	RepairAsking    RepairStatus = "asking"    // recorded before the model is asked (one node asks at a time)
	RepairRefused   RepairStatus = "refused"   // the answer failed a check; fed back to the model
	RepairFailed    RepairStatus = "failed"    // no answer: the endpoint failed, or the budget ran out
	RepairHeld      RepairStatus = "held"      // potentially impactful: waits for a person
	RepairActivated RepairStatus = "activated" // deployed as the next minor version
	RepairRejected  RepairStatus = "rejected"  // a person said no
)

// Repair is one attempt of the Maintainer at a failed:logic run.
type Repair struct {
	ID          string
	Workflow    string
	RunID       string
	Attempt     int
	Status      RepairStatus
	FromVersion int64
	ToVersion   int64
	Script      string // the proposed script
	Explanation string // the model's words
	Reason      string // why keep refused, held or activated it
	Tokens      int
	DecidedBy   string
	CreatedAt   int64
	UpdatedAt   int64
}

// DeliveryStatus is what keep made of one request to a webhook.
type DeliveryStatus string

const (
	// DeliveryAccepted: verified, its handler ran, and what it registered
	// and published was committed before the sender got its 2xx.
	DeliveryAccepted DeliveryStatus = "accepted"
	// DeliveryDuplicate: a delivery id accepted before; nothing changed.
	DeliveryDuplicate DeliveryStatus = "duplicate"
	// DeliveryRefused: it failed verification (or keep lacks the secret to
	// verify it); the handler never saw it.
	DeliveryRefused DeliveryStatus = "refused"
	// DeliveryFailed: verified, but its handler failed; nothing it did was
	// stored, and the sender is told to retry.
	DeliveryFailed DeliveryStatus = "failed"
	// DeliveryHeld: kept, with its request, because keep could not take it
	// for a reason of its own (HeldFor): the webhook is not deployed yet,
	// the secret to verify it is not set, its handler's input source is not
	// granted. It is taken once that reason is gone, or by a person (issue
	// 40 #1); the sender was answered 202.
	DeliveryHeld DeliveryStatus = "held"
)

// The reasons a delivery is held (Delivery.HeldFor is one, then ":" and
// what it waits for: the webhook's name, the secret's, the grant then "@"
// and the version its handler was refused it under).
const (
	HeldForDeploy = "deploy" // the active version declares no such webhook
	HeldForSecret = "secret" // keep lacks the secret that verifies it
	HeldForGrant  = "grant"  // its handler was refused a grant
)

// Delivery is the record of one request to a webhook (POST
// /hooks/{wf}/{name}). An accepted one's DeliveryID is never accepted again.
type Delivery struct {
	ID         int64
	Workflow   string
	Webhook    string
	DeliveryID string // from the webhook's dedupe (a header, a JSON path) or the body's hash
	Status     DeliveryStatus
	Reason     string // why it was refused or failed, what was done for an accepted one
	// HeldFor, of a held delivery, is what it waits for (HeldForDeploy,
	// HeldForSecret, HeldForGrant, then ":" and the name; a grant's then
	// "@" and the version).
	HeldFor string
	// Request, of a held delivery, is the request as received (engine's
	// Hook as JSON): taken later, it is delivered as it came.
	Request    json.RawMessage
	Inputs     int // inputs registered (accepted)
	Events     int // events published (accepted)
	ReceivedAt int64
}

// DeliveryCount is how many deliveries of one webhook ended in one status.
type DeliveryCount struct {
	Webhook string
	Status  DeliveryStatus
	Count   int
}
