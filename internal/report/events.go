package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/keep-run/keep/internal/apitype"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// Topics lists a workflow's topics (declared by its active version, and
// any that still hold events) with their counts, and its producers.
func Topics(ctx context.Context, st store.Store, wf string) ([]apitype.Topic, []apitype.Producer, error) {
	topics, producers := []apitype.Topic{}, []apitype.Producer{}
	_, decl, err := activeDeclaration(ctx, st, wf)
	if err != nil {
		return nil, nil, err
	}
	names, writers, consumers := topology(decl)
	err = st.View(ctx, func(tx store.Tx) error {
		counts, err := tx.TopicCounts(wf)
		if err != nil {
			return err
		}
		byName := map[string]store.TopicCount{}
		for _, c := range counts {
			byName[c.Topic] = c
			if !contains(names, c.Topic) {
				names = append(names, c.Topic)
			}
		}
		for _, n := range names {
			c := byName[n]
			t := apitype.Topic{Name: n, Writers: nonNilStrings(writers[n]), Pending: c.Pending, Reserved: c.Reserved, Consumed: c.Consumed, Skipped: c.Skipped}
			if cs := consumers[n]; len(cs) > 0 {
				t.Consumer = cs[0]
			}
			topics = append(topics, t)
		}
		hs, err := tx.HandlerList(wf)
		if err != nil {
			return err
		}
		for _, h := range hs {
			if h.Type == kt.HandlerConsumer {
				continue
			}
			p := apitype.Producer{Name: h.Name, Type: string(h.Type), StateBytes: stateBytes(h.State), NextRunAt: Time(h.NextRunAt)}
			if h.QuietRun != "" {
				// One read per producer whose last polls found nothing new.
				r, err := tx.RunGet(h.QuietRun)
				switch {
				case err == nil:
					p.LastPolledAt, p.QuietPolls, p.QuietSince, p.QuietRun = Time(r.FinishedAt), r.QuietPolls, timeIf(r.QuietSince), r.ID
				case !errors.Is(err, kt.ErrNotFound):
					return err
				}
			}
			producers = append(producers, p)
		}
		return nil
	})
	return topics, producers, err
}

// activeDeclaration is workflow wf's active version and its declaration.
// The declaration is read once per process (the engine read it at deploy
// or at the first run): no sandbox worker per request (issue 25).
func activeDeclaration(ctx context.Context, st store.Store, wf string) (kt.Version, script.Declaration, error) {
	var v kt.Version
	if err := st.View(ctx, func(tx store.Tx) error {
		w, err := tx.WorkflowGet(wf)
		if err != nil {
			return noWorkflow(wf, err)
		}
		v, err = tx.VersionGet(wf, w.ActiveVersion)
		return err
	}); err != nil {
		return v, script.Declaration{}, err
	}
	decl, err := script.Declare(v.File, v.Script)
	if err != nil {
		return v, decl, fmt.Errorf("read the declaration of %s version %s: %w", wf, v.Label(), err)
	}
	return v, decl, nil
}

// topology is who writes and who reads each declared topic.
func topology(d script.Declaration) (names []string, writers, consumers map[string][]string) {
	names = append(names, d.Topics...)
	writers, consumers = map[string][]string{}, map[string][]string{}
	for _, t := range d.Topics {
		if d.OpenToAPI(t) {
			writers[t] = append(writers[t], "the event API")
		}
	}
	for n, h := range d.Producers {
		for _, t := range h.Publishes {
			writers[t] = append(writers[t], "producer "+n)
		}
	}
	for n, h := range d.Webhooks {
		for _, t := range h.Publishes {
			writers[t] = append(writers[t], "webhook "+n)
		}
	}
	for n, h := range d.Consumers {
		for _, t := range h.Publishes {
			writers[t] = append(writers[t], "consumer "+n)
		}
		for _, t := range h.Subscribe {
			consumers[t] = append(consumers[t], n)
		}
	}
	return names, writers, consumers
}

