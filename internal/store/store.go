// Package store defines the one storage seam of keep: every durable state
// transition of the engine is one call to Store.Update, which is one
// transaction, durable before Update returns (a backend may let several
// callers' transactions share one commit, as sqlite's group commit does).
// Backends (sqlite now, postgres later) live in subpackages and must pass
// storetest.Exercise.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// ErrCorrupt says the database cannot be the ledger keep wrote (a corrupt
// page, a file that is not a database, an empty file): keep must stop and
// say so, never go on or start over on it.
var ErrCorrupt = errors.New("the database is corrupt")

// ErrConflict says a conditional write found the row changed by another
// writer (a second node, a stale step): nothing was written.
var ErrConflict = errors.New("the row was changed by another writer")

// ErrEventChanged says EventReserve found the event no longer as the
// reserving run read it: skipped, reserved by another run, a new attempt,
// new content. Nothing was written; the run prepares again.
var ErrEventChanged = errors.New("the event changed since it was read")

// ErrIdentityTaken says MutationInsert found a ledger row with the new
// row's identity already there: nothing was written; the writer looks
// that row up and goes on from it.
var ErrIdentityTaken = errors.New("a ledger row with this identity exists")

// ErrStale says a write made from a copy the writer held (EventSettle,
// HandlerAdvance, MutationPutFrom) found the row changed since: nothing
// was written; the writer reads the rows and writes again.
var ErrStale = errors.New("the row changed since the writer's copy")

// MarkCorrupt wraps err in ErrCorrupt when its text is a database engine's
// word for corruption; backends call it on the errors they return.
func MarkCorrupt(err error) error {
	if err == nil || errors.Is(err, ErrCorrupt) {
		return err
	}
	msg := strings.ToLower(err.Error())
	if strings.Contains(msg, "malformed") || strings.Contains(msg, "file is not a database") || strings.Contains(msg, "database corruption") {
		return fmt.Errorf("%w (%w); keep will not run on it: restore keep.db from a backup", ErrCorrupt, err)
	}
	return err
}

// Store is a transactional ledger store.
type Store interface {
	// Update runs fn in one write transaction; when fn returns nil the
	// transaction is committed durably (fsync) before Update returns —
	// unless ctx is marked NoSync (a write whose loss is harmless).
	Update(ctx context.Context, fn func(Tx) error) error
	// View runs fn in a read-only transaction.
	View(ctx context.Context, fn func(Tx) error) error
	// Stats reports counters kept by the store itself.
	Stats() Stats
	Close() error
}

// Stats are counters a backend keeps about itself.
type Stats struct {
	// Commits is the number of write transactions committed durably. With
	// synchronous=FULL every commit is one fsync of the WAL.
	Commits int64
	// Transactions is the number of Update calls committed. Group commit
	// lets one durable commit carry the transactions of several callers.
	// Updates marked NoSync count here, and in Commits only when a
	// durable write shared their commit.
	Transactions int64
	// RoundTrips counts the statements a client-server backend sent
	// (PostgreSQL: begin and commit included; several writes sent
	// together count once); 0 where not counted (SQLite).
	RoundTrips int64
	// Statements counts the statements an embedded backend ran (SQLite:
	// BEGIN, COMMIT and savepoints included, reads and writes alike); 0
	// where not counted (PostgreSQL counts RoundTrips).
	Statements int64
	// Rereads counts the Views marked ReadsAhead whose function asked for
	// a read it had not named and so ran twice; 0 where not counted.
	Rereads int64
}

// Prefetcher is a Tx that can send reads ahead (PostgreSQL): see Prefetch.
type Prefetcher interface {
	Prefetch(fn func(Tx))
}

// Prefetch names reads a transaction is about to make, by the calls that
// make them: fn's calls are recorded, not made (their answers mean
// nothing), and a backend that can sends those reads ahead, together
// with its next statement that needs an answer, and answers the same
// calls made afterwards from what it got, as long as that is what they
// would read themselves (nothing this transaction wrote since could
// change it). Elsewhere Prefetch does nothing. Only reads: a write in fn
// is not made.
func Prefetch(tx Tx, fn func(Tx)) {
	if p, ok := tx.(Prefetcher); ok {
		p.Prefetch(fn)
	}
}

