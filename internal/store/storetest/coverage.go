package storetest

import (
	"context"
	"encoding/json"
	"reflect"
	"sort"
	"sync"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// coverage records which methods of store.Tx the suite calls, so that a
// method with no case fails the suite (issue 13): a backend cannot get a
// method wrong that nothing checks.
type coverage struct {
	mu     sync.Mutex
	called map[string]bool
}

func (c *coverage) note(name string) {
	c.mu.Lock()
	c.called[name] = true
	c.mu.Unlock()
}

// missing lists the Tx methods, and Store.Close, that no case called.
func (c *coverage) missing() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	tx := reflect.TypeOf((*store.Tx)(nil)).Elem()
	for i := 0; i < tx.NumMethod(); i++ {
		if name := tx.Method(i).Name; !c.called[name] {
			out = append(out, name)
		}
	}
	if !c.called["Close"] {
		out = append(out, "Close")
	}
	sort.Strings(out)
	return out
}

// checkCoverage fails t when a Tx method has no case, once every case ran.
func (c *coverage) check(t *testing.T) {
	t.Cleanup(func() {
		if m := c.missing(); len(m) > 0 && !t.Failed() {
			t.Errorf("storetest has no case for these store methods: %v; add one", m)
		}
	})
}

// recordingStore wraps a backend's store so that every Tx it hands out
// notes the methods called.
type recordingStore struct {
	store.Store
	c *coverage
}

func (r recordingStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	return r.Store.Update(ctx, func(tx store.Tx) error { return fn(recordingTx{tx, r.c}) })
}

func (r recordingStore) View(ctx context.Context, fn func(store.Tx) error) error {
	return r.Store.View(ctx, func(tx store.Tx) error { return fn(recordingTx{tx, r.c}) })
}

func (r recordingStore) Close() error {
	r.c.note("Close")
	return r.Store.Close()
}

type recordingTx struct {
	tx store.Tx
	c  *coverage
}

func (r recordingTx) WorkflowGet(name string) (kt.Workflow, error) {
	r.c.note("WorkflowGet")
	return r.tx.WorkflowGet(name)
}

func (r recordingTx) WorkflowList() ([]kt.Workflow, error) {
	r.c.note("WorkflowList")
	return r.tx.WorkflowList()
}

func (r recordingTx) WorkflowPut(w kt.Workflow) error {
	r.c.note("WorkflowPut")
	return r.tx.WorkflowPut(w)
}

func (r recordingTx) VersionInsert(v *kt.Version) error {
	r.c.note("VersionInsert")
	return r.tx.VersionInsert(v)
}

func (r recordingTx) VersionGet(workflow string, id int64) (kt.Version, error) {
	r.c.note("VersionGet")
	return r.tx.VersionGet(workflow, id)
}

func (r recordingTx) VersionList(workflow string) ([]kt.Version, error) {
	r.c.note("VersionList")
	return r.tx.VersionList(workflow)
}

func (r recordingTx) HandlerGet(workflow, name string) (kt.Handler, error) {
	r.c.note("HandlerGet")
	return r.tx.HandlerGet(workflow, name)
}

func (r recordingTx) HandlerList(workflow string) ([]kt.Handler, error) {
	r.c.note("HandlerList")
	return r.tx.HandlerList(workflow)
}

func (r recordingTx) HandlerPut(h kt.Handler) error {
	r.c.note("HandlerPut")
	return r.tx.HandlerPut(h)
}

func (r recordingTx) EventPublish(e *kt.Event) (created bool, err error) {
	r.c.note("EventPublish")
	return r.tx.EventPublish(e)
}

func (r recordingTx) EventGet(workflow, topic, messageID string) (kt.Event, error) {
	r.c.note("EventGet")
	return r.tx.EventGet(workflow, topic, messageID)
}

func (r recordingTx) EventsPending(workflow, topic string, limit int) ([]kt.Event, error) {
	r.c.note("EventsPending")
	return r.tx.EventsPending(workflow, topic, limit)
}

func (r recordingTx) EventsPendingWithin(workflow, topic string, limit, maxBytes int) ([]kt.Event, bool, error) {
	r.c.note("EventsPendingWithin")
	return r.tx.EventsPendingWithin(workflow, topic, limit, maxBytes)
}

func (r recordingTx) EventsReservedBy(runID string) ([]kt.Event, error) {
	r.c.note("EventsReservedBy")
	return r.tx.EventsReservedBy(runID)
}

func (r recordingTx) EventsByInput(inputID string) ([]kt.Event, error) {
	r.c.note("EventsByInput")
	return r.tx.EventsByInput(inputID)
}

func (r recordingTx) EventUpdate(e kt.Event) error {
	r.c.note("EventUpdate")
	return r.tx.EventUpdate(e)
}

