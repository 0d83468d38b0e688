package report

import (
	"context"
	"errors"
	"sort"

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/control"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// Items lists one page of a workflow's items, newest first; orphanedOnly
// keeps the orphaned ones, read on through older inputs until the page is
// full (bounded in memory: only the rows shown are kept).
func Items(ctx context.Context, st store.Store, wf string, orphanedOnly bool, p store.Page) ([]apitype.Item, Page, error) {
	var out []apitype.Item
	var pg Page
	p.Search = "" // items are not searched: their pages read on until full
	err := st.View(ctx, func(tx store.Tx) error {
		out = nil
		w, err := tx.WorkflowGet(wf)
		if err != nil {
			return noWorkflow(wf, err)
		}
		l := itemLister{tx: tx, wf: wf, orphanedOnly: orphanedOnly}
		if l.orphaned, l.before, err = orphanCheck(tx, w); err != nil {
			return err
		}
		if orphanedOnly && l.before == 0 {
			pg = Page{Total: -1}
			return nil
		}
		rows, page, err := paged(p, l.list, func(it itemAt) store.Pos { return it.at })
		if err != nil {
			return err
		}
		for _, r := range rows {
			out = append(out, r.row)
		}
		pg = page
		if orphanedOnly {
			return nil
		}
		return total(tx, wf, p, &pg, func(t store.Totals) int { return t.Inputs })
	})
	return out, pg, err
}

// itemAt is an item's row and where its input is in the list.
type itemAt struct {
	row apitype.Item
	at  store.Pos
}

// itemLister reads pages of a workflow's items in one transaction: each
// input read becomes its row, the orphans alone kept when asked (a page
// of rows as InputPage's, filtered).
type itemLister struct {
	tx           store.Tx
	wf           string
	orphanedOnly bool
	orphaned     func(kt.Input) bool
	before       int64 // no orphan was created at or after it (orphanCheck)
}

// list is one page of rows, reading on through inputs until it is full.
func (l itemLister) list(p store.Page) ([]itemAt, error) {
	var rows []itemAt
	if l.orphanedOnly && p.Older == nil && p.Newer == nil {
		p.Older = &store.Pos{At: l.before}
	}
	for {
		ins, err := l.tx.InputPage(l.wf, p)
		if err != nil {
			return nil, err
		}
		var batch []itemAt
		for _, in := range ins {
			row, err := itemRow(l.tx, in, l.orphaned)
			if err != nil {
				return nil, err
			}
			if !l.orphanedOnly || row.Orphaned {
				batch = append(batch, itemAt{row, inputPos(in)})
			}
		}
		// Both ways the rows stay newest first; further on in the
		// direction asked, and no more than the page.
		if p.Newer != nil {
			rows = append(batch, rows...)
			if len(rows) > p.Limit {
				rows = rows[len(rows)-p.Limit:]
			}
		} else {
			rows = append(rows, batch...)
			if len(rows) > p.Limit {
				rows = rows[:p.Limit]
			}
		}
		if len(rows) >= p.Limit || len(ins) < p.Limit {
			return rows, nil
		}
		if p.Newer != nil {
			x := inputPos(ins[0])
			p.Newer = &x
		} else {
			x := inputPos(ins[len(ins)-1])
			p.Older = &x
		}
	}
}

func itemRow(tx store.Tx, in kt.Input, orphaned func(kt.Input) bool) (apitype.Item, error) {
	status, err := InputStatus(tx, in)
	if err != nil {
		return apitype.Item{}, err
	}
	return apitype.Item{ID: in.ID, Workflow: in.Workflow, Key: in.Key, Title: in.Title, Kind: in.Kind, Status: status, Attempt: in.CurrentAttempt,
		Source: in.Source, Type: in.Type, ExternalID: in.ExternalID, Orphaned: orphaned(in), CreatedAt: Time(in.CreatedAt), UpdatedAt: Time(in.UpdatedAt)}, nil
}

// orphanCheck returns a test for ch 12 §12.6 orphans: task items not done or
// skipped, last touched by an older major version, while the active major
// version has completed a task run that never touched them.
//
// before is when the first such run began (0: no item can be orphaned):
// an orphan was last touched, so created, before it, so a look for them
// starts there rather than at the newest input.
func orphanCheck(tx store.Tx, w kt.Workflow) (check func(kt.Input) bool, before int64, err error) {
	versions, err := tx.VersionList(w.Name)
	if err != nil {
		return nil, 0, err
	}
	major := map[int64]int{}
	for _, v := range versions {
		major[v.ID] = v.Major
	}
	active := major[w.ActiveVersion]
	var ofActive []int64
	for id, m := range major {
		if m == active {
			ofActive = append(ofActive, id)
		}
	}
	// Without an older major version nothing is orphaned: no need to look
	// for the first run of this one among every run (issue 44).
	older := false
	for _, m := range major {
		older = older || m < active
	}
	if !older {
		return func(kt.Input) bool { return false }, 0, nil
	}
	// Found by the store, not by reading every run of the workflow (with
	// its trace) on every look at an item.
	var firstNewRun int64
	first, err := tx.RunFirstOf(w.Name, ofActive, kt.HandlerTask, kt.StatusCommitted)
	switch {
	case err == nil:
		firstNewRun = first.CreatedAt
	case !errors.Is(err, kt.ErrNotFound):
		return nil, 0, err
	}
	return func(in kt.Input) bool {
		return in.Kind == kt.KindTask && firstNewRun > 0 && in.Status != kt.ItemDone && in.Status != kt.ItemSkipped &&
			major[in.LastVersion] < active && in.UpdatedAt < firstNewRun
	}, firstNewRun, nil
}

// ShowItem returns an item with its attempt tree.
func ShowItem(ctx context.Context, st store.Store, wf, ref string) (apitype.ItemDetail, error) {
	var d apitype.ItemDetail
	err := st.View(ctx, func(tx store.Tx) error {
		in, err := transition.FindItem(tx, wf, ref)
		if err != nil {
			return err
		}
		w, err := tx.WorkflowGet(in.Workflow)
		if err != nil {
			return err
		}
		orph, _, err := orphanCheck(tx, w)
		if err != nil {
			return err
		}
		if d.Item, err = itemRow(tx, in, orph); err != nil {
			return err
		}
		labels := map[int64]string{}
		vs, err := tx.VersionList(in.Workflow)
		if err != nil {
			return err
		}
		for _, v := range vs {
			labels[v.ID] = v.Label()
		}
		attempts, err := tx.ItemAttemptList(in.ID)
		if err != nil {
			return err
		}
		byAttempt := map[int]*apitype.Attempt{}
		for _, a := range attempts {
			byAttempt[a.Attempt] = &apitype.Attempt{Attempt: a.Attempt, Status: a.Status, Version: labels[a.Version], StartedAt: Time(a.StartedAt), Mutations: []apitype.Output{}}
		}
		ms, err := tx.MutationList(in.Workflow)
		if err != nil {
			return err
		}
		uncertain := false
		for _, m := range ms {
			mine := false
			for _, id := range m.ItemKeys {
				mine = mine || id == in.ID
			}
			if !mine {
				continue
			}
			if m.Attempt == in.CurrentAttempt && control.WriteUncertain(m, true) {
				uncertain = true
			}
			a := byAttempt[m.Attempt]
			if a == nil {
				a = &apitype.Attempt{Attempt: m.Attempt, Status: "unknown", Mutations: []apitype.Output{}}
				byAttempt[m.Attempt] = a
			}
			if a.Version == "" {
				if r, err := tx.RunGet(m.RunID); err == nil {
					a.Version = labels[r.Version]
				} else if !errors.Is(err, kt.ErrNotFound) {
					return err
				}
			}
			a.Mutations = append(a.Mutations, OutputRow(m))
		}
		for n, a := range byAttempt {
			a.Current = n == in.CurrentAttempt
			if a.Current {
				a.Status = d.Item.Status
			}
			d.Attempts = append(d.Attempts, *a)
		}
		sort.Slice(d.Attempts, func(i, j int) bool { return d.Attempts[i].Attempt < d.Attempts[j].Attempt })
		if d.Attempts == nil {
			d.Attempts = []apitype.Attempt{}
		}
		d.Choices = kt.ItemChoices(uncertain)
		return nil
	})
	return d, err
}