// mark is a yes-or-no mark a context carries to the store (NoSnapshot,
// ShortRead, NoSync): one key type for them all, each mark its value.
type mark int

const (
	noSnapshotMark mark = iota
	shortReadMark
	noSyncMark
	readsAheadMark
)

func withMark(ctx context.Context, m mark) context.Context { return context.WithValue(ctx, m, true) }

func hasMark(ctx context.Context, m mark) bool {
	v, _ := ctx.Value(m).(bool)
	return v
}

// NoSnapshot marks a View whose reads need not see one snapshot: each may
// see what was committed when it ran (one read alone; reads each checked
// on its own, and checked again by the write that follows). A backend
// that pays for a snapshot with round trips of its own (PostgreSQL: a
// BEGIN and a ROLLBACK) runs such a View without one.
func NoSnapshot(ctx context.Context) context.Context { return withMark(ctx, noSnapshotMark) }

// IsNoSnapshot says a context was marked by NoSnapshot.
func IsNoSnapshot(ctx context.Context) bool { return hasMark(ctx, noSnapshotMark) }

// ShortRead marks a View of a few rows on a hot path (a step's plan): a
// backend whose read connections lose their cached pages at every commit
// (SQLite drops a connection's cache when another connection committed)
// may run it on the connection that commits, while nothing waits to
// commit there, where those pages are warm. A long read must not be
// marked: commits wait for it. Nor may its function call Update (as an
// Update's function may not): that Update would wait for the read to end.
func ShortRead(ctx context.Context) context.Context { return withMark(ctx, shortReadMark) }

// IsShortRead says a context was marked by ShortRead.
func IsShortRead(ctx context.Context) bool { return hasMark(ctx, shortReadMark) }

// ReadsAhead marks a View whose function names, with Prefetch, the reads
// it makes (as far as it can know them) and may be run again: a backend
// that pays for the snapshot's end with a round trip of its own
// (PostgreSQL: the ROLLBACK) sends the end with those reads, in one
// pipeline. If the function then asks for a read it did not name, the
// snapshot is gone: the View runs the function again from the start, in
// a transaction of its own. So the function must set everything it
// returns afresh each time it runs (a step's plan does).
func ReadsAhead(ctx context.Context) context.Context { return withMark(ctx, readsAheadMark) }

// IsReadsAhead says a context was marked by ReadsAhead.
func IsReadsAhead(ctx context.Context) bool { return hasMark(ctx, readsAheadMark) }

// Counts is a summary of the ledgers, read from the tallies the store
// keeps in the transactions that change the rows (issue 44): its cost does
// not grow with the history.
type Counts struct {
	// Runs and Mutations count each workflow's rows by status.
	Runs, Mutations []Tally
	PendingEvents   int
}

// Tally is how many of a workflow's rows are in one status.
type Tally struct {
	Workflow, Status string
	N                int
}

// Pos is a row's place in a list kept newest first: its creation time and
// id (a keyset position, never an offset).
type Pos struct {
	At int64
	ID string
}

// Page selects one page of a list read newest first (InputPage, RunPage,
// MutationPage): rows older than Older (the next page), or newer than
// Newer (the previous page; still returned newest first), or the newest.
type Page struct {
	// Limit bounds the page (≤ 0: 50).
	Limit        int
	Older, Newer *Pos
	// Search narrows inputs to those whose id, key, external id or title
	// contains it (case-insensitive in ASCII), among the SearchWindow
	// inputs from the position on: a search's page reads a bounded number
	// of rows however few match, and goes on from InputWindowEnd.
	Search string
}

// SearchWindow is how many inputs one page of a search reads at most.
const SearchWindow = 10000

// Totals is how many inputs, runs and mutations a workflow has, from the
// tallies.
type Totals struct {
	Inputs, Runs, Mutations int
}