func (r recordingTx) EventReserve(e kt.Event, runID string, now int64) error {
	r.c.note("EventReserve")
	return r.tx.EventReserve(e, runID, now)
}

func (r recordingTx) OldestPending(workflow string, topics []string) (createdAt int64, ok bool, err error) {
	r.c.note("OldestPending")
	return r.tx.OldestPending(workflow, topics)
}

func (r recordingTx) CountPending(workflow string) (int, error) {
	r.c.note("CountPending")
	return r.tx.CountPending(workflow)
}

func (r recordingTx) InputGet(id string) (kt.Input, error) {
	r.c.note("InputGet")
	return r.tx.InputGet(id)
}

func (r recordingTx) InputGetByKey(workflow, key string) (kt.Input, error) {
	r.c.note("InputGetByKey")
	return r.tx.InputGetByKey(workflow, key)
}

func (r recordingTx) InputPut(in kt.Input) error {
	r.c.note("InputPut")
	return r.tx.InputPut(in)
}

func (r recordingTx) InputList(workflow string) ([]kt.Input, error) {
	r.c.note("InputList")
	return r.tx.InputList(workflow)
}

func (r recordingTx) ItemAttemptPut(a kt.ItemAttempt) error {
	r.c.note("ItemAttemptPut")
	return r.tx.ItemAttemptPut(a)
}

func (r recordingTx) ItemAttemptList(itemID string) ([]kt.ItemAttempt, error) {
	r.c.note("ItemAttemptList")
	return r.tx.ItemAttemptList(itemID)
}

func (r recordingTx) EventList(workflow string, f store.EventFilter) ([]kt.Event, error) {
	r.c.note("EventList")
	return r.tx.EventList(workflow, f)
}

func (r recordingTx) Tally(workflow string, from, to int64) (store.HourTally, error) {
	r.c.note("Tally")
	return r.tx.Tally(workflow, from, to)
}

func (r recordingTx) Intake(workflow string, webhooks []string, apiSource string, from int64) (store.IntakeTally, error) {
	r.c.note("Intake")
	return r.tx.Intake(workflow, webhooks, apiSource, from)
}

func (r recordingTx) BlockedSpanAdd(workflow string, b store.BlockedSpan) error {
	r.c.note("BlockedSpanAdd")
	return r.tx.BlockedSpanAdd(workflow, b)
}

func (r recordingTx) TopicCounts(workflow string) ([]store.TopicCount, error) {
	r.c.note("TopicCounts")
	return r.tx.TopicCounts(workflow)
}

func (r recordingTx) Now() (int64, bool, error) {
	r.c.note("Now")
	return r.tx.Now()
}

func (r recordingTx) LeaseGet(workflow string) (kt.Lease, error) {
	r.c.note("LeaseGet")
	return r.tx.LeaseGet(workflow)
}

func (r recordingTx) LeasePut(l kt.Lease) error {
	r.c.note("LeasePut")
	return r.tx.LeasePut(l)
}

func (r recordingTx) LeaseList() ([]kt.Lease, error) {
	r.c.note("LeaseList")
	return r.tx.LeaseList()
}

func (r recordingTx) NodePut(n kt.Node) error {
	r.c.note("NodePut")
	return r.tx.NodePut(n)
}

func (r recordingTx) NodeForget(n kt.Node) error {
	r.c.note("NodeForget")
	return r.tx.NodeForget(n)
}

func (r recordingTx) NodeList() ([]kt.Node, error) {
	r.c.note("NodeList")
	return r.tx.NodeList()
}

func (r recordingTx) RunGet(id string) (kt.Run, error) {
	r.c.note("RunGet")
	return r.tx.RunGet(id)
}

func (r recordingTx) RunPut(run kt.Run) error {
	r.c.note("RunPut")
	return r.tx.RunPut(run)
}

func (r recordingTx) RunSetIfRev(run kt.Run) error {
	r.c.note("RunSetIfRev")
	return r.tx.RunSetIfRev(run)
}

func (r recordingTx) RunList(workflow string, limit int) ([]kt.Run, error) {
	r.c.note("RunList")
	return r.tx.RunList(workflow, limit)
}

func (r recordingTx) RunsOfVersion(workflow string, version int64, status kt.Status, limit int) ([]kt.Run, error) {
	r.c.note("RunsOfVersion")
	return r.tx.RunsOfVersion(workflow, version, status, limit)
}

func (r recordingTx) RunsFinishedSince(workflow string, version int64, status kt.Status, since int64, limit int) ([]kt.Run, error) {
	r.c.note("RunsFinishedSince")
	return r.tx.RunsFinishedSince(workflow, version, status, since, limit)
}

