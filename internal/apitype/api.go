package apitype

import (
	"encoding/json"
	"fmt"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// DeployRequest is the body of POST /api/v1/workflows.
type DeployRequest struct {
	Script    string `json:"script"`
	File      string `json:"file"`
	Name      string `json:"name"`
	Kind      string `json:"kind"` // "", "minor", "major"
	Reprocess string `json:"reprocess"`
	// AcceptOrphans activates a major version whose item ids change format.
	AcceptOrphans bool `json:"acceptOrphans"`
	// FilesRoot is the folder the workflow's files connector reads and
	// writes (absolute); empty keeps what was recorded.
	FilesRoot string `json:"filesRoot,omitempty"`
	// Grant grants what the version uses (the person deploying allows it).
	Grant bool `json:"grant,omitempty"`
	// Test is the workflow's test file (keep test), recorded with the
	// version: a Maintainer repair must pass it before it is activated.
	Test string `json:"test,omitempty"`
}

// ErrorReply is every error's answer: {"error":{"code","message"}}, with
// the problems of an invalid script.
type ErrorReply struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is the error object. Code is one of bad_request, unauthorized,
// not_found, not_applicable, invalid_script, internal.
type ErrorBody struct {
	Code     string       `json:"code"`
	Message  string       `json:"message"`
	Problems []kt.Problem `json:"problems,omitempty"`
}

// GrantRequest is the body of POST /api/v1/workflows/{wf}/grant (optional)
// and …/revoke: grants as keep writes them ("http.request POST
// api.example.com", "sql.exec reports", "gmail.send", "source:gmail").
type GrantRequest struct {
	Items []string `json:"items"`
}

// HeldRequest is the body of POST /api/v1/workflows/{wf}/webhooks/take-held
// and …/drop-held: the records of the held deliveries (keep webhooks
// lists them); absent or null for all the workflow holds.
type HeldRequest struct {
	Deliveries []int64 `json:"deliveries"`
}

// DeployReply answers POST /api/v1/workflows.
type DeployReply struct {
	Workflow    string   `json:"workflow"`
	Version     string   `json:"version"`
	Unchanged   bool     `json:"unchanged"`
	Warnings    []string `json:"warnings"`
	Reprocessed int      `json:"reprocessed"`
	FilesRoot   string   `json:"filesRoot"`
	// Granted is what the deploy granted; Ungranted what the version uses
	// that waits for a person's grant (keep grant WF).
	Granted   []string `json:"granted"`
	Ungranted []string `json:"ungranted"`
	// Unused are grants the new version reaches no more: kept, shown
	// with how to revoke them (POST …/revoke).
	Unused []string `json:"unused"`
	// Stranded are the topics whose waiting events the new version leaves
	// without the consumer that read them or without the event API that
	// fed them: how many wait, and what a person can do.
	Stranded []StrandedTopic `json:"stranded"`
}

// StrandedTopic is one topic of DeployReply.Stranded (keeptype.Stranded).
type StrandedTopic struct {
	Topic   string `json:"topic"`
	Pending int    `json:"pending"`
	Message string `json:"message"`
}

// HealthReply answers GET /api/v1/health: Problem says why keep serve
// cannot go on by itself (a full disk, a store that fails), "" when it can.
type HealthReply struct {
	OK      bool   `json:"ok"`
	Problem string `json:"problem"`
}

// PublishRequest is the body of POST /api/v1/workflows/{wf}/topics/{topic}/events:
// one event for a topic the workflow declares { from: "api" }.
type PublishRequest struct {
	ID      EventID         `json:"id"`      // the event's id in the sender's system; the same id again is the same event
	Title   string          `json:"title"`   // what the input is, in a line
	Payload json.RawMessage `json:"payload"` // any JSON value (at most 1 MiB); absent: null
}

// EventID is an event's id as the sender gave it: a string, or a JSON
// number kept as it was written (1795879280201, never 1.795879280201e+12:
// issue 42), so the same number again is the same event.
type EventID string

// UnmarshalJSON takes a string or a number.
func (id *EventID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*id = EventID(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("id must be a string or a number, not %s", b)
	}
	*id = EventID(n.String())
	return nil
}

// PublishReply answers an event posted: its input and event, and whether
// the id was posted before (already: nothing new was written).
type PublishReply struct {
	OK       bool   `json:"ok"`
	Workflow string `json:"workflow"`
	Topic    string `json:"topic"`
	Input    string `json:"input"`
	Event    int64  `json:"event"`
	Already  bool   `json:"already"`
	Message  string `json:"message"`
}

// WorkflowActionReply answers pause, resume and run-now.
type WorkflowActionReply struct {
	OK       bool   `json:"ok"`
	Workflow string `json:"workflow"`
	Queued   int    `json:"queued"`
	Message  string `json:"message"`
}

// RunActionReply answers resolve and approve.
// PruneReply is what POST /api/v1/prune did (or, with ?dryRun=1, would
// do): rows whose bodies were dropped per kind, bytes, the file's size.
type PruneReply = kt.PruneReport

// RunActionReply is what a run action did.
type RunActionReply struct {
	OK       bool   `json:"ok"`
	RunID    string `json:"runId"`
	Workflow string `json:"workflow"`
	Action   string `json:"action"`
	Message  string `json:"message"`
}

// ItemActionReply answers skip and reprocess of an item.
type ItemActionReply struct {
	OK       bool   `json:"ok"`
	Item     string `json:"item"`
	Workflow string `json:"workflow"`
	Action   string `json:"action"`
	Message  string `json:"message"`
}

// ActionReply is what every action's reply has: what will happen.
type ActionReply struct {
	Message string `json:"message"`
}

// GrantsReply answers GET /api/v1/workflows/{wf}/grants: what people
// granted the workflow (each as it is revoked), and what POST …/grant
// without items would allow now.
type GrantsReply struct {
	Workflow string   `json:"workflow"`
	Grants   []string `json:"grants"`
	ToGrant  []string `json:"toGrant"`
}

// WebhooksReply answers GET /api/v1/workflows/{wf}/webhooks: the
// workflow's webhooks and their newest deliveries, newest first. Served
// is whether this keep serves webhooks (keep serve --webhooks-addr); each
// webhook's url is empty when it does not.
type WebhooksReply struct {
	Workflow   string     `json:"workflow"`
	Served     bool       `json:"served"`
	Webhooks   []Webhook  `json:"webhooks"`
	Deliveries []Delivery `json:"deliveries"`
	// Held are the deliveries keep holds for a reason of its own, oldest
	// first (issue 40): each is taken once its reason is gone, or by a
	// person (POST …/webhooks/take-held, …/drop-held).
	Held []Delivery `json:"held"`
}

// TopicsReply answers GET /api/v1/workflows/{wf}/topics.
type TopicsReply struct {
	Topics    []Topic    `json:"topics"`
	Producers []Producer `json:"producers"`
	// SkipPending is what skipping a topic's pending events risks
	// (keeptype.ChoiceIn, issue 42 #4): the topics page says it on the
	// control's line.
	SkipPending kt.Choice `json:"skipPending"`
}

// ResolveRequest is the body of POST /api/v1/runs/{id}/resolve.
type ResolveRequest struct {
	Action string `json:"action"` // try-again, didnt-happen, skip
}

// InstancePath answers which keep serve this is, without a token: the CLI
// asks it before it sends a token or a decision to an address it read from
// a file that may be stale.
const InstancePath = "/api/v1/instance"