// ErrFenced means a write was refused because the step's lease of its
// workflow is no longer the current one: another node took it over.
var ErrFenced = fmt.Errorf("%w: this node's lease of the workflow was taken over", ErrConflict)

// Fence is what a step holds: the lease of its workflow. Every Update made
// with a context carrying it first checks that the lease is still this
// one (Fenced), so a stale step writes nothing.
type Fence struct {
	Workflow, Node string
	Token          int64
	// Until is when the lease ends on this process's monotonic clock
	// (clock.MonoMs), kept current by the renewals; a step must not start
	// an external call past it. Counted from before the write that
	// granted it, it ends no later than the lease by the database's
	// clock; a step of the wall clock does not move it (issue 44).
	Until *atomic.Int64
}

// Live says the lease has not run out at mono (clock.MonoMs): after a
// pause (SIGSTOP, a VM frozen) the monotonic clock has moved on and it has.
func (f Fence) Live(mono int64) bool { return f.Until == nil || mono < f.Until.Load() }

type fenceKey struct{}

// WithFence carries a step's lease in its context.
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceOf returns the lease a context carries.
func FenceOf(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}

// NoSync marks an Update whose loss in a power cut is harmless: what it
// writes is recomputed by keep as if it had never been written (an empty
// poll's cleared wake-up: the consumer just polls once more after a
// restart). A backend may commit it without waiting for the disk (SQLite:
// no fsync; the next durable commit makes it durable too, the WAL being
// written in order). Nobody outside keep may act on such a write, and no
// write that must survive may be marked: a group of writes is durable as
// soon as one of them is not marked.
func NoSync(ctx context.Context) context.Context { return withMark(ctx, noSyncMark) }

// IsNoSync says whether NoSync marked ctx.
func IsNoSync(ctx context.Context) bool { return hasMark(ctx, noSyncMark) }

type workflowsKey struct{}

// ForWorkflows marks an Update that writes only the leases of these
// workflows and this node's own row of nodes (the scheduler's lease
// transactions and heartbeats): a backend that serializes writers per
// workflow (PostgreSQL) locks just those, instead of every writer.
func ForWorkflows(ctx context.Context, workflows ...string) context.Context {
	return context.WithValue(ctx, workflowsKey{}, workflows)
}

// WorkflowsOf returns what ForWorkflows marked.
func WorkflowsOf(ctx context.Context) ([]string, bool) {
	w, ok := ctx.Value(workflowsKey{}).([]string)
	return w, ok
}

// Fenced wraps an Update's function with the check of the context's lease,
// if it carries one: backends call it in Update, so every durable write of
// a step is conditional on the step's token.
func Fenced(ctx context.Context, fn func(Tx) error) func(Tx) error {
	f, ok := FenceOf(ctx)
	if !ok {
		return fn
	}
	return func(tx Tx) error {
		if err := CheckFence(f, tx.LeaseGet); err != nil {
			return err
		}
		return fn(tx)
	}
}

// CheckFence reads f's workflow's lease with get (LeaseGet, or a backend's
// own read of it) and says whether it is still f: ErrFenced when another
// node took it over or there is none.
func CheckFence(f Fence, get func(workflow string) (kt.Lease, error)) error {
	l, err := get(f.Workflow)
	if err != nil && !errors.Is(err, kt.ErrNotFound) {
		return err
	}
	if err != nil || l.Node != f.Node || l.Token != f.Token {
		return fmt.Errorf("%w (%s: this node holds token %d, the store %d held by %s)", ErrFenced, f.Workflow, f.Token, l.Token, l.Node)
	}
	return nil
}

// EventFilter selects events for EventList.
type EventFilter struct {
	Topic  string         // "" for every topic
	Status kt.EventStatus // "" for every status
	// Held narrows pending events to those a run holds, or to free ones.
	Held Held
	// AfterID pages: only events with a larger id.
	AfterID int64
	// Limit bounds the list (≤ 0: 100).
	Limit int
}

