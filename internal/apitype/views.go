package apitype

import (
	"encoding/json"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// Input is one row of `keep inputs`.
type Input struct {
	ID         string        `json:"id"`
	Key        string        `json:"key"`
	Source     string        `json:"source"`
	Type       string        `json:"type"`
	ExternalID string        `json:"externalId"`
	Title      string        `json:"title"`
	Status     kt.ItemStatus `json:"status"`
	Attempt    int           `json:"attempt"`
	CreatedAt  string        `json:"createdAt"`
	UpdatedAt  string        `json:"updatedAt"`
}

// Output is one mutation, as `keep outputs` shows it.
type Output struct {
	MutationID string          `json:"mutationId"`
	RunID      string          `json:"runId"`
	Tool       string          `json:"tool"`
	Method     string          `json:"method"`
	Target     string          `json:"target"`
	Status     string          `json:"status"`
	InputIDs   []string        `json:"inputIds"`
	Result     json.RawMessage `json:"result"`
	Error      *ErrorInfo      `json:"error"`
	ResolvedBy string          `json:"resolvedBy"`
	CreatedAt  string          `json:"createdAt"`
	UpdatedAt  string          `json:"updatedAt"`
}

// ErrorInfo is an error class and message.
type ErrorInfo struct {
	Class   string `json:"class"`
	Message string `json:"message"`
}

// Run is one row of `keep runs`.
type Run struct {
	ID          string `json:"id"`
	Workflow    string `json:"workflow"`
	Handler     string `json:"handler"`
	HandlerType string `json:"handlerType"`
	Phase       string `json:"phase"`
	Status      string `json:"status"`
	RetryOf     string `json:"retryOf"`
	// Title is what the run is about: the ui.title its prepare returned.
	Title string `json:"title,omitempty"`
	// RetryCount is how many automatic retries came before this run;
	// NextAttemptAt is when keep tries it again by itself (a transient failure).
	RetryCount    int        `json:"retryCount"`
	NextAttemptAt string     `json:"nextAttemptAt,omitempty"`
	Version       int64      `json:"version"`
	Error         *ErrorInfo `json:"error"`
	CreatedAt     string     `json:"createdAt"`
	UpdatedAt     string     `json:"updatedAt"`
	FinishedAt    string     `json:"finishedAt,omitempty"`
	// QuietPolls, on a producer's run, counts the polls that found nothing
	// new this one row stands for (issue 44), the first of them started at
	// QuietSince; CreatedAt, FinishedAt and the trace are the last one's.
	QuietPolls int64  `json:"quietPolls,omitempty"`
	QuietSince string `json:"quietSince,omitempty"`
}

// Status is one row of `keep status`.
type Status struct {
	Name          string `json:"name"`
	Version       string `json:"version"`
	Status        string `json:"status"` // running, idle, blocked, paused, error, damaged (kt.StatusWordDamaged)
	Blocked       bool   `json:"blocked"`
	BlockedRunID  string `json:"blockedRunId"`
	PendingEvents int    `json:"pendingEvents"`
	Reason        string `json:"reason,omitempty"`
	// Card is the blocked run's card: what, why, and what a person can do.
	Card *Card `json:"card,omitempty"`
	// FilesRoot is the folder its files connector reads and writes,
	// recorded at deploy ("" for keep serve's own).
	FilesRoot string `json:"filesRoot,omitempty"`
	// Ungranted is what the active version uses that no person granted
	// yet (keep grant): a run calling it waits.
	Ungranted []string `json:"ungranted,omitempty"`
	// Grants are what people granted the workflow, each as it is revoked
	// (keep grant WF --revoke 'ITEM').
	Grants []string `json:"grants,omitempty"`
	// QuietPolls says, for each producer whose last polls found nothing
	// new, "producer NAME: last polled at …, N polls found nothing new
	// since …" (issue 44).
	QuietPolls []string `json:"quietPolls,omitempty"`
}

// Card explains one blocked run to a person: what, why, and what they can do.
type Card struct {
	RunID    string          `json:"runId"`
	Workflow string          `json:"workflow"`
	Handler  string          `json:"handler"`
	Title    string          `json:"title,omitempty"` // the run's ui.title
	Status   string          `json:"status"`
	Phase    string          `json:"phase"`
	Reason   string          `json:"reason"`
	Mutation *kt.PendingCall `json:"mutation,omitempty"`
	// MutationStatus is the ledger state of the blocked mutation, if any.
	MutationStatus string   `json:"mutationStatus,omitempty"`
	CanReconcile   bool     `json:"canReconcile"`
	Inputs         []Input  `json:"inputs"`
	Actions        []string `json:"actions"`
	// Choices are Actions with what each risks, in the same order: safest
	// first (keeptype.Choices).
	Choices []kt.Choice `json:"choices"`
	// Approval is true when the run waits for a person to approve Mutation.
	Approval bool `json:"approval"`
	// Reconnect names the provider whose account a person must connect
	// again (keep connect google) before Try again can work, or "".
	Reconnect string `json:"reconnect,omitempty"`
	// Repairs are the Maintainer's attempts at this run, oldest first.
	Repairs []Repair `json:"repairs,omitempty"`
	// Grant is true when the run waits for a person to grant the workflow
	// what it called (keep grant WF; the run then tries again by itself).
	Grant bool `json:"grant,omitempty"`
	// GrantItem is the grant the run was refused ("http.request POST
	// api.example.com"): the card's Grant grants exactly that. "" for a
	// run refused before grants named targets (Grant grants what the
	// version uses).
	GrantItem string `json:"grantItem,omitempty"`
	// AppliedWrite is the run's write when it already happened (the block
	// is elsewhere, e.g. next threw): shown as done, never as what is blocked.
	AppliedWrite *kt.PendingCall `json:"appliedWrite,omitempty"`
	// Notes say what a person should know before choosing: that proof of
	// a write wins over "it didn't happen", how to fix a script's bug.
	Notes []string `json:"notes,omitempty"`
}

// RunDetail is `keep show run`: the run, its trace, its mutation and, when
// it is blocked, its card.
type RunDetail struct {
	Run            Run             `json:"run"`
	PrepareResult  json.RawMessage `json:"prepareResult"`
	MutationResult json.RawMessage `json:"mutationResult"`
	Mutation       *Output         `json:"mutation"`
	Trace          []TraceLine     `json:"trace"`
	Dropped        int             `json:"droppedTraceEntries"`
	Blocked        bool            `json:"blocked"`
	Card           *Card           `json:"card,omitempty"`
	// Decisions are the people's decisions on this run, oldest first.
	Decisions []Decision `json:"decisions"`
}

// Decision is one entry of the decision log as people see it.
type Decision struct {
	At         string `json:"at"`
	By         string `json:"by"`
	Action     string `json:"action"`
	RunID      string `json:"runId,omitempty"`
	MutationID string `json:"mutationId,omitempty"`
	ItemID     string `json:"itemId,omitempty"`
	Detail     string `json:"detail"`
}

// TraceLine is one trace entry as stored by the engine.
type TraceLine = kt.TraceEntry

// InputDetail is an input and the writes it caused (`keep show input`).
type InputDetail struct {
	Input   Input    `json:"input"`
	Outputs []Output `json:"outputs"`
}

// Scheduled is when a producer or task runs next by its schedule.
type Scheduled struct {
	Handler   string `json:"handler"`
	Type      string `json:"type"`
	NextRunAt string `json:"nextRunAt"`
}

// Connection is a connected account as people see it: never its credentials.
type Connection struct {
	Provider  string   `json:"provider"`
	Account   string   `json:"account"`
	Scopes    []string `json:"scopes"`
	State     string   `json:"state"`
	Broken    string   `json:"broken,omitempty"`
	Connected string   `json:"connected"`
	Updated   string   `json:"updated"`
}

// Secret is a named secret as people see it: its name, the hosts a call
// may send it to (none: it goes nowhere), and when it was set, never its
// value.
type Secret struct {
	Name      string   `json:"name"`
	Hosts     []string `json:"hosts"`
	SetAt     string   `json:"setAt"`
	CreatedAt string   `json:"createdAt"`
}

// Repair is one of the Maintainer's attempts as people see it.
type Repair struct {
	ID          string `json:"id"`
	RunID       string `json:"runId"`
	Attempt     int    `json:"attempt"`
	Status      string `json:"status"`
	Reason      string `json:"reason"`
	Explanation string `json:"explanation,omitempty"`
	Script      string `json:"script,omitempty"`
	Tokens      int    `json:"tokens"`
	DecidedBy   string `json:"decidedBy,omitempty"`
	At          string `json:"at"`
	// Diff is the proposed script against the version it repairs.
	Diff string `json:"diff,omitempty"`
	// BlastRadius, for a held repair, is the work the version with the
	// bug has done: the writes its runs applied and the inputs and items
	// they were for.
	BlastRadius *Blast `json:"blastRadius,omitempty"`
}

// Blast is what a version with a bug did before it was repaired.
type Blast struct {
	Version string   `json:"version"`
	Writes  int      `json:"writes"`
	Inputs  []string `json:"inputs"` // titles, at most 20
	More    int      `json:"more"`   // inputs beyond those listed
}

// Item is one row of `keep items` (inputs and task items share the ledger).
type Item struct {
	ID         string        `json:"id"`
	Workflow   string        `json:"workflow"`
	Key        string        `json:"key"`
	Title      string        `json:"title"`
	Kind       kt.ItemKind   `json:"kind"`
	Status     kt.ItemStatus `json:"status"`
	Attempt    int           `json:"attempt"`
	Source     string        `json:"source"`
	Type       string        `json:"type"`
	ExternalID string        `json:"externalId"`
	Orphaned   bool          `json:"orphaned"`
	CreatedAt  string        `json:"createdAt"`
	UpdatedAt  string        `json:"updatedAt"`
}

// Attempt is one pass over an item, with its mutations (ch 12 §12.5).
type Attempt struct {
	Attempt   int           `json:"attempt"`
	Status    kt.ItemStatus `json:"status"`
	Version   string        `json:"version"`
	Current   bool          `json:"current"`
	StartedAt string        `json:"startedAt"`
	Mutations []Output      `json:"mutations"`
}

// ItemDetail is `keep show item`.
type ItemDetail struct {
	Item     Item      `json:"item"`
	Attempts []Attempt `json:"attempts"`
	// Choices are Reprocess and Skip with what each risks, safest first
	// (keeptype.ItemChoices, issue 42 #4): uncertain when a write of the
	// current attempt has an unknown outcome.
	Choices []kt.Choice `json:"choices"`
}

// Topic is one topic of a workflow with its events counted by state, and
// who writes and reads it.
type Topic struct {
	Name     string   `json:"name"`
	Writers  []string `json:"writers"`
	Consumer string   `json:"consumer,omitempty"`
	Pending  int      `json:"pending"`
	Reserved int      `json:"reserved"`
	Consumed int      `json:"consumed"`
	Skipped  int      `json:"skipped"`
}

// Producer is a producer or task of a workflow and the size of its state.
type Producer struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	StateBytes int    `json:"stateBytes"`
	NextRunAt  string `json:"nextRunAt,omitempty"`
	// LastPolledAt and QuietPolls, on a producer whose last polls found
	// nothing new (issue 44): when the last of them ended, and how many
	// there were since QuietSince (its run: QuietRun).
	LastPolledAt string `json:"lastPolledAt,omitempty"`
	QuietPolls   int64  `json:"quietPolls,omitempty"`
	QuietSince   string `json:"quietSince,omitempty"`
	QuietRun     string `json:"quietRun,omitempty"`
}

