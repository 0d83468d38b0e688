package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// Chapter 06's controls of a workflow's topics and producers, each one
// transaction with its entry in the decision log.

// resetState forgets what a producer (or task) returned last time: its next
// run starts from scratch. What it registers again is the same input (keys
// are stable) and what it publishes again keeps its event's status (last
// write wins), so nothing already done is done twice.
func resetState(ctx context.Context, st store.Store, wf, handler string, now time.Time) (string, error) {
	var msg string
	err := st.Update(ctx, func(tx store.Tx) error {
		if _, err := transition.Workflow(tx, wf); err != nil {
			return err
		}
		h, err := tx.HandlerGet(wf, handler)
		if errors.Is(err, kt.ErrNotFound) {
			return kt.Missing("workflow %s has no handler %q (see `keep status %s`)", wf, handler, wf)
		}
		if err != nil {
			return err
		}
		if h.Type == kt.HandlerConsumer {
			return kt.Refuse("%s is a consumer: its state is what next returned, and its events say what is left to do; reset a producer's or a task's state", handler)
		}
		if r, err := tx.RunOpen(wf); err == nil && r.Handler == handler {
			return kt.Refuse("%s has a run that is not finished (%s, %s); resolve it first: its commit would write the state again", handler, r.ID, r.Status)
		}
		size := len(h.State)
		h.State, h.Queued = nil, true
		transition.Touch(&h, now.UnixMilli())
		if err := tx.HandlerPut(h); err != nil {
			return err
		}
		msg = fmt.Sprintf("%s %s of %s: state reset (it had %d bytes); it runs now from scratch — inputs it registers again are the same inputs, and events it publishes again keep their status", h.Type, handler, wf, size)
		return transition.LogDecision(ctx, tx, kt.Decision{Workflow: wf, Action: "reset-state", Detail: msg, At: now.UnixMilli()})
	})
	return msg, err
}

// skipPending skips every pending event of a topic that no run holds: its
// consumer will not see them, and their inputs show skipped. Events a run
// holds stay with it (skip that run, or its inputs, instead).
func skipPending(ctx context.Context, st store.Store, wf, topic string, now time.Time) (string, error) {
	var msg string
	err := st.Update(ctx, func(tx store.Tx) error {
		if _, err := transition.Workflow(tx, wf); err != nil {
			return err
		}
		if err := topicHasEvents(tx, wf, topic); err != nil {
			return err
		}
		ms := now.UnixMilli()
		skipped := 0
		for {
			evs, err := tx.EventList(wf, store.EventFilter{Topic: topic, Status: kt.EventPending, Held: store.HeldFree, Limit: 1000})
			if err != nil {
				return err
			}
			if len(evs) == 0 {
				break
			}
			for _, ev := range evs {
				ev.Status, ev.UpdatedAt = kt.EventSkipped, ms
				if err := tx.EventUpdate(ev); err != nil {
					return err
				}
			}
			skipped += len(evs)
		}
		held, err := tx.EventList(wf, store.EventFilter{Topic: topic, Status: kt.EventPending, Held: store.HeldReserved, Limit: 1000})
		if err != nil {
			return err
		}
		msg = fmt.Sprintf("topic %s of %s: %d pending events skipped", topic, wf, skipped)
		if len(held) > 0 {
			msg += fmt.Sprintf("; %d held by a run stay with it (skip that run to skip them)", len(held))
		}
		return transition.LogDecision(ctx, tx, kt.Decision{Workflow: wf, Action: "skip-pending", Detail: msg, At: ms})
	})
	return msg, err
}

// topicHasEvents refuses a topic that has no events at all: a misspelt
// name would otherwise "skip 0 events" and look done.
func topicHasEvents(tx store.Tx, wf, topic string) error {
	counts, err := tx.TopicCounts(wf)
	if err != nil {
		return err
	}
	var names []string
	for _, c := range counts {
		if c.Topic == topic {
			return nil
		}
		names = append(names, c.Topic)
	}
	return kt.Missing("workflow %s has no events in a topic %q (topics with events: %s; see `keep events %s`)", wf, topic, strings.Join(names, ", "), wf)
}