// Held says whether a pending event is reserved by a run.
type Held int

const (
	HeldAny      Held = iota
	HeldReserved      // pending and reserved by a run
	HeldFree          // pending and reserved by none
)

// TopicCount is how many events of a topic are in each state.
type TopicCount struct {
	Topic                                string
	Pending, Reserved, Consumed, Skipped int
}

// HourTally is what a workflow did in a time range, per hour (issue 42: the
// page's activity chart and the drawn workflow's counts of today). Hours
// are the start of their hour, in ms since the epoch.
type HourTally struct {
	// Runs counts runs by the hour they started, handler and status.
	Runs []RunTally
	// Writes counts writes by the hour they were made, connector method and status.
	Writes []WriteTally
	// Inputs counts the inputs registered in each hour.
	Inputs []HourCount
	// Blocked are the waits for a person that overlap the range: from
	// when the run began to wait to when a person acted or the run ended
	// (To 0: it waits still).
	Blocked []BlockedSpan
}

// RunTally is a count of runs.
type RunTally struct {
	Hour    int64
	Handler string
	Status  kt.Status
	N       int
}

// WriteTally is a count of writes.
type WriteTally struct {
	Hour         int64
	Tool, Method string
	Status       kt.MutationStatus
	N            int
}

// HourCount is a count in an hour.
type HourCount struct {
	Hour int64
	N    int
}

// IntakeTally is what came in to a workflow's webhooks and event API
// from a time on (issue 42: the drawn workflow's webhook and API boxes).
type IntakeTally struct {
	// Deliveries counts the deliveries received from then, by webhook and status.
	Deliveries []DeliveryTally
	// Held counts the deliveries held now (whenever received), by webhook.
	Held []DeliveryTally
	// Last is when each webhook asked for received its newest delivery
	// (absent: never).
	Last map[string]int64
	// Posts counts the inputs the event API took from then, by topic.
	Posts []PostTally
}

// DeliveryTally is a count of a webhook's deliveries in one status.
type DeliveryTally struct {
	Webhook string
	Status  kt.DeliveryStatus
	N       int
}

// PostTally is a count of the events posted to a topic.
type PostTally struct {
	Topic string
	N     int
}

// BlockedSpan is a time a run waited for a person.
type BlockedSpan struct {
	RunID, Handler string
	From, To       int64
}