func (r recordingTx) RunFirstOf(workflow string, versions []int64, handlerType kt.HandlerType, status kt.Status) (kt.Run, error) {
	r.c.note("RunFirstOf")
	return r.tx.RunFirstOf(workflow, versions, handlerType, status)
}

func (r recordingTx) RunOpen(workflow string) (kt.Run, error) {
	r.c.note("RunOpen")
	return r.tx.RunOpen(workflow)
}

func (r recordingTx) RunsWithStatus(status kt.Status) ([]kt.Run, error) {
	r.c.note("RunsWithStatus")
	return r.tx.RunsWithStatus(status)
}

func (r recordingTx) MutationGet(id string) (kt.Mutation, error) {
	r.c.note("MutationGet")
	return r.tx.MutationGet(id)
}

func (r recordingTx) MutationByIdentity(identityKey string) (kt.Mutation, error) {
	r.c.note("MutationByIdentity")
	return r.tx.MutationByIdentity(identityKey)
}

func (r recordingTx) MutationByRun(runID string) (kt.Mutation, error) {
	r.c.note("MutationByRun")
	return r.tx.MutationByRun(runID)
}

func (r recordingTx) MutationPut(m kt.Mutation) error {
	r.c.note("MutationPut")
	return r.tx.MutationPut(m)
}

func (r recordingTx) MutationPutFrom(m kt.Mutation, from kt.MutationStatus) error {
	r.c.note("MutationPutFrom")
	return r.tx.MutationPutFrom(m, from)
}

func (r recordingTx) HandlerAdvance(workflow, name string, state json.RawMessage, wakeAt, now int64) error {
	r.c.note("HandlerAdvance")
	return r.tx.HandlerAdvance(workflow, name, state, wakeAt, now)
}

func (r recordingTx) EventSettle(e kt.Event, runID string, final kt.EventStatus, now int64) error {
	r.c.note("EventSettle")
	return r.tx.EventSettle(e, runID, final, now)
}

func (r recordingTx) MutationInsert(m kt.Mutation) error {
	r.c.note("MutationInsert")
	return r.tx.MutationInsert(m)
}

func (r recordingTx) MutationList(workflow string) ([]kt.Mutation, error) {
	r.c.note("MutationList")
	return r.tx.MutationList(workflow)
}

func (r recordingTx) MutationsWithStatus(status kt.MutationStatus) ([]kt.Mutation, error) {
	r.c.note("MutationsWithStatus")
	return r.tx.MutationsWithStatus(status)
}

func (r recordingTx) DecisionAdd(d kt.Decision) error {
	r.c.note("DecisionAdd")
	return r.tx.DecisionAdd(d)
}

func (r recordingTx) DecisionList(workflow, runID string) ([]kt.Decision, error) {
	r.c.note("DecisionList")
	return r.tx.DecisionList(workflow, runID)
}

func (r recordingTx) Counts() (store.Counts, error) {
	r.c.note("Counts")
	return r.tx.Counts()
}

func (r recordingTx) DueWorkflows(now int64) ([]string, error) {
	r.c.note("DueWorkflows")
	return r.tx.DueWorkflows(now)
}

func (r recordingTx) ConnectionGet(provider string) (kt.Connection, error) {
	r.c.note("ConnectionGet")
	return r.tx.ConnectionGet(provider)
}

func (r recordingTx) ConnectionPut(c kt.Connection) error {
	r.c.note("ConnectionPut")
	return r.tx.ConnectionPut(c)
}

func (r recordingTx) ConnectionDelete(provider string) error {
	r.c.note("ConnectionDelete")
	return r.tx.ConnectionDelete(provider)
}

func (r recordingTx) ConnectionList() ([]kt.Connection, error) {
	r.c.note("ConnectionList")
	return r.tx.ConnectionList()
}

func (r recordingTx) InstallationID() (string, error) {
	r.c.note("InstallationID")
	return r.tx.InstallationID()
}

func (r recordingTx) InstallationSet(id string) error {
	r.c.note("InstallationSet")
	return r.tx.InstallationSet(id)
}

func (r recordingTx) SecretGet(name string) (kt.Secret, error) {
	r.c.note("SecretGet")
	return r.tx.SecretGet(name)
}

func (r recordingTx) SecretPut(x kt.Secret) error {
	r.c.note("SecretPut")
	return r.tx.SecretPut(x)
}

func (r recordingTx) SecretDelete(name string) error {
	r.c.note("SecretDelete")
	return r.tx.SecretDelete(name)
}

func (r recordingTx) SecretList() ([]kt.Secret, error) {
	r.c.note("SecretList")
	return r.tx.SecretList()
}

func (r recordingTx) NoticeSent(key, channel string) (int64, error) {
	r.c.note("NoticeSent")
	return r.tx.NoticeSent(key, channel)
}