func stateBytes(s json.RawMessage) int {
	if string(s) == "null" {
		return 0
	}
	return len(s)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func nonNilStrings(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

// Events lists one page of a workflow's events, oldest first: of one topic
// ("" for all), in one state ("" for all; see EventStates), after the id
// After, at most Limit (1 to 1000, default 100).
func Events(ctx context.Context, st store.Store, wf string, q apitype.EventQuery) (apitype.EventPage, error) {
	state, limit := q.Status, q.Limit
	f := store.EventFilter{Topic: q.Topic, AfterID: q.After, Limit: limit}
	switch state {
	case "":
	case "pending":
		f.Status, f.Held = kt.EventPending, store.HeldFree
	case "reserved":
		f.Status, f.Held = kt.EventPending, store.HeldReserved
	case "consumed", "skipped":
		f.Status = kt.EventStatus(state)
	default:
		return apitype.EventPage{}, &kt.ActionError{Msg: fmt.Sprintf("no event state %q (pending, reserved, consumed, skipped)", state)}
	}
	if limit < 0 || limit > 1000 {
		return apitype.EventPage{}, &kt.ActionError{Msg: fmt.Sprintf("limit %d: between 1 and 1000", limit)}
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	page := apitype.EventPage{Events: []apitype.Event{}}
	err := st.View(ctx, func(tx store.Tx) error {
		if _, err := tx.WorkflowGet(wf); err != nil {
			return noWorkflow(wf, err)
		}
		evs, err := tx.EventList(wf, f)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			page.Events = append(page.Events, eventRow(tx, ev))
		}
		if len(evs) == f.Limit {
			page.Next = evs[len(evs)-1].ID
		}
		return nil
	})
	return page, err
}

func eventRow(tx store.Tx, ev kt.Event) apitype.Event {
	state := string(ev.Status)
	if ev.Status == kt.EventPending && ev.ReservedBy != "" {
		state = "reserved"
	}
	e := apitype.Event{ID: ev.ID, Topic: ev.Topic, MessageID: ev.MessageID, Status: state, Attempt: ev.Attempt, Payload: ev.Payload,
		CausedBy: []apitype.Cause{}, CreatedAt: Time(ev.CreatedAt), UpdatedAt: Time(ev.UpdatedAt)}
	if state == "reserved" {
		e.ReservedBy = ev.ReservedBy
	}
	for _, id := range ev.CausedBy {
		c := apitype.Cause{ID: id}
		if in, err := tx.InputGet(id); err == nil {
			c.Key, c.Title = in.Key, in.Title
		}
		e.CausedBy = append(e.CausedBy, c)
	}
	return e
}

// Decisions lists the decision log of a workflow, newest first, at most
// limit entries (0: all).
func Decisions(ctx context.Context, st store.Store, wf string, limit int) ([]apitype.Decision, error) {
	out := []apitype.Decision{}
	err := st.View(ctx, func(tx store.Tx) error {
		ds, err := tx.DecisionList(wf, "")
		if err != nil {
			return err
		}
		for i := len(ds) - 1; i >= 0 && (limit <= 0 || len(out) < limit); i-- {
			out = append(out, DecisionRow(ds[i]))
		}
		return nil
	})
	return out, err
}

// Nodes lists the nodes that share the store (none on SQLite), alive as
// keeptype.Node.AliveAt says, each with the workflows it holds.
func Nodes(ctx context.Context, st store.Store, now int64) ([]apitype.NodeView, error) {
	out := []apitype.NodeView{}
	err := st.View(ctx, func(tx store.Tx) error {
		ns, err := tx.NodeList()
		if err != nil {
			return err
		}
		ls, err := tx.LeaseList()
		if err != nil {
			return err
		}
		for _, n := range ns {
			v := apitype.NodeView{ID: n.ID, Addr: n.Addr, StartedAt: Time(n.StartedAt), SeenAt: Time(n.SeenAt), Alive: n.AliveAt(now), Holds: []string{}}
			if n.StoppedAt != 0 {
				v.StoppedAt = Time(n.StoppedAt)
			}
			for _, l := range ls {
				if l.Node == n.ID && l.ExpiresAt > now {
					v.Holds = append(v.Holds, l.Workflow)
				}
			}
			out = append(out, v)
		}
		return nil
	})
	return out, err
}