// Tx is the set of operations available inside a transaction. Every Get
// returns kt.ErrNotFound (wrapped) when the row does not exist.
type Tx interface {
	WorkflowGet(name string) (kt.Workflow, error)
	WorkflowList() ([]kt.Workflow, error)
	WorkflowPut(w kt.Workflow) error

	VersionInsert(v *kt.Version) error
	VersionGet(workflow string, id int64) (kt.Version, error)
	VersionList(workflow string) ([]kt.Version, error)

	HandlerGet(workflow, name string) (kt.Handler, error)
	HandlerList(workflow string) ([]kt.Handler, error)
	HandlerPut(h kt.Handler) error
	// HandlerAdvance records a consumer run's end on its handler's row
	// without reading it: the state next returned (nil: unchanged), the
	// wake time, and updated_at moved to now, or one past the stored
	// value when that is not behind now (keep's touch); dirty, queued and
	// the rest stay as stored. A missing row fails the transaction with
	// ErrStale (wrapped), at once or later as EventReserve.
	HandlerAdvance(workflow, name string, state json.RawMessage, wakeAt, now int64) error

	// EventPublish inserts an event, or when (workflow, topic, messageId)
	// exists updates its payload keeping its status (last write wins). It
	// fills e.ID and reports whether the event was created. A publish that
	// changes nothing of the stored event but its time (kt.PublishChanges)
	// writes nothing: e is then the event as stored, its UpdatedAt the
	// stored one's.
	EventPublish(e *kt.Event) (created bool, err error)
	EventGet(workflow, topic, messageID string) (kt.Event, error)
	// EventsPending lists pending events not reserved by any run, oldest first.
	EventsPending(workflow, topic string, limit int) ([]kt.Event, error)
	// EventsPendingWithin is EventsPending that stops reading before the
	// events' payloads and messageIds pass maxBytes (the first event is
	// always read); more says it stopped there.
	EventsPendingWithin(workflow, topic string, limit, maxBytes int) (evs []kt.Event, more bool, err error)
	EventsReservedBy(runID string) ([]kt.Event, error)
	EventsByInput(inputID string) ([]kt.Event, error)
	EventUpdate(e kt.Event) error
	// EventReserve marks event e reserved by run runID at time now, only
	// while it is still as e was read (pending, unreserved or reserved by
	// runID, the same attempt, updated_at, causes and payload); otherwise
	// the transaction fails with ErrEventChanged (wrapped) and writes
	// nothing. A backend
	// may say so at once or at a later statement or its commit, as
	// RunSetIfRev's ErrConflict: one write, no read (the in_flight commit
	// in one round trip). Either way the caller returns the error: a
	// refusal swallowed would let the rest commit where it is said at once
	// (SQLite), and fail the commit where it is held back (PostgreSQL).
	EventReserve(e kt.Event, runID string, now int64) error
	// EventSettle gives event e, reserved by run runID, its final status
	// at time now, only while it is still as the run's copy e (pending,
	// reserved by runID, the same updated_at, attempt and causes: what
	// the run's next publishes descend from); otherwise the transaction
	// fails with ErrStale (wrapped), at once or later as EventReserve.
	EventSettle(e kt.Event, runID string, final kt.EventStatus, now int64) error
	// OldestPending returns the creation time of the oldest pending,
	// unreserved event in any of the topics; ok is false when there is none.
	OldestPending(workflow string, topics []string) (createdAt int64, ok bool, err error)
	CountPending(workflow string) (int, error)
	// EventList lists a workflow's events that f selects, by id (oldest first).
	EventList(workflow string, f EventFilter) ([]kt.Event, error)
	// TopicCounts counts a workflow's events per topic and state.
	TopicCounts(workflow string) ([]TopicCount, error)
	// Tally counts what a workflow did from from to to (ms, to excluded),
	// per hour: each count one indexed range of its table, never its whole
	// history.
	Tally(workflow string, from, to int64) (HourTally, error)
	// BlockedSpanAdd records that a run of workflow waited for a person
	// from b.From to b.To (issue 42: time blocked, exact).
	BlockedSpanAdd(workflow string, b BlockedSpan) error
	// Intake tallies what came in to workflow from from (ms) on: the
	// deliveries of its webhooks, the ones held now, each of webhooks'
	// newest, and the inputs of source apiSource (the event API's) by type
	// (their topic).
	Intake(workflow string, webhooks []string, apiSource string, from int64) (IntakeTally, error)

	InputGet(id string) (kt.Input, error)
	InputGetByKey(workflow, key string) (kt.Input, error)
	InputPut(in kt.Input) error
	InputList(workflow string) ([]kt.Input, error)
	// InputPage lists one page of a workflow's inputs, newest first by
	// (created_at, id).
	InputPage(workflow string, p Page) ([]kt.Input, error)
	// InputWindowEnd returns the position of the SearchWindow-th input
	// from p's position in p's direction (where a search that read them
	// all goes on), ok false when there are fewer.
	InputWindowEnd(workflow string, p Page) (end Pos, ok bool, err error)
	ItemAttemptPut(a kt.ItemAttempt) error
	ItemAttemptList(itemID string) ([]kt.ItemAttempt, error)

	RunGet(id string) (kt.Run, error)
	// RunPut creates a run, or overwrites one whatever its state (seeding,
	// tests); the engine changes an existing run only with RunSetIfRev.
	RunPut(r kt.Run) error
	// RunSetIfRev overwrites run r.ID only while its stored revision is
	// still r.Rev, the one its writer read (like River's
	// JobSetStateIfRunning), and stores revision r.Rev+1; when the run was
	// written since, or does not exist, the transaction fails with
	// ErrConflict (wrapped) and writes nothing: the writer re-reads
	// instead of overwriting. A backend may say so at once, or hold the
	// write back (sqldb.ChangeDeferrer) and fail the transaction's next
	// statement or its commit; either way the caller stops there.
	RunSetIfRev(r kt.Run) error
	RunList(workflow string, limit int) ([]kt.Run, error)
	// RunPage lists one page of a workflow's runs, newest first by
	// (created_at, id); p.Search is not used.
	RunPage(workflow string, p Page) ([]kt.Run, error)
	// RunsOfVersion lists the workflow's runs of one version in one status,
	// the newest first, at most limit: what a deploy replays, read without
	// the rest of the workflow's history.
	RunsOfVersion(workflow string, version int64, status kt.Status, limit int) ([]kt.Run, error)
	// RunsFinishedSince lists the workflow's runs of one version in one
	// status that finished at or after since (ms), the earliest first, at
	// most limit: the runs a deploy's judging has not read yet, found
	// through the index of finished runs (runs_unpruned) without the rest
	// of the history. A run whose bodies were pruned is not listed.
	RunsFinishedSince(workflow string, version int64, status kt.Status, since int64, limit int) ([]kt.Run, error)
	// RunFirstOf returns the workflow's oldest run of one of versions, of
	// one handler type, in one status (kt.ErrNotFound when there is none).
	RunFirstOf(workflow string, versions []int64, handlerType kt.HandlerType, status kt.Status) (kt.Run, error)
	// RunOpen returns the workflow's unfinished run (the one that blocks it).
	RunOpen(workflow string) (kt.Run, error)
	RunsWithStatus(status kt.Status) ([]kt.Run, error)

	MutationGet(id string) (kt.Mutation, error)
	MutationByIdentity(identityKey string) (kt.Mutation, error)
	MutationByRun(runID string) (kt.Mutation, error)
	MutationPut(m kt.Mutation) error
	// MutationInsert creates ledger row m, only while no row has its
	// identity key; otherwise the transaction fails with ErrIdentityTaken
	// (wrapped), at once or later as EventReserve, and writes nothing: a
	// fresh row's identity checked without a read of its own.
	MutationInsert(m kt.Mutation) error
	// MutationPutFrom overwrites ledger row m only while its stored status
	// is still from (the writer's copy's); otherwise, or when there is no
	// such row, the transaction fails with ErrStale (wrapped), at once or
	// later as EventReserve.
	MutationPutFrom(m kt.Mutation, from kt.MutationStatus) error
	MutationList(workflow string) ([]kt.Mutation, error)
	// MutationPage lists one page of a workflow's mutations, newest first
	// by (created_at, id); p.Search is not used.
	MutationPage(workflow string, p Page) ([]kt.Mutation, error)
	MutationsWithStatus(status kt.MutationStatus) ([]kt.Mutation, error)

	// DecisionAdd appends to the decision log (there is no update or delete).
	DecisionAdd(d kt.Decision) error
	// DecisionList lists a workflow's decisions oldest first; with runID,
	// only those on that run or on its mutation.
	DecisionList(workflow, runID string) ([]kt.Decision, error)

	// Counts summarizes the ledgers for metrics.
	Counts() (Counts, error)
	// WorkflowTotals counts a workflow's inputs, runs and mutations.
	WorkflowTotals(workflow string) (Totals, error)

	// Now is the store's clock (ms since the epoch) and whether every
	// node sharing the store reads the same one: the database's clock on
	// PostgreSQL (shared true: what nodes compare, lease expiry and
	// a node's last heartbeat, is stamped and judged by it, never by a
	// node's own clock, which may be an hour off); keep's own time
	// (clock.Now) on SQLite, which one process owns.
	Now() (ms int64, shared bool, err error)
	// LeaseGet reads a workflow's lease (kt.ErrNotFound: none yet).
	LeaseGet(workflow string) (kt.Lease, error)
	// LeasePut writes a workflow's lease (kt.GrantLease decides it).
	LeasePut(l kt.Lease) error
	// LeaseList lists every lease.
	LeaseList() ([]kt.Lease, error)
	// NodePut records a node and when it was last seen.
	NodePut(n kt.Node) error
	// NodeList lists the nodes, by id.
	NodeList() ([]kt.Node, error)
	// NodeForget forgets node n (keeptype.Node.ForgottenAt) unless it was
	// seen since n was read (its seen_at is not n.SeenAt any more: it came
	// back); nothing when there is no such node.
	NodeForget(n kt.Node) error

	// ConnectionGet reads a provider's account (kt.ErrNotFound: none).
	ConnectionGet(provider string) (kt.Connection, error)
	// ConnectionPut writes a provider's account, replacing the one before.
	ConnectionPut(c kt.Connection) error
	// ConnectionDelete forgets a provider's account.
	ConnectionDelete(provider string) error
	// ConnectionList lists every account, by provider.
	ConnectionList() ([]kt.Connection, error)
	// InstallationID is the random id the store was given when it was
	// created; it is mixed into new idempotency keys (engine.IdempotencyKey),
	// so two installations never send one service the same key.
	InstallationID() (string, error)
	// InstallationSet replaces it: keep migrate carries the source's id.
	InstallationSet(id string) error
	// SecretGet reads a named secret (kt.ErrNotFound: none).
	SecretGet(name string) (kt.Secret, error)
	// SecretPut writes a named secret, replacing the one before (its
	// creation time stays; its value, update time and hosts are x's).
	SecretPut(s kt.Secret) error
	// SecretDelete forgets a named secret (kt.ErrNotFound: none).
	SecretDelete(name string) error
	// SecretList lists every secret, by name.
	SecretList() ([]kt.Secret, error)

	// GrantList lists what a person granted a workflow (kt.Grant.Item, in
	// the form of keeptype's grants.go: "http.request GET api.example.com",
	// "sql.exec reports", "tool.method", "source:NAME", or "*").
	GrantList(workflow string) ([]kt.Grant, error)
	// GrantAdd records a grant (a grant made again keeps the first).
	GrantAdd(g kt.Grant) error
	// GrantRemove deletes a workflow's grant of item, reporting whether
	// there was one.
	GrantRemove(workflow, item string) (bool, error)

	// RepairPut writes a repair attempt (insert or update by ID).
	RepairPut(r kt.Repair) error
	// RepairList lists a workflow's repairs, oldest first.
	RepairList(workflow string) ([]kt.Repair, error)

	// NoticeSent reports when a notice (a blocked run's, a digest's) went
	// out on a channel: 0 if it never did.
	NoticeSent(key, channel string) (int64, error)
	// NoticePut records that a notice went out.
	NoticePut(key, channel string, at int64) error
	// NoticeList lists every notice that went out, by key and channel.
	NoticeList() ([]Notice, error)

	// DeliveryAdd records one request to a webhook (fills d.ID). A second
	// accepted delivery of the same workflow, webhook and delivery id is
	// an error: the first stands.
	DeliveryAdd(d *kt.Delivery) error
	// DeliveryAccepted reads the accepted delivery of that id
	// (kt.ErrNotFound: none).
	DeliveryAccepted(workflow, webhook, deliveryID string) (kt.Delivery, error)
	// DeliveryList lists a workflow's newest deliveries, newest first, at
	// most limit (≤ 0: all).
	DeliveryList(workflow string, limit int) ([]kt.Delivery, error)
	// DeliveryCounts counts a workflow's deliveries per webhook and status.
	DeliveryCounts(workflow string) ([]kt.DeliveryCount, error)
	// DeliveryPrune forgets all but the newest keep deliveries of a
	// webhook with one status, never accepted (accepted ones stay: they
	// are what a retry is found by). Per status, so a flood of refused
	// requests, which anyone can send, forgets no failed delivery.
	DeliveryPrune(workflow, webhook string, status kt.DeliveryStatus, keep int) error
	// DeliveryHeld lists a workflow's held deliveries (of one webhook; ""
	// for all), oldest first, at most limit (≤ 0: all), without their
	// requests (as every list of deliveries): DeliveryHeldGet reads one's.
	DeliveryHeld(workflow, webhook string, limit int) ([]kt.Delivery, error)
	// DeliveryHeldGet reads held delivery id with its request
	// (kt.ErrNotFound: no such delivery, or no longer held).
	DeliveryHeldGet(id int64) (kt.Delivery, error)
	// DeliveryHeldCount counts a workflow's held deliveries (of one
	// webhook; "" for all) and the bytes of their requests.
	DeliveryHeldCount(workflow, webhook string) (int, int64, error)
	// DeliveryHeldWorkflows lists the workflows that hold any delivery.
	DeliveryHeldWorkflows() ([]string, error)
	// DeliverySettle writes what became of held delivery d.ID (its
	// status, reason, delivery id, counts, its request forgotten; held
	// again: what it waits for now and why, its request kept — replaced by
	// d.Request when that is not nil)
	// only while it is still held; a delivery that
	// is no longer (another taker settled it) fails the transaction with
	// ErrStale (wrapped), at once or at commit.
	DeliverySettle(d *kt.Delivery) error

	// PruneList lists at most limit rows of kind whose bodies are still
	// kept and that ended before before (runs: finished_at > 0; events
	// and ledger rows: updated_at; deliveries: received_at), past after,
	// oldest first: what the pruner (engine.Prune) judges. It reads no
	// body, only each row's size.
	PruneList(kind PruneKind, before int64, after PruneCursor, limit int) ([]PruneRow, error)
	// PruneBodies drops the bodies of the rows of kind named by ids
	// (runs: trace, prepare and mutation results, pending call; events:
	// payload; ledger rows: params, their result kept; deliveries: the
	// request)
	// and marks them pruned at now, keeping every row and its identity.
	// It returns the rows changed and the bytes of the bodies dropped.
	PruneBodies(kind PruneKind, ids []string, now int64) (rows int, bytes int64, err error)
	// RunIDsNewest lists the ids of a workflow's newest runs in status
	// (of version; 0 for any), newest first, at most limit: the runs the
	// pruner spares whatever their age.
	RunIDsNewest(workflow string, version int64, status kt.Status, limit int) ([]string, error)

	// DueWorkflows lists the workflows that may have work at time now: a
	// dirty or woken consumer, a due or queued producer, an open run waiting
	// for a retry, a person's action or reconciliation.
	DueWorkflows(now int64) ([]string, error)
}