func (r recordingTx) NoticePut(key, channel string, at int64) error {
	r.c.note("NoticePut")
	return r.tx.NoticePut(key, channel, at)
}

func (r recordingTx) NoticeList() ([]store.Notice, error) {
	r.c.note("NoticeList")
	return r.tx.NoticeList()
}

func (r recordingTx) GrantList(workflow string) ([]kt.Grant, error) {
	r.c.note("GrantList")
	return r.tx.GrantList(workflow)
}

func (r recordingTx) GrantRemove(workflow, item string) (bool, error) {
	r.c.note("GrantRemove")
	return r.tx.GrantRemove(workflow, item)
}

func (r recordingTx) GrantAdd(g kt.Grant) error {
	r.c.note("GrantAdd")
	return r.tx.GrantAdd(g)
}

func (r recordingTx) RepairPut(x kt.Repair) error {
	r.c.note("RepairPut")
	return r.tx.RepairPut(x)
}

func (r recordingTx) RepairList(workflow string) ([]kt.Repair, error) {
	r.c.note("RepairList")
	return r.tx.RepairList(workflow)
}

func (r recordingTx) DeliveryAdd(d *kt.Delivery) error {
	r.c.note("DeliveryAdd")
	return r.tx.DeliveryAdd(d)
}

func (r recordingTx) DeliveryAccepted(workflow, webhook, deliveryID string) (kt.Delivery, error) {
	r.c.note("DeliveryAccepted")
	return r.tx.DeliveryAccepted(workflow, webhook, deliveryID)
}

func (r recordingTx) DeliveryList(workflow string, limit int) ([]kt.Delivery, error) {
	r.c.note("DeliveryList")
	return r.tx.DeliveryList(workflow, limit)
}

func (r recordingTx) DeliveryCounts(workflow string) ([]kt.DeliveryCount, error) {
	r.c.note("DeliveryCounts")
	return r.tx.DeliveryCounts(workflow)
}

func (r recordingTx) DeliveryPrune(workflow, webhook string, status kt.DeliveryStatus, keep int) error {
	r.c.note("DeliveryPrune")
	return r.tx.DeliveryPrune(workflow, webhook, status, keep)
}

func (r recordingTx) DeliveryHeld(workflow, webhook string, limit int) ([]kt.Delivery, error) {
	r.c.note("DeliveryHeld")
	return r.tx.DeliveryHeld(workflow, webhook, limit)
}

func (r recordingTx) DeliveryHeldGet(id int64) (kt.Delivery, error) {
	r.c.note("DeliveryHeldGet")
	return r.tx.DeliveryHeldGet(id)
}

func (r recordingTx) DeliveryHeldCount(workflow, webhook string) (int, int64, error) {
	r.c.note("DeliveryHeldCount")
	return r.tx.DeliveryHeldCount(workflow, webhook)
}

func (r recordingTx) DeliveryHeldWorkflows() ([]string, error) {
	r.c.note("DeliveryHeldWorkflows")
	return r.tx.DeliveryHeldWorkflows()
}

func (r recordingTx) DeliverySettle(d *kt.Delivery) error {
	r.c.note("DeliverySettle")
	return r.tx.DeliverySettle(d)
}

func (r recordingTx) PruneList(kind store.PruneKind, before int64, after store.PruneCursor, limit int) ([]store.PruneRow, error) {
	r.c.note("PruneList")
	return r.tx.PruneList(kind, before, after, limit)
}

func (r recordingTx) PruneBodies(kind store.PruneKind, ids []string, now int64) (int, int64, error) {
	r.c.note("PruneBodies")
	return r.tx.PruneBodies(kind, ids, now)
}

func (r recordingTx) RunIDsNewest(workflow string, version int64, status kt.Status, limit int) ([]string, error) {
	r.c.note("RunIDsNewest")
	return r.tx.RunIDsNewest(workflow, version, status, limit)
}

func (r recordingTx) InputPage(workflow string, p store.Page) ([]kt.Input, error) {
	r.c.note("InputPage")
	return r.tx.InputPage(workflow, p)
}

func (r recordingTx) RunPage(workflow string, p store.Page) ([]kt.Run, error) {
	r.c.note("RunPage")
	return r.tx.RunPage(workflow, p)
}

func (r recordingTx) MutationPage(workflow string, p store.Page) ([]kt.Mutation, error) {
	r.c.note("MutationPage")
	return r.tx.MutationPage(workflow, p)
}

func (r recordingTx) WorkflowTotals(workflow string) (store.Totals, error) {
	r.c.note("WorkflowTotals")
	return r.tx.WorkflowTotals(workflow)
}

func (r recordingTx) InputWindowEnd(workflow string, p store.Page) (store.Pos, bool, error) {
	r.c.note("InputWindowEnd")
	return r.tx.InputWindowEnd(workflow, p)
}