// Event is one event as people see it: its state (pending, reserved,
// consumed, skipped), its payload, and the inputs that caused it.
type Event struct {
	ID         int64           `json:"id"`
	Topic      string          `json:"topic"`
	MessageID  string          `json:"messageId"`
	Status     string          `json:"status"`
	ReservedBy string          `json:"reservedBy,omitempty"`
	Attempt    int             `json:"attempt"`
	Payload    json.RawMessage `json:"payload"`
	CausedBy   []Cause         `json:"causedBy"`
	CreatedAt  string          `json:"createdAt"`
	UpdatedAt  string          `json:"updatedAt"`
}

// Cause is an input an event descends from.
type Cause struct {
	ID    string `json:"id"`
	Key   string `json:"key,omitempty"`
	Title string `json:"title,omitempty"`
}

// EventPage is one page of a workflow's events; Next, when not 0, is the
// `after` of the next page.
type EventPage struct {
	Events []Event `json:"events"`
	Next   int64   `json:"next,omitempty"`
}

// EventStates are the states an event list filters by.
var EventStates = []string{"pending", "reserved", "consumed", "skipped"}

// EventQuery asks for one page of a workflow's events: the API's topic,
// status, after and limit parameters (GET /workflows/{wf}/events), the
// same on the client's side and the server's.
type EventQuery struct {
	Topic  string // "" for every topic
	Status string // one of EventStates; "" for all
	After  int64  // the page's events come after this id (Next of the previous page)
	Limit  int    // 1 to 1000; 0 for the default, 100
}

