package transition

import (
	"encoding/json"

	"github.com/google/uuid"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// NewID makes the id of a new run, item or ledger row: a UUIDv7, so ids
// sort by the time they were made. Every writer of a new row takes it here.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// Publish is one ctx.publish (or a posted event) buffered until commit.
type Publish struct {
	Topic     string
	MessageID string
	InputID   string
	Payload   json.RawMessage
}

// Produced is what a producer-like step registered and published: a
// producer run, an event posted through the event API (intake.Post), a
// webhook's delivery. WriteProduced is the one place it is written, so
// the three cannot differ in what an input and its events are.
type Produced struct {
	Workflow string
	Version  int64
	// Consumers maps each topic to the consumer that subscribes to it
	// (script.Declaration.ConsumerOf of the version written): those of
	// the topics published to are woken.
	Consumers map[string]string
	CreatedBy string // the run's id, or CreatedByAPI, CreatedByWebhook
	// Fresh names the inputs this step creates, which get their first
	// attempt; nil: those created by CreatedBy (a run's id is its own).
	Fresh     map[string]bool
	Inputs    []kt.Input
	Publishes []Publish
	Now       int64
}

// WriteProduced writes, inside the caller's transaction, new and changed
// inputs (a new one with its first attempt) and the events published, each
// caused by its input in the input's current attempt, and marks the
// topics' consumers dirty. It returns the events as written.
func WriteProduced(tx store.Tx, p Produced) ([]kt.Event, error) {
	attempts := map[string]int{}
	for _, in := range p.Inputs {
		if err := PutItem(tx, in); err != nil {
			return nil, err
		}
		if isNew := p.Fresh[in.ID]; isNew || (p.Fresh == nil && in.CreatedBy == p.CreatedBy) {
			if err := tx.ItemAttemptPut(kt.ItemAttempt{ItemID: in.ID, Attempt: 1, Status: kt.ItemPending, Version: p.Version, StartedAt: p.Now, UpdatedAt: p.Now}); err != nil {
				return nil, err
			}
		}
		attempts[in.ID] = in.CurrentAttempt
	}
	evs, _, err := PublishAll(tx, p, func(q Publish) ([]string, int, error) {
		attempt, ok := attempts[q.InputID]
		if !ok {
			in, err := tx.InputGet(q.InputID)
			if err != nil {
				return nil, 0, err
			}
			attempt = in.CurrentAttempt
		}
		return []string{q.InputID}, attempt, nil
	})
	return evs, err
}

// PublishAll writes p's publishes (its inputs are not its to write), each
// caused as cause says, and marks the consumers of the topics dirty. It
// returns the events as written, and the consumers it marked.
func PublishAll(tx store.Tx, p Produced, cause func(Publish) ([]string, int, error)) ([]kt.Event, map[string]bool, error) {
	wf, createdBy, now := p.Workflow, p.CreatedBy, p.Now
	dirty := map[string]bool{}
	evs := make([]kt.Event, 0, len(p.Publishes))
	for _, q := range p.Publishes {
		causedBy, attempt, err := cause(q)
		if err != nil {
			return nil, nil, err
		}
		ev := kt.Event{Workflow: wf, Topic: q.Topic, MessageID: q.MessageID, Payload: q.Payload, CreatedBy: createdBy,
			CausedBy: causedBy, Attempt: attempt, CreatedAt: now, UpdatedAt: now}
		if _, err := tx.EventPublish(&ev); err != nil {
			return nil, nil, err
		}
		evs = append(evs, ev)
		if c, ok := p.Consumers[q.Topic]; ok {
			dirty[c] = true
		}
	}
	return evs, dirty, MarkDirty(tx, wf, dirty, now)
}

// MarkDirty marks the named handlers of wf dirty: each has events to read.
func MarkDirty(tx store.Tx, wf string, names map[string]bool, now int64) error {
	for n := range names {
		h, err := tx.HandlerGet(wf, n)
		if err != nil {
			return err
		}
		h.Dirty = true
		Touch(&h, now)
		if err := tx.HandlerPut(h); err != nil {
			return err
		}
	}
	return nil
}
