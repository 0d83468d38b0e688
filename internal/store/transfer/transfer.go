// Package transfer copies keep's ledgers from one store to another (`keep
// migrate`): every workflow with its versions, handlers, items and their
// attempts, events, runs, mutations, decisions, grants, repairs, webhook
// deliveries and the runs' ended waits for a person, then
// the connected accounts and the notices already sent, through store.Tx
// only, so that it works between any two backends. Every table of the
// store is carried except the ones that belong to the old store's running
// nodes (leases, nodes) and its own bookkeeping (schema_migrations,
// commit_seq); transfer_test lists the store's tables to hold that.
package transfer

import (
	"context"
	"errors"
	"fmt"
	"math"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// Counts says what was copied.
type Counts struct {
	Workflows, Versions, Handlers, Items, Attempts, Events, Runs, Mutations, Decisions, Grants, Repairs, Deliveries, Connections, Secrets, Notices int
	// Waits are the runs' ended waits for a person (blocked_spans).
	Waits int
}

// ErrNotEmpty means the destination already holds workflows.
var ErrNotEmpty = errors.New("the destination store is not empty")

// Copy copies every workflow of from into to, which must hold none. Each
// workflow is read in one snapshot and written in one transaction: a
// failure leaves whole workflows copied, never half of one.
func Copy(ctx context.Context, from, to store.Store) (Counts, error) {
	var c Counts
	if err := to.View(ctx, func(tx store.Tx) error {
		ws, err := tx.WorkflowList()
		if err == nil && len(ws) > 0 {
			return fmt.Errorf("%w: it holds %d workflows (%s, …); copy into an empty one", ErrNotEmpty, len(ws), ws[0].Name)
		}
		return err
	}); err != nil {
		return c, err
	}
	var names []string
	if err := from.View(ctx, func(tx store.Tx) error {
		ws, err := tx.WorkflowList()
		for _, w := range ws {
			names = append(names, w.Name)
		}
		return err
	}); err != nil {
		return c, err
	}
	for _, name := range names {
		var w workflow
		if err := from.View(ctx, func(tx store.Tx) error { return w.read(tx, name) }); err != nil {
			return c, fmt.Errorf("read workflow %s: %w", name, err)
		}
		if err := to.Update(ctx, func(tx store.Tx) error { return w.write(tx) }); err != nil {
			return c, fmt.Errorf("write workflow %s: %w", name, err)
		}
		w.count(&c)
	}
	// The installation keeps its id (its idempotency keys stay its own).
	if err := carryInstallation(ctx, from, to); err != nil {
		return c, err
	}
	// The accounts and the secrets go as they are: still sealed, so the
	// destination's nodes need the same secret key (KEEP_SECRET_KEY). The
	// notices already sent go too, so no person is told again.
	var err error
	if c.Connections, err = copyAll(ctx, from, to, asIs[kt.Connection]{"connections", store.Tx.ConnectionList, store.Tx.ConnectionPut}); err != nil {
		return c, err
	}
	if c.Secrets, err = copyAll(ctx, from, to, asIs[kt.Secret]{"secrets", store.Tx.SecretList, store.Tx.SecretPut}); err != nil {
		return c, err
	}
	c.Notices, err = copyAll(ctx, from, to, asIs[store.Notice]{"notices", store.Tx.NoticeList, func(tx store.Tx, n store.Notice) error {
		return tx.NoticePut(n.Key, n.Channel, n.SentAt)
	}})
	return c, err
}

// carryInstallation gives the destination the source's installation id.
func carryInstallation(ctx context.Context, from, to store.Store) error {
	var id string
	if err := from.View(ctx, func(tx store.Tx) error {
		var err error
		id, err = tx.InstallationID()
		return err
	}); err != nil {
		return err
	}
	return to.Update(ctx, func(tx store.Tx) error { return tx.InstallationSet(id) })
}

// asIs is a kind of row copied as it is (copyAll): what it is called in
// an error, how every row is listed, and how one is put.
type asIs[T any] struct {
	what string
	list func(store.Tx) ([]T, error)
	put  func(store.Tx, T) error
}

// copyAll copies every row a list reads into the other store, in one
// transaction.
func copyAll[T any](ctx context.Context, from, to store.Store, kind asIs[T]) (int, error) {
	what, list, put := kind.what, kind.list, kind.put
	var rows []T
	if err := from.View(ctx, func(tx store.Tx) error {
		var err error
		rows, err = list(tx)
		return err
	}); err != nil {
		return 0, fmt.Errorf("read the %s: %w", what, err)
	}
	if err := to.Update(ctx, func(tx store.Tx) error {
		for _, r := range rows {
			if err := put(tx, r); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("write the %s: %w", what, err)
	}
	return len(rows), nil
}

// workflow is everything one workflow's ledgers hold.
type workflow struct {
	w         kt.Workflow
	versions  []kt.Version
	handlers  []kt.Handler
	items     []kt.Input
	attempts  []kt.ItemAttempt
	events    []kt.Event
	runs      []kt.Run
	mutations []kt.Mutation
	decisions []kt.Decision
	grants    []kt.Grant
	repairs   []kt.Repair
	// deliveries, newest first: the accepted ones are what a webhook's
	// retried delivery is found by.
	deliveries []kt.Delivery
	// waits are the runs' ended waits for a person (issue 42's time
	// blocked); a wait still going is the run's own BlockedAt.
	waits []store.BlockedSpan
}

func (w *workflow) read(tx store.Tx, name string) error {
	var err error
	if w.w, err = tx.WorkflowGet(name); err != nil {
		return err
	}
	if w.versions, err = tx.VersionList(name); err != nil {
		return err
	}
	if w.handlers, err = tx.HandlerList(name); err != nil {
		return err
	}
	if w.items, err = tx.InputList(name); err != nil {
		return err
	}
	for _, it := range w.items {
		as, err := tx.ItemAttemptList(it.ID)
		if err != nil {
			return err
		}
		w.attempts = append(w.attempts, as...)
	}
	if w.events, err = allEvents(tx, name); err != nil {
		return err
	}
	if w.runs, err = tx.RunList(name, 0); err != nil {
		return err
	}
	if w.mutations, err = tx.MutationList(name); err != nil {
		return err
	}
	if w.decisions, err = tx.DecisionList(name, ""); err != nil {
		return err
	}
	if w.grants, err = tx.GrantList(name); err != nil {
		return err
	}
	if w.repairs, err = tx.RepairList(name); err != nil {
		return err
	}
	if w.deliveries, err = tx.DeliveryList(name, 0); err != nil {
		return err
	}
	// Every ended wait overlaps the whole of time: the activity chart's
	// read gives them all (and the going ones, To 0, which the runs carry).
	all, err := tx.Tally(name, 0, math.MaxInt64)
	if err != nil {
		return err
	}
	for _, b := range all.Blocked {
		if b.To != 0 {
			w.waits = append(w.waits, b)
		}
	}
	// A held delivery is carried with its request (lists leave it out):
	// the copy takes it as the source would have.
	for i, d := range w.deliveries {
		if d.Status == kt.DeliveryHeld {
			if w.deliveries[i], err = tx.DeliveryHeldGet(d.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

func allEvents(tx store.Tx, wf string) ([]kt.Event, error) {
	var out []kt.Event
	var after int64
	for {
		page, err := tx.EventList(wf, store.EventFilter{AfterID: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < 1000 {
			return out, nil
		}
		after = page[len(page)-1].ID
	}
}

// write stores a workflow's ledgers as they were: versions keep their
// numbers (the active version points at one), events their status,
// reservation, attempt and causes (their row ids are the store's own).
func (w *workflow) write(tx store.Tx) error {
	for _, v := range w.versions { // oldest first: each keeps its number
		want := v.ID
		if err := tx.VersionInsert(&v); err != nil {
			return err
		}
		if v.ID != want {
			return fmt.Errorf("version %d of %s became %d", want, w.w.Name, v.ID)
		}
	}
	if err := tx.WorkflowPut(w.w); err != nil {
		return err
	}
	for _, h := range w.handlers {
		if err := tx.HandlerPut(h); err != nil {
			return err
		}
	}
	for _, it := range w.items {
		if err := tx.InputPut(it); err != nil {
			return err
		}
	}
	for _, a := range w.attempts {
		if err := tx.ItemAttemptPut(a); err != nil {
			return err
		}
	}
	for _, ev := range w.events {
		ev := ev
		if _, err := tx.EventPublish(&ev); err != nil {
			return err
		}
	}
	for _, r := range w.runs {
		if err := tx.RunPut(r); err != nil {
			return err
		}
	}
	for _, m := range w.mutations {
		if err := tx.MutationPut(m); err != nil {
			return err
		}
	}
	for _, d := range w.decisions {
		if err := tx.DecisionAdd(d); err != nil {
			return err
		}
	}
	for _, g := range w.grants {
		if err := tx.GrantAdd(g); err != nil {
			return err
		}
	}
	for _, r := range w.repairs {
		if err := tx.RepairPut(r); err != nil {
			return err
		}
	}
	for i := len(w.deliveries) - 1; i >= 0; i-- { // oldest first: the list keeps its order
		if err := tx.DeliveryAdd(&w.deliveries[i]); err != nil {
			return err
		}
	}
	for _, b := range w.waits {
		if err := tx.BlockedSpanAdd(w.w.Name, b); err != nil {
			return err
		}
	}
	return nil
}

func (w *workflow) count(c *Counts) {
	c.Workflows++
	c.Versions += len(w.versions)
	c.Handlers += len(w.handlers)
	c.Items += len(w.items)
	c.Attempts += len(w.attempts)
	c.Events += len(w.events)
	c.Runs += len(w.runs)
	c.Mutations += len(w.mutations)
	c.Decisions += len(w.decisions)
	c.Grants += len(w.grants)
	c.Repairs += len(w.repairs)
	c.Deliveries += len(w.deliveries)
	c.Waits += len(w.waits)
}
