// Package report builds what people see from the ledgers: inputs with their
// derived status, outputs (one per mutation), runs, workflow status and the
// blocked-work card. The CLI's --json, the HTTP API and the page share these
// shapes, so their field names are a public contract.
//
// It may import keeptype, store and engine.
package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
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
}

// Status is one row of `keep status`.
type Status struct {
	Name          string `json:"name"`
	Version       string `json:"version"`
	Status        string `json:"status"` // running, idle, blocked, paused, error
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
}

// Card explains one blocked run to a person: what, why, and what they can do.
type Card struct {
	RunID    string              `json:"runId"`
	Workflow string              `json:"workflow"`
	Handler  string              `json:"handler"`
	Title    string              `json:"title,omitempty"` // the run's ui.title
	Status   string              `json:"status"`
	Phase    string              `json:"phase"`
	Reason   string              `json:"reason"`
	Mutation *engine.PendingCall `json:"mutation,omitempty"`
	// MutationStatus is the ledger state of the blocked mutation, if any.
	MutationStatus string   `json:"mutationStatus,omitempty"`
	CanReconcile   bool     `json:"canReconcile"`
	Inputs         []Input  `json:"inputs"`
	Actions        []string `json:"actions"`
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
	AppliedWrite *engine.PendingCall `json:"appliedWrite,omitempty"`
	// Notes say what a person should know before choosing: that proof of
	// a write wins over "it didn't happen", how to fix a script's bug.
	Notes []string `json:"notes,omitempty"`
}

