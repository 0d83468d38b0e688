// Package report builds what people see from the ledgers: inputs with their
// derived status, outputs (one per mutation), runs, workflow status and the
// blocked-work card, into apitype's shapes (the CLI's --json, the HTTP API
// and the page share them, so their field names are a public contract).
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

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// Time renders a millisecond timestamp for people and JSON.
func Time(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

func errInfo(class kt.ErrorClass, msg string) *apitype.ErrorInfo {
	if class == "" && msg == "" {
		return nil
	}
	return &apitype.ErrorInfo{Class: string(class), Message: msg}
}

// Page is where a page of a list newest first stands among its
// neighbours (issue 44): the positions to ask from for the older and the
// newer page (nil when there is none), and how many rows the whole list
// has (-1 when a search narrows it).
type Page struct {
	Older, Newer *store.Pos
	Total        int
}

// DefaultLimit is a page's size when its reader asks for none.
const DefaultLimit = 50

// paged reads one page with list, asking for one row more than the page
// to know whether an older (or, going back, a newer) page follows.
func paged[T any](p store.Page, list func(store.Page) ([]T, error), pos func(T) store.Pos) ([]T, Page, error) {
	p = asked(p)
	want := p.Limit - 1
	rows, err := list(p)
	if err != nil {
		return nil, Page{}, err
	}
	pg := Page{Total: -1}
	at := func(i int) *store.Pos { x := pos(rows[i]); return &x }
	more := len(rows) > want
	if p.Newer != nil {
		// Newest first, the extra row is the newest.
		if more {
			rows = rows[1:]
		}
		if more && len(rows) > 0 {
			pg.Newer = at(0)
		}
		if len(rows) > 0 {
			pg.Older = at(len(rows) - 1)
		}
		return rows, pg, nil
	}
	if more {
		rows = rows[:want]
		pg.Older = at(len(rows) - 1)
	}
	if p.Older != nil && len(rows) > 0 {
		pg.Newer = at(0)
	}
	return rows, pg, nil
}

// asked is the store's page that paged reads for p: its limit (the
// default for none) and one row more.
func asked(p store.Page) store.Page {
	if p.Limit <= 0 {
		p.Limit = DefaultLimit
	}
	p.Limit++
	return p
}

// Every reads all the pages of a list, oldest page last: for keep's own
// small stores (keep test's run) and a person who asked for all (the
// CLI's --all goes through the API's cursors instead).
func Every[T any](read func(store.Page) ([]T, Page, error)) ([]T, error) {
	var all []T
	p := store.Page{Limit: 1000}
	for {
		rows, pg, err := read(p)
		if err != nil {
			return nil, err
		}
		all = append(all, rows...)
		if pg.Older == nil {
			return all, nil
		}
		p.Older = pg.Older
	}
}

func inputPos(in kt.Input) store.Pos { return store.Pos{At: in.CreatedAt, ID: in.ID} }

// Inputs lists one page of a workflow's inputs, newest first, with the
// status of SPEC §8.1.
func Inputs(ctx context.Context, st store.Store, wf string, p store.Page) ([]apitype.Input, Page, error) {
	var out []apitype.Input
	var pg Page
	err := st.View(ctx, func(tx store.Tx) error {
		out = nil
		if _, err := tx.WorkflowGet(wf); err != nil {
			return noWorkflow(wf, err)
		}
		ins, page, err := paged(p, func(p store.Page) ([]kt.Input, error) { return tx.InputPage(wf, p) }, inputPos)
		if err != nil {
			return err
		}
		pg = page
		// A search reads a window of inputs (store.SearchWindow): when the
		// page is not full of matches, the next one goes on from its end.
		if p.Search != "" && (p.Newer == nil && pg.Older == nil || p.Newer != nil && pg.Newer == nil) {
			end, ok, err := tx.InputWindowEnd(wf, p)
			if err != nil {
				return err
			}
			if ok && p.Newer != nil {
				pg.Newer = &end
			} else if ok {
				pg.Older = &end
			}
		}
		for _, in := range ins {
			status, err := InputStatus(tx, in)
			if err != nil {
				return err
			}
			out = append(out, inputRow(in, status))
		}
		return total(tx, wf, p, &pg, func(t store.Totals) int { return t.Inputs })
	})
	return out, pg, err
}

// total fills in how many rows the whole list has, from the tallies.
func total(tx store.Tx, wf string, p store.Page, pg *Page, of func(store.Totals) int) error {
	if p.Search != "" {
		return nil
	}
	t, err := tx.WorkflowTotals(wf)
	pg.Total = of(t)
	return err
}

func inputRow(in kt.Input, status kt.ItemStatus) apitype.Input {
	return apitype.Input{ID: in.ID, Key: in.Key, Source: in.Source, Type: in.Type, ExternalID: in.ExternalID, Title: in.Title, Status: status,
		Attempt: in.CurrentAttempt, CreatedAt: Time(in.CreatedAt), UpdatedAt: Time(in.UpdatedAt)}
}

func noWorkflow(wf string, err error) error {
	if errors.Is(err, kt.ErrNotFound) {
		return kt.Missing("there is no workflow %q (see `keep status`)", wf)
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
	return kt.WhoActs(r, m, err == nil) == kt.Keep
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
			case control.PayloadConflict(r):
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

// Outputs lists one page of a workflow's mutations, newest first. Like
// Runs, its reads go together and need no snapshot.
func Outputs(ctx context.Context, st store.Store, wf string, p store.Page) ([]apitype.Output, Page, error) {
	var out []apitype.Output
	var pg Page
	err := st.View(store.NoSnapshot(ctx), func(tx store.Tx) error {
		out = nil
		store.Prefetch(tx, func(tx store.Tx) {
			_, _ = tx.WorkflowGet(wf)
			_, _ = tx.MutationPage(wf, asked(p))
			_, _ = tx.WorkflowTotals(wf)
		})
		if _, err := tx.WorkflowGet(wf); err != nil {
			return noWorkflow(wf, err)
		}
		ms, page, err := paged(p, func(p store.Page) ([]kt.Mutation, error) { return tx.MutationPage(wf, p) },
			func(m kt.Mutation) store.Pos { return store.Pos{At: m.CreatedAt, ID: m.ID} })
		if err != nil {
			return err
		}
		pg = page
		for _, m := range ms {
			out = append(out, OutputRow(m))
		}
		return total(tx, wf, p, &pg, func(t store.Totals) int { return t.Mutations })
	})
	return out, pg, err
}

// OutputRow renders one ledger row.
func OutputRow(m kt.Mutation) apitype.Output {
	ids := m.ItemKeys
	if ids == nil {
		ids = []string{}
	}
	return apitype.Output{MutationID: m.ID, RunID: m.RunID, Tool: m.Tool, Method: m.Method, Target: m.Target, Status: string(m.Status), InputIDs: ids,
		Result: m.Result, Error: errInfo(m.ErrorClass, m.ErrorMessage), ResolvedBy: m.ResolvedBy, CreatedAt: Time(m.CreatedAt), UpdatedAt: Time(m.UpdatedAt)}
}

// Runs lists one page of a workflow's runs, newest first. The page and
// programs poll it while runs commit: its reads go together and need no
// snapshot (a run committed between them is listed or not, as if the list
// came a moment later).
func Runs(ctx context.Context, st store.Store, wf string, p store.Page) ([]apitype.Run, Page, error) {
	var out []apitype.Run
	var pg Page
	err := st.View(store.NoSnapshot(ctx), func(tx store.Tx) error {
		out = nil
		store.Prefetch(tx, func(tx store.Tx) {
			_, _ = tx.WorkflowGet(wf)
			_, _ = tx.RunPage(wf, asked(p))
			_, _ = tx.WorkflowTotals(wf)
		})
		if _, err := tx.WorkflowGet(wf); err != nil {
			return noWorkflow(wf, err)
		}
		rs, page, err := paged(p, func(p store.Page) ([]kt.Run, error) { return tx.RunPage(wf, p) },
			func(r kt.Run) store.Pos { return store.Pos{At: r.CreatedAt, ID: r.ID} })
		if err != nil {
			return err
		}
		pg = page
		for _, r := range rs {
			out = append(out, RunRow(r))
		}
		return total(tx, wf, p, &pg, func(t store.Totals) int { return t.Runs })
	})
	return out, pg, err
}

// RunRow renders one run.
func RunRow(r kt.Run) apitype.Run {
	return apitype.Run{ID: r.ID, Workflow: r.Workflow, Handler: r.Handler, HandlerType: string(r.HandlerType), Phase: string(r.Phase), Status: string(r.Status),
		RetryOf: r.RetryOf, Title: RunTitle(r), RetryCount: r.RetryCount, NextAttemptAt: Time(r.NextAttemptAt), Version: r.Version,
		Error: errInfo(r.ErrorClass, r.ErrorMessage), CreatedAt: Time(r.CreatedAt), UpdatedAt: Time(r.UpdatedAt), FinishedAt: Time(r.FinishedAt),
		QuietPolls: r.QuietPolls, QuietSince: timeIf(r.QuietSince)}
}

// QuietNote says what a run of polls that found nothing new stands for
// (kt.Run.QuietPolls): "last polled at …, N polls found nothing new since …".
func QuietNote(r kt.Run) string {
	if r.QuietPolls == 0 {
		return ""
	}
	return fmt.Sprintf("last polled at %s, %d polls found nothing new since %s", Time(r.FinishedAt), r.QuietPolls, Time(r.QuietSince))
}

// quietPolls says, for each producer of wf whose last polls found
// nothing new, when it last polled and how many found nothing new.
func quietPolls(tx store.Tx, wf string) ([]string, error) {
	hs, err := tx.HandlerList(wf)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range hs {
		if h.QuietRun == "" {
			continue
		}
		r, err := tx.RunGet(h.QuietRun)
		switch {
		case errors.Is(err, kt.ErrNotFound):
			continue
		case err != nil:
			return nil, err
		}
		out = append(out, fmt.Sprintf("producer %s: %s", h.Name, QuietNote(r)))
	}
	return out, nil
}

func timeIf(ms int64) string {
	if ms == 0 {
		return ""
	}
	return Time(ms)
}

// RunTitle is what a consumer run is about for people: the ui.title its
// prepare returned ("" when it gave none).
func RunTitle(r kt.Run) string {
	if r.QuietPolls > 0 {
		return QuietNote(r)
	}
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
func Statuses(ctx context.Context, st store.Store, only string) ([]apitype.Status, error) {
	var out []apitype.Status
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

// status is a workflow's status; one whose stored state is damaged (issue
// 44) is "damaged", its reason saying which row and what to restore, and
// the other workflows are shown as ever.
func status(tx store.Tx, w kt.Workflow) (apitype.Status, error) {
	s, err := statusOf(tx, w)
	if kt.IsDamaged(err) {
		return apitype.Status{Name: w.Name, Status: kt.StatusWordDamaged, Reason: err.Error()}, nil
	}
	return s, err
}

func statusOf(tx store.Tx, w kt.Workflow) (apitype.Status, error) {
	v, err := tx.VersionGet(w.Name, w.ActiveVersion)
	if err != nil {
		return apitype.Status{}, err
	}
	pending, err := tx.CountPending(w.Name)
	if err != nil {
		return apitype.Status{}, err
	}
	s := apitype.Status{Name: w.Name, Version: v.Label(), Status: "idle", PendingEvents: pending, FilesRoot: w.FilesRoot}
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
	if s.QuietPolls, err = quietPolls(tx, w.Name); err != nil {
		return s, err
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
func Blocked(ctx context.Context, st store.Store, wf string) ([]apitype.Card, error) {
	var out []apitype.Card
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
			if kt.IsDamaged(err) {
				// What the card reads of its workflow is damaged (a
				// version's script, a repair): the card says that.
				c = apitype.Card{RunID: r.ID, Workflow: r.Workflow, Handler: r.Handler, Status: string(r.Status), Phase: string(r.Phase),
					Reason: err.Error(), Inputs: []apitype.Input{}, Notes: []string{kt.DamagedNote(r.Workflow)}}
				blocked, err = true, nil
			}
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
func CardFor(tx store.Tx, r kt.Run) (apitype.Card, bool, error) { return card(tx, r) }

func card(tx store.Tx, r kt.Run) (apitype.Card, bool, error) {
	c := apitype.Card{RunID: r.ID, Workflow: r.Workflow, Handler: r.Handler, Title: RunTitle(r), Status: string(r.Status), Phase: string(r.Phase), Reason: r.ErrorMessage, Inputs: []apitype.Input{}}
	if err := storedJSONOf(r); err != nil {
		// keep's own JSON of this run does not decode: the card says
		// damaged storage, which no action of the script fixes (issue 44).
		c.Reason = err.Error()
	} else if len(r.PendingCall) > 0 {
		var pc kt.PendingCall
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
	blocked := kt.WhoActs(r, m, hasMut) == kt.APerson
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
	c.Choices = control.ChoicesFor(r, m, hasMut, len(evs))
	for _, ch := range c.Choices {
		c.Actions = append(c.Actions, string(ch.Action))
	}
	c.Approval = control.IsApprovalWait(r)
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
	if r.ErrorClass == kt.ClassDamaged || storedJSONOf(r) != nil {
		return append(notes, kt.DamagedNote(r.Workflow)), nil
	}
	if slices.Contains(actions, string(kt.ResolveDidntHappen)) {
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

// DecisionRow renders a decision of the log.
func DecisionRow(d kt.Decision) apitype.Decision {
	return apitype.Decision{At: Time(d.At), By: d.By, Action: d.Action, RunID: d.RunID, MutationID: d.MutationID, ItemID: d.ItemID, Detail: d.Detail}
}

// ShowRun returns one run in full.
func ShowRun(ctx context.Context, st store.Store, id string) (apitype.RunDetail, error) {
	var d apitype.RunDetail
	err := st.View(ctx, func(tx store.Tx) error {
		r, err := tx.RunGet(id)
		if errors.Is(err, kt.ErrNotFound) {
			return kt.Missing("there is no run %q (see `keep runs WORKFLOW`)", id)
		}
		if err != nil {
			return err
		}
		card, blocked, err := card(tx, r)
		if err != nil {
			return err
		}
		d = apitype.RunDetail{Run: RunRow(r), PrepareResult: r.PrepareResult, MutationResult: r.MutationResult, Blocked: blocked, Trace: []apitype.TraceLine{}}
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
		d.Decisions = []apitype.Decision{}
		for _, x := range ds {
			d.Decisions = append(d.Decisions, DecisionRow(x))
		}
		var tr struct {
			Entries kt.TraceEntries `json:"entries"`
			Dropped int             `json:"dropped"`
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

// ShowInput reads an input by its id or its key (source:type:id), in any
// workflow, with its outputs.
func ShowInput(ctx context.Context, st store.Store, ref string) (apitype.InputDetail, error) {
	var d apitype.InputDetail
	err := st.View(ctx, func(tx store.Tx) error {
		in, err := transition.FindItem(tx, "", ref)
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
		d.Outputs = []apitype.Output{}
		for _, m := range ms {
			if slices.Contains(m.ItemKeys, in.ID) {
				d.Outputs = append(d.Outputs, OutputRow(m))
			}
		}
		return nil
	})
	return d, err
}

// Schedule lists when a workflow's producers and tasks run next.
func Schedule(ctx context.Context, st store.Store, wf string) ([]apitype.Scheduled, error) {
	out := []apitype.Scheduled{}
	err := st.View(ctx, func(tx store.Tx) error {
		hs, err := tx.HandlerList(wf)
		if err != nil {
			return err
		}
		for _, h := range hs {
			if (h.Type == kt.HandlerProducer || h.Type == kt.HandlerTask) && h.NextRunAt > 0 {
				out = append(out, apitype.Scheduled{Handler: h.Name, Type: string(h.Type), NextRunAt: Time(h.NextRunAt)})
			}
		}
		return nil
	})
	return out, err
}

// Connections lists the connected accounts.
func Connections(ctx context.Context, st store.Store) ([]apitype.Connection, error) {
	out := []apitype.Connection{}
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
			out = append(out, apitype.Connection{Provider: c.Provider, Account: c.Account, Scopes: scopes, State: state, Broken: c.Broken,
				Connected: Time(c.CreatedAt), Updated: Time(c.UpdatedAt)})
		}
		return nil
	})
	return out, err
}

// Secrets lists the named secrets (keep secret set NAME).
func Secrets(ctx context.Context, st store.Store) ([]apitype.Secret, error) {
	out := []apitype.Secret{}
	err := st.View(ctx, func(tx store.Tx) error {
		xs, err := tx.SecretList()
		for _, x := range xs {
			hosts := x.Hosts
			if hosts == nil {
				hosts = []string{}
			}
			out = append(out, apitype.Secret{Name: x.Name, Hosts: hosts, SetAt: Time(x.UpdatedAt), CreatedAt: Time(x.CreatedAt)})
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

// RepairRow renders a repair.
// Credentials written literally in the script are masked (script.Credentials).
func RepairRow(r kt.Repair) apitype.Repair {
	c := script.FindCredentials(r.Script)
	return apitype.Repair{ID: r.ID, RunID: r.RunID, Attempt: r.Attempt, Status: string(r.Status), Reason: c.Hide(r.Reason), Explanation: c.Hide(r.Explanation), Script: c.Hide(r.Script),
		Tokens: r.Tokens, DecidedBy: r.DecidedBy, At: Time(r.CreatedAt)}
}

// Repairs lists a workflow's repairs, oldest first, each with its diff,
// and a held one with its blast radius.
func Repairs(ctx context.Context, st store.Store, wf string) ([]apitype.Repair, error) {
	out := []apitype.Repair{}
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
func repairView(tx store.Tx, r kt.Repair) (apitype.Repair, error) {
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
func blastRadius(tx store.Tx, wf string, version int64) (*apitype.Blast, error) {
	v, err := tx.VersionGet(wf, version)
	if err != nil {
		return nil, err
	}
	b := &apitype.Blast{Version: v.Label(), Inputs: []string{}}
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

// storedJSONOf checks that the JSON keep stored for a run decodes: its
// prepare result, mutation result and pending call. The first that does
// not is damaged storage of that run.
func storedJSONOf(r kt.Run) error {
	for _, f := range []struct {
		what string
		raw  json.RawMessage
	}{{"prepare result", r.PrepareResult}, {"mutation result", r.MutationResult}, {"pending call", r.PendingCall}} {
		if len(f.raw) > 0 && !json.Valid(f.raw) {
			var v any
			err := json.Unmarshal(f.raw, &v)
			return kt.UndecodableJSON("the stored "+f.what+" of run "+r.ID, "runs", "id="+r.ID, err)
		}
	}
	return nil
}

// AllInputs reads every input of a workflow, oldest first, page by page:
// for keep test's small stores and tests, never for a person's read.
func AllInputs(ctx context.Context, st store.Store, wf string) ([]apitype.Input, error) {
	all, err := Every(func(p store.Page) ([]apitype.Input, Page, error) { return Inputs(ctx, st, wf, p) })
	slices.Reverse(all)
	return all, err
}

// AllItems reads every item of a workflow (orphaned: only those), oldest
// first, as AllInputs.
func AllItems(ctx context.Context, st store.Store, wf string, orphaned bool) ([]apitype.Item, error) {
	all, err := Every(func(p store.Page) ([]apitype.Item, Page, error) { return Items(ctx, st, wf, orphaned, p) })
	slices.Reverse(all)
	return all, err
}

// AllOutputs reads every output of a workflow, oldest first, as AllInputs.
func AllOutputs(ctx context.Context, st store.Store, wf string) ([]apitype.Output, error) {
	all, err := Every(func(p store.Page) ([]apitype.Output, Page, error) { return Outputs(ctx, st, wf, p) })
	slices.Reverse(all)
	return all, err
}

// AllRuns reads every run of a workflow, newest first, as AllInputs.
func AllRuns(ctx context.Context, st store.Store, wf string) ([]apitype.Run, error) {
	return Every(func(p store.Page) ([]apitype.Run, Page, error) { return Runs(ctx, st, wf, p) })
}