// PruneKind names what the pruner drops bodies of.
type PruneKind string

const (
	PruneRuns       PruneKind = "runs"
	PruneEvents     PruneKind = "events"
	PruneMutations  PruneKind = "mutations"
	PruneDeliveries PruneKind = "deliveries"
)

// PruneKinds lists every kind, in the order the pruner takes them.
var PruneKinds = []PruneKind{PruneRuns, PruneEvents, PruneMutations, PruneDeliveries}

// PruneCursor is where a PruneList stopped: the last row's time and id.
type PruneCursor struct {
	At int64
	ID string
}

// PruneRow is one row PruneList found: its identity, what it belongs to,
// its status, when it ended and the bytes of its bodies.
type PruneRow struct {
	ID       string
	Workflow string
	Version  int64 // runs only
	// Run is the run a ledger row (mutations) belongs to: the pruner
	// keeps a row's params while its run keeps its bodies.
	Run    string
	Status string
	At     int64
	Bytes  int64
}

// Compactor is a Store that can give the disk back after a prune (SQLite:
// incremental vacuum). Compact returns the bytes the file shrank by.
type Compactor interface {
	Compact(ctx context.Context) (freed int64, err error)
}

// Sizer is a Store that can say how many bytes its data takes on disk.
type Sizer interface {
	Size(ctx context.Context) (int64, error)
}

// Notice records that a notice (a blocked run's, a digest's) went out on a
// channel, so that it is not sent again.
type Notice struct {
	Key, Channel string
	SentAt       int64
}