// Time renders a millisecond timestamp for people and JSON.
func Time(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

func errInfo(class kt.ErrorClass, msg string) *ErrorInfo {
	if class == "" && msg == "" {
		return nil
	}
	return &ErrorInfo{Class: string(class), Message: msg}
}

// Inputs lists a workflow's inputs with the status of SPEC §8.1.
func Inputs(ctx context.Context, st store.Store, wf string) ([]Input, error) {
	var out []Input
	err := st.View(ctx, func(tx store.Tx) error {
		if _, err := tx.WorkflowGet(wf); err != nil {
			return noWorkflow(wf, err)
		}
		ins, err := tx.InputList(wf)
		if err != nil {
			return err
		}
		for _, in := range ins {
			status, err := InputStatus(tx, in)
			if err != nil {
				return err
			}
			out = append(out, inputRow(in, status))
		}
		return nil
	})
	return out, err
}

func inputRow(in kt.Input, status kt.ItemStatus) Input {
	return Input{ID: in.ID, Key: in.Key, Source: in.Source, Type: in.Type, ExternalID: in.ExternalID, Title: in.Title, Status: status,
		Attempt: in.CurrentAttempt, CreatedAt: Time(in.CreatedAt), UpdatedAt: Time(in.UpdatedAt)}
}

func noWorkflow(wf string, err error) error {
	if errors.Is(err, kt.ErrNotFound) {
		return engine.Missing("there is no workflow %q (see `keep status`)", wf)
	}
	return err
}

// ItemChecking is the status of an input whose run is blocked only while
// keep itself works on it — checking whether a write happened, or waiting
// for an automatic retry — so that needs_attention means a person must act.
const ItemChecking kt.ItemStatus = "checking"

// keepIsOnIt reports whether a blocked run will move on without a person.
func keepIsOnIt(tx store.Tx, r kt.Run) bool {
	m, err := tx.MutationByRun(r.ID)
	return engine.WhoActs(r, m, err == nil) == engine.Keep
}

// InputStatus derives an input's status from its events and the runs that hold them.
func InputStatus(tx store.Tx, in kt.Input) (kt.ItemStatus, error) {
	if in.Kind == kt.KindTask && in.Status != "" {
		return in.Status, nil
	}
	evs, err := tx.EventsByInput(in.ID)
	if err != nil {
		return "", err
	}
	pending, skipped, total := false, 0, 0
	var worst kt.ItemStatus
	for _, ev := range evs {
		total++
		switch ev.Status {
		case kt.EventSkipped:
			skipped++
		case kt.EventPending:
			if ev.ReservedBy == "" {
				// An event no consumer of the active version reads ends its
				// chain (ch 06a's example publishes row.created for nobody):
				// it does not keep its input pending. A later version that
				// reads the topic makes it pending again, as it then is.
				read, err := consumedTopics(tx, in.Workflow)
				if err != nil {
					return "", err
				}
				if read[ev.Topic] {
					pending = true
				}
				continue
			}
			pending = true
			r, err := tx.RunGet(ev.ReservedBy)
			if err != nil {
				continue
			}
			switch {
			case engine.PayloadConflict(r):
				// Its write was applied before with other content: a
				// person decides (ch 12 §12.7), as for an unknown outcome.
				if worst != kt.ItemFailed {
					worst = kt.ItemNeedsAttention
				}
			case r.Status == kt.StatusFailedLogic || r.Status == kt.StatusFailedInternal:
				worst = kt.ItemFailed
			case worst != "" && worst != ItemChecking:
			case keepIsOnIt(tx, r):
				worst = ItemChecking
			case r.Status != kt.StatusActive && !r.Status.Finished():
				worst = kt.ItemNeedsAttention
			}
		}
	}
	switch {
	case worst != "":
		return worst, nil
	case pending:
		return kt.ItemPending, nil
	case total > 0 && skipped == total:
		return kt.ItemSkipped, nil
	}
	return kt.ItemDone, nil
}

// Outputs lists a workflow's mutations.
func Outputs(ctx context.Context, st store.Store, wf string) ([]Output, error) {
	var out []Output
	err := st.View(ctx, func(tx store.Tx) error {
		if _, err := tx.WorkflowGet(wf); err != nil {
			return noWorkflow(wf, err)
		}
		ms, err := tx.MutationList(wf)
		if err != nil {
			return err
		}
		for _, m := range ms {
			out = append(out, OutputRow(m))
		}
		return nil
	})
	return out, err
}

// OutputRow renders one ledger row.
func OutputRow(m kt.Mutation) Output {
	ids := m.ItemKeys
	if ids == nil {
		ids = []string{}
	}
	return Output{MutationID: m.ID, RunID: m.RunID, Tool: m.Tool, Method: m.Method, Target: m.Target, Status: string(m.Status), InputIDs: ids,
		Result: m.Result, Error: errInfo(m.ErrorClass, m.ErrorMessage), ResolvedBy: m.ResolvedBy, CreatedAt: Time(m.CreatedAt), UpdatedAt: Time(m.UpdatedAt)}
}

// Runs lists a workflow's runs, newest first.
func Runs(ctx context.Context, st store.Store, wf string, limit int) ([]Run, error) {
	var out []Run
	err := st.View(ctx, func(tx store.Tx) error {
		if _, err := tx.WorkflowGet(wf); err != nil {
			return noWorkflow(wf, err)
		}
		rs, err := tx.RunList(wf, limit)
		if err != nil {
			return err
		}
		for _, r := range rs {
			out = append(out, RunRow(r))
		}
		return nil
	})
	return out, err
}

// RunRow renders one run.
func RunRow(r kt.Run) Run {
	return Run{ID: r.ID, Workflow: r.Workflow, Handler: r.Handler, HandlerType: string(r.HandlerType), Phase: string(r.Phase), Status: string(r.Status),
		RetryOf: r.RetryOf, Title: RunTitle(r), RetryCount: r.RetryCount, NextAttemptAt: Time(r.NextAttemptAt), Version: r.Version,
		Error: errInfo(r.ErrorClass, r.ErrorMessage), CreatedAt: Time(r.CreatedAt), UpdatedAt: Time(r.UpdatedAt), FinishedAt: Time(r.FinishedAt)}
}

// RunTitle is what a consumer run is about for people: the ui.title its
// prepare returned ("" when it gave none).
func RunTitle(r kt.Run) string {
	if len(r.PrepareResult) == 0 {
		return ""
	}
	var pr struct {
		UI struct {
			Title string `json:"title"`
		} `json:"ui"`
	}
	if json.Unmarshal(r.PrepareResult, &pr) != nil {
		return ""
	}
	return pr.UI.Title
}

// Statuses lists every workflow (or one) with its status.
func Statuses(ctx context.Context, st store.Store, only string) ([]Status, error) {
	var out []Status
	err := st.View(ctx, func(tx store.Tx) error {
		wfs, err := tx.WorkflowList()
		if err != nil {
			return err
		}
		found := false
		for _, w := range wfs {
			if only != "" && w.Name != only {
				continue
			}
			found = true
			s, err := status(tx, w)
			if err != nil {
				return err
			}
			out = append(out, s)
		}
		if only != "" && !found {
			return noWorkflow(only, kt.ErrNotFound)
		}
		return nil
	})
	return out, err
}

func status(tx store.Tx, w kt.Workflow) (Status, error) {
	v, err := tx.VersionGet(w.Name, w.ActiveVersion)
	if err != nil {
		return Status{}, err
	}
	pending, err := tx.CountPending(w.Name)
	if err != nil {
		return Status{}, err
	}
	s := Status{Name: w.Name, Version: v.Label(), Status: "idle", PendingEvents: pending, FilesRoot: w.FilesRoot}
	if s.Ungranted, err = engine.Ungranted(tx, w.Name); err != nil {
		return s, err
	}
	gs, err := tx.GrantList(w.Name)
	if err != nil {
		return s, err
	}
	for _, g := range gs {
		s.Grants = append(s.Grants, g.Item)
	}
	r, err := tx.RunOpen(w.Name)
	switch {
	case err == nil:
		if r.Status == kt.StatusActive || (r.Status == kt.StatusTransient && r.NextAttemptAt > 0) || r.Action != "" || r.Status == kt.StatusCrashed {
			s.Status = "running"
			if r.Status == kt.StatusTransient && r.Action == "" {
				s.Reason = fmt.Sprintf("retry %d at %s: %s", r.RetryCount+1, Time(r.NextAttemptAt), r.ErrorMessage)
			}
		} else {
			s.Blocked, s.BlockedRunID, s.Reason = true, r.ID, r.ErrorMessage
			s.Status = "blocked"
			if c, blocked, err := card(tx, r); err != nil {
				return s, err
			} else if blocked {
				s.Card = &c
			}
			if r.Status == kt.StatusFailedLogic || r.Status == kt.StatusFailedInternal {
				s.Status = "error"
			}
			if r.Status == kt.StatusReconciliation {
				if m, err := tx.MutationByRun(r.ID); err == nil && m.Status == kt.MutationNeedsReconcile {
					s.Status, s.Blocked = "running", false
				}
			}
		}
	case !errors.Is(err, kt.ErrNotFound):
		return s, err
	}
	if w.Paused {
		s.Status, s.Reason = "paused", w.PausedReason
	}
	return s, nil
}

// Blocked returns the cards of every blocked run of a workflow ("" = all).
func Blocked(ctx context.Context, st store.Store, wf string) ([]Card, error) {
	var out []Card
	err := st.View(ctx, func(tx store.Tx) error {
		wfs, err := tx.WorkflowList()
		if err != nil {
			return err
		}
		for _, w := range wfs {
			if wf != "" && w.Name != wf {
				continue
			}
			r, err := tx.RunOpen(w.Name)
			if errors.Is(err, kt.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			c, blocked, err := card(tx, r)
			if err != nil {
				return err
			}
			if blocked {
				out = append(out, c)
			}
		}
		return nil
	})
	return out, err
}

// CardFor returns the card of one run (blocked or not).
func CardFor(tx store.Tx, r kt.Run) (Card, bool, error) { return card(tx, r) }

func card(tx store.Tx, r kt.Run) (Card, bool, error) {
	c := Card{RunID: r.ID, Workflow: r.Workflow, Handler: r.Handler, Title: RunTitle(r), Status: string(r.Status), Phase: string(r.Phase), Reason: r.ErrorMessage, Inputs: []Input{}}
	if len(r.PendingCall) > 0 {
		var pc engine.PendingCall
		if json.Unmarshal(r.PendingCall, &pc) == nil {
			c.Mutation = &pc
		}
	}
	m, err := tx.MutationByRun(r.ID)
	hasMut := err == nil
	if err != nil && !errors.Is(err, kt.ErrNotFound) {
		return c, false, err
	}
	if hasMut {
		c.MutationStatus, c.CanReconcile = string(m.Status), m.CanReconcile
	}
	blocked := engine.WhoActs(r, m, hasMut) == engine.APerson
	evs, err := tx.EventsReservedBy(r.ID)
	if err != nil {
		return c, false, err
	}
	seen := map[string]bool{}
	var ids []string
	for _, ev := range evs {
		for _, id := range ev.CausedBy {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		in, err := tx.InputGet(id)
		if err != nil {
			continue
		}
		s, _ := InputStatus(tx, in)
		c.Inputs = append(c.Inputs, inputRow(in, s))
	}
	c.Actions = engine.ActionsFor(r, m, hasMut, len(evs))
	c.Approval = engine.IsApprovalWait(r)
	if r.Status == kt.StatusApproval {
		c.Reconnect = kt.ReconnectOf(r.ErrorMessage)
		c.Grant = kt.NeedsGrant(r.ErrorMessage)
		c.GrantItem = kt.NeededGrant(r.ErrorMessage)
	}
	if r.Status == kt.StatusFailedLogic {
		rs, err := tx.RepairList(r.Workflow)
		if err != nil {
			return c, false, err
		}
		for _, x := range rs {
			if x.RunID == r.ID {
				row, err := repairView(tx, x)
				if err != nil {
					return c, false, err
				}
				c.Repairs = append(c.Repairs, row)
			}
		}
	}
	if hasMut && m.Status == kt.MutationApplied && c.Mutation != nil {
		c.AppliedWrite, c.Mutation = c.Mutation, nil
	}
	if c.Notes, err = cardNotes(tx, r, c.Actions); err != nil {
		return c, false, err
	}
	return c, blocked, nil
}

// cardNotes says what a person should know about a card's actions (issue
// 24 #1, #10): proof of a write wins over "it didn't happen"; a script's bug
// is fixed by deploying a minor version, which retries the run by itself.
func cardNotes(tx store.Tx, r kt.Run, actions []string) ([]string, error) {
	var notes []string
	if slices.Contains(actions, string(engine.ResolveDidntHappen)) {
		notes = append(notes, "It didn't happen is carried out after any check keep has under way; if that check finds the write applied, the proof wins and the write is not sent again.")
	}
	if r.Status != kt.StatusFailedLogic {
		return notes, nil
	}
	w, err := tx.WorkflowGet(r.Workflow)
	if err != nil {
		return nil, err
	}
	if w.ActiveVersion > r.Version {
		v, err := tx.VersionGet(r.Workflow, w.ActiveVersion)
		if err != nil {
			return nil, err
		}
		return append(notes, fmt.Sprintf("Version %s was deployed after this run failed: keep retries the run on it by itself (or now: keep resolve %s --try-again).", v.Label(), r.ID)), nil
	}
	v, err := tx.VersionGet(r.Workflow, r.Version)
	if err != nil {
		return nil, err
	}
	return append(notes, fmt.Sprintf("This is a bug in the script: fix %s, then deploy the fix with `keep deploy --minor %s` — keep retries this run on the fixed version by itself (or: keep resolve %s --try-again). Try again alone runs the same script again.", v.File, v.File, r.ID)), nil
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

// DecisionRow renders a decision of the log.
func DecisionRow(d kt.Decision) Decision {
	return Decision{At: Time(d.At), By: d.By, Action: d.Action, RunID: d.RunID, MutationID: d.MutationID, ItemID: d.ItemID, Detail: d.Detail}
}

// TraceLine is one trace entry as stored by the engine.
type TraceLine = engine.TraceEntry

// ShowRun returns one run in full.
func ShowRun(ctx context.Context, st store.Store, id string) (RunDetail, error) {
	var d RunDetail
	err := st.View(ctx, func(tx store.Tx) error {
		r, err := tx.RunGet(id)
		if errors.Is(err, kt.ErrNotFound) {
			return engine.Missing("there is no run %q (see `keep runs WORKFLOW`)", id)
		}
		if err != nil {
			return err
		}
		card, blocked, err := card(tx, r)
		if err != nil {
			return err
		}
		d = RunDetail{Run: RunRow(r), PrepareResult: r.PrepareResult, MutationResult: r.MutationResult, Blocked: blocked, Trace: []TraceLine{}}
		if blocked {
			d.Card = &card
		}
		if m, err := tx.MutationByRun(r.ID); err == nil {
			o := OutputRow(m)
			d.Mutation = &o
		}
		ds, err := tx.DecisionList(r.Workflow, r.ID)
		if err != nil {
			return err
		}
		d.Decisions = []Decision{}
		for _, x := range ds {
			d.Decisions = append(d.Decisions, DecisionRow(x))
		}
		var tr struct {
			Entries []engine.TraceEntry `json:"entries"`
			Dropped int                 `json:"dropped"`
		}
		_ = json.Unmarshal(r.Trace, &tr)
		if tr.Entries != nil {
			d.Trace = tr.Entries
		}
		d.Dropped = tr.Dropped
		return nil
	})
	return d, err
}

// InputDetail is an input and the writes it caused (`keep show input`).
type InputDetail struct {
	Input   Input    `json:"input"`
	Outputs []Output `json:"outputs"`
}

// ShowInput reads an input by its id or its key (source:type:id), in any
// workflow, with its outputs.
func ShowInput(ctx context.Context, st store.Store, ref string) (InputDetail, error) {
	var d InputDetail
	err := st.View(ctx, func(tx store.Tx) error {
		in, err := engine.FindItem(tx, "", ref)
		if err != nil {
			return err
		}
		status, err := InputStatus(tx, in)
		if err != nil {
			return err
		}
		d.Input = inputRow(in, status)
		ms, err := tx.MutationList(in.Workflow)
		if err != nil {
			return err
		}
		d.Outputs = []Output{}
		for _, m := range ms {
			if slices.Contains(m.ItemKeys, in.ID) {
				d.Outputs = append(d.Outputs, OutputRow(m))
			}
		}
		return nil
	})
	return d, err
}

// Scheduled is when a producer or task runs next by its schedule.
type Scheduled struct {
	Handler   string `json:"handler"`
	Type      string `json:"type"`
	NextRunAt string `json:"nextRunAt"`
}

// Schedule lists when a workflow's producers and tasks run next.
func Schedule(ctx context.Context, st store.Store, wf string) ([]Scheduled, error) {
	out := []Scheduled{}
	err := st.View(ctx, func(tx store.Tx) error {
		hs, err := tx.HandlerList(wf)
		if err != nil {
			return err
		}
		for _, h := range hs {
			if (h.Type == kt.HandlerProducer || h.Type == kt.HandlerTask) && h.NextRunAt > 0 {
				out = append(out, Scheduled{Handler: h.Name, Type: string(h.Type), NextRunAt: Time(h.NextRunAt)})
			}
		}
		return nil
	})
	return out, err
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

// Connections lists the connected accounts.
func Connections(ctx context.Context, st store.Store) ([]Connection, error) {
	out := []Connection{}
	err := st.View(ctx, func(tx store.Tx) error {
		cs, err := tx.ConnectionList()
		if err != nil {
			return err
		}
		for _, c := range cs {
			state := "ok"
			if c.Broken != "" {
				state = "reconnect"
			}
			scopes := []string{}
			for _, s := range c.Scopes {
				scopes = append(scopes, strings.TrimPrefix(s, "https://www.googleapis.com/auth/"))
			}
			out = append(out, Connection{Provider: c.Provider, Account: c.Account, Scopes: scopes, State: state, Broken: c.Broken,
				Connected: Time(c.CreatedAt), Updated: Time(c.UpdatedAt)})
		}
		return nil
	})
	return out, err
}

// Secret is a named secret as people see it: its name and when it was
// set, never its value.
type Secret struct {
	Name      string `json:"name"`
	SetAt     string `json:"setAt"`
	CreatedAt string `json:"createdAt"`
}

// Secrets lists the named secrets (keep secret set NAME).
func Secrets(ctx context.Context, st store.Store) ([]Secret, error) {
	out := []Secret{}
	err := st.View(ctx, func(tx store.Tx) error {
		xs, err := tx.SecretList()
		for _, x := range xs {
			out = append(out, Secret{Name: x.Name, SetAt: Time(x.UpdatedAt), CreatedAt: Time(x.CreatedAt)})
		}
		return err
	})
	return out, err
}

// LatestScripts returns the script of every workflow's latest version
// (what keep connect reads to ask for the scopes the workflows need).
func LatestScripts(ctx context.Context, st store.Store) ([]string, error) {
	var out []string
	err := st.View(ctx, func(tx store.Tx) error {
		ws, err := tx.WorkflowList()
		if err != nil {
			return err
		}
		for _, w := range ws {
			vs, err := tx.VersionList(w.Name)
			if err != nil {
				return err
			}
			if len(vs) > 0 {
				out = append(out, vs[len(vs)-1].Script)
			}
		}
		return nil
	})
	return out, err
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

// RepairRow renders a repair.
// Credentials written literally in the script are masked (script.Credentials).
func RepairRow(r kt.Repair) Repair {
	c := script.FindCredentials(r.Script)
	return Repair{ID: r.ID, RunID: r.RunID, Attempt: r.Attempt, Status: string(r.Status), Reason: c.Hide(r.Reason), Explanation: c.Hide(r.Explanation), Script: c.Hide(r.Script),
		Tokens: r.Tokens, DecidedBy: r.DecidedBy, At: Time(r.CreatedAt)}
}

// Repairs lists a workflow's repairs, oldest first, each with its diff,
// and a held one with its blast radius.
func Repairs(ctx context.Context, st store.Store, wf string) ([]Repair, error) {
	out := []Repair{}
	err := st.View(ctx, func(tx store.Tx) error {
		rs, err := tx.RepairList(wf)
		if err != nil {
			return err
		}
		for _, r := range rs {
			row, err := repairView(tx, r)
			if err != nil {
				return err
			}
			out = append(out, row)
		}
		return nil
	})
	return out, err
}

// repairView is a repair with its diff, and a held one with its blast radius.
func repairView(tx store.Tx, r kt.Repair) (Repair, error) {
	row := RepairRow(r)
	if r.Script != "" {
		if v, err := tx.VersionGet(r.Workflow, r.FromVersion); err == nil {
			was, now := script.FindCredentials(v.Script), script.FindCredentials(r.Script)
			row.Diff = LineDiff(now.Hide(was.Hide(v.Script)), was.Hide(now.Hide(r.Script)))
		}
	}
	if r.Status == kt.RepairHeld {
		b, err := blastRadius(tx, r.Workflow, r.FromVersion)
		if err != nil {
			return row, err
		}
		row.BlastRadius = b
	}
	return row, nil
}

// blastRadius counts what runs of a version applied, and for which inputs.
func blastRadius(tx store.Tx, wf string, version int64) (*Blast, error) {
	v, err := tx.VersionGet(wf, version)
	if err != nil {
		return nil, err
	}
	b := &Blast{Version: v.Label(), Inputs: []string{}}
	ms, err := tx.MutationList(wf)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, m := range ms {
		if m.Status != kt.MutationApplied {
			continue
		}
		r, err := tx.RunGet(m.RunID)
		if err != nil || r.Version != version {
			continue
		}
		b.Writes++
		for _, id := range m.ItemKeys {
			if seen[id] {
				continue
			}
			seen[id] = true
			if len(b.Inputs) >= 20 {
				b.More++
				continue
			}
			in, err := tx.InputGet(id)
			if err != nil {
				in, err = tx.InputGetByKey(wf, id)
			}
			if err == nil {
				b.Inputs = append(b.Inputs, in.Title)
			}
		}
	}
	return b, nil
}

// LineDiff shows b against a line by line: "- " removed, "+ " added, two
// lines of context around each change ("…" between distant ones).
func LineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	if len(x)*len(y) > 4_000_000 {
		return "(too long to show a diff)"
	}
	// Longest common subsequence of lines.
	l := make([][]int, len(x)+1)
	for i := range l {
		l[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				l[i][j] = l[i+1][j+1] + 1
			} else {
				l[i][j] = max(l[i+1][j], l[i][j+1])
			}
		}
	}
	type line struct {
		op   byte
		text string
	}
	var ops []line
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			ops = append(ops, line{' ', x[i]})
			i, j = i+1, j+1
		case j < len(y) && (i == len(x) || l[i][j+1] > l[i+1][j]):
			ops = append(ops, line{'+', y[j]})
			j++
		default:
			ops = append(ops, line{'-', x[i]})
			i++
		}
	}
	near := make([]bool, len(ops))
	for k, o := range ops {
		if o.op != ' ' {
			for d := -2; d <= 2; d++ {
				if k+d >= 0 && k+d < len(ops) {
					near[k+d] = true
				}
			}
		}
	}
	var out strings.Builder
	gap := false
	for k, o := range ops {
		if !near[k] {
			gap = true
			continue
		}
		if gap && out.Len() > 0 {
			out.WriteString("  …\n")
		}
		gap = false
		out.WriteString(string(o.op) + " " + o.text + "\n")
	}
	return strings.TrimRight(out.String(), "\n")
}

// consumedTopics are the topics some consumer of wf's active version
// subscribes to, from its declaration (script.Declare reads each source
// once per process; the key is the script itself, so two stores in one
// process — tests, keep migrate — never share an answer).
func consumedTopics(tx store.Tx, wf string) (map[string]bool, error) {
	w, err := tx.WorkflowGet(wf)
	if err != nil {
		return nil, err
	}
	v, err := tx.VersionGet(wf, w.ActiveVersion)
	if err != nil {
		return nil, err
	}
	decl, err := script.Declare(v.File, v.Script)
	if err != nil {
		return nil, fmt.Errorf("read the declaration of %s version %s: %w", wf, v.Label(), err)
	}
	read := map[string]bool{}
	for _, c := range decl.Consumers {
		for _, t := range c.Subscribe {
			read[t] = true
		}
	}
	return read, nil
}