// NodeView is a keep serve node sharing the store, and the workflows whose
// lease it holds now.
type NodeView struct {
	ID        string `json:"id"`
	Addr      string `json:"addr,omitempty"`
	StartedAt string `json:"startedAt"`
	SeenAt    string `json:"seenAt"`
	Alive     bool   `json:"alive"`
	// StoppedAt is when the node stopped cleanly; "" while it runs, or
	// when it went without saying so (then Alive turns false three
	// heartbeats after SeenAt).
	StoppedAt string   `json:"stoppedAt,omitempty"`
	Holds     []string `json:"holds"`
}

// Webhook is one webhook of a workflow as people see it: where it is
// served, how it is verified (the secret's name, never its value), where
// its delivery id comes from, what it publishes, and its deliveries counted.
type Webhook struct {
	Name string `json:"name"`
	// Path is POST's path (/hooks/WF/NAME); URL adds the address of keep
	// serve --webhooks-addr, "" when none serves webhooks.
	Path      string         `json:"path"`
	URL       string         `json:"url"`
	Verify    string         `json:"verify"` // hmac, stripe, slack, token
	Header    string         `json:"header,omitempty"`
	Secret    string         `json:"secret"`
	Dedupe    string         `json:"dedupe"` // "header X-GitHub-Delivery", "json id", "body hash"
	Publishes []string       `json:"publishes"`
	Counts    map[string]int `json:"counts"` // by status: accepted, duplicate, refused, failed
}

// Delivery is one request a webhook received.
type Delivery struct {
	// Record is the delivery's record: a held one is taken or dropped by
	// it (keep webhooks WF --take --delivery RECORD).
	Record     int64  `json:"record"`
	Webhook    string `json:"webhook"`
	DeliveryID string `json:"delivery"`
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	Inputs     int    `json:"inputs"`
	Events     int    `json:"events"`
	ReceivedAt string `json:"receivedAt"`
	// HeldFor, of a held delivery, is what it waits for: "deploy:NAME",
	// "secret:NAME", "grant:ITEM@VERSION" (the grant, or a version other
	// than the one its handler was refused it under), "handler:VERSION"
	// (its handler failed: a new version), "person:WHO" (a person asked
	// to take it).
	HeldFor string `json:"heldFor,omitempty"`
}

// MaxPage is the largest ?limit= of a paged list (issue 44).
const MaxPage = 1000

// TotalHeader names the header of a paged list's answer that says how
// many rows the whole list has (absent when a search narrows it).
const TotalHeader = "X-Total-Count"
