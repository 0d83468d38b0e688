// Package intake takes in what comes from outside a workflow's handlers:
// events posted through keep's event API (Post) and requests to its
// webhooks (Webhooks: verified, recorded, held until keep can take them,
// their handler run by engine.RunWebhook), both written through the one
// producer writer (transition.WriteProduced), and a person's take or drop
// of held webhook deliveries (ActOnHeld). Control's publish and
// held-delivery rows call it, and keep serve's webhooks listener; it
// never calls control.
package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// APIEvent is one event posted through keep's event API (issue 26):
// POST /api/v1/workflows/{wf}/topics/{topic}/events, keep publish.
type APIEvent struct {
	Workflow, Topic string
	ID              string          // the event's id in the sender's system: posting it again changes nothing
	Title           string          // what the input is, in a line
	Payload         json.RawMessage // the event's payload (JSON; empty: null)
	// sentID is the id as it was sent, when check normalized it (NFC).
	sentID string
}

// Posted is what posting an event did.
type Posted struct {
	Input   string // the input's id
	Event   int64  // the event's id
	Already bool   // the id was posted before: nothing new was written
	Message string
}

// Post registers an input (source api, type the topic) and publishes
// its one event, in one transaction: both exist or neither. Posting the
// same id again to the same topic finds the input and writes nothing. Only
// a topic the active version declares { from: "api" } takes events.
func Post(ctx context.Context, st store.Store, ev APIEvent, now time.Time) (Posted, error) {
	if err := ev.check(); err != nil {
		return Posted{}, err
	}
	// The declaration is read outside the write transaction (it may start
	// a sandbox worker); the transaction checks the version is still the one read.
	var v kt.Version
	if err := st.View(ctx, func(tx store.Tx) error {
		w, err := transition.Workflow(tx, ev.Workflow)
		if err != nil {
			return err
		}
		v, err = tx.VersionGet(ev.Workflow, w.ActiveVersion)
		return err
	}); err != nil {
		return Posted{}, err
	}
	decl, err := script.Declare(v.File, v.Script)
	if err != nil {
		return Posted{}, fmt.Errorf("read the declaration of %s version %s: %w", ev.Workflow, v.Label(), err)
	}
	if err := ev.open(decl); err != nil {
		return Posted{}, err
	}
	var p Posted
	err = st.Update(ctx, func(tx store.Tx) error {
		w, err := transition.Workflow(tx, ev.Workflow)
		if err != nil {
			return err
		}
		if w.ActiveVersion != v.ID {
			return kt.Refuse("workflow %s was deployed while this event was posted (version %s is no longer active); post it again", ev.Workflow, v.Label())
		}
		p, err = ev.commit(tx, v, decl, now.UnixMilli())
		return err
	})
	return p, err
}

// check refuses what the request itself gets wrong, before any reading.
func (ev *APIEvent) check() error {
	bad := func(format string, args ...any) error {
		return &kt.ActionError{Msg: fmt.Sprintf(format, args...), Code: kt.CodeBadInput}
	}
	where := fmt.Sprintf("event for topic %s of %s", ev.Topic, ev.Workflow)
	switch {
	case strings.TrimSpace(ev.ID) == "":
		return bad("%s: it has no id; send the event's id in your system (an order number, a message id): posting the same id again is then harmless", where)
	case strings.Contains(ev.Topic, ":"):
		// The input's key is api:TOPIC:ID: a colon in the topic would let
		// two different events share one key.
		return bad("%s: a topic open to the event API may not contain \":\"; rename the topic in the script", where)
	case !cleanText(ev.ID):
		return bad("%s: the id is not plain text (it has a control character, or bytes that are not UTF-8, which JSON turns into U+FFFD): two different ids would become one; send the id as plain text", where)
	case invisibleEnds(ev.ID):
		return bad("%s %q: the id starts or ends with a space (or an invisible character): %q and %q would look like one id and be two; send the id without it", where, ev.ID, ev.ID, strings.TrimFunc(ev.ID, invisible))
	case !cleanText(ev.Title):
		return bad("%s %q: the title is not plain text (a NUL or other control character, or bytes that are not UTF-8); send it as plain text", where, ev.ID)
	case len(norm.NFC.String(ev.ID)) > kt.MaxIDChars: // the id as stored (below): NFC may lengthen it
		return bad("%s", kt.OverBound(where, "the id has", len(norm.NFC.String(ev.ID)), kt.Bound{Max: kt.MaxIDChars, Unit: "characters"}, "the id names the event in your system; put its data in the payload").Message)
	case strings.TrimSpace(ev.Title) == "":
		return bad("%s %q: it has no title; send one that says what the input is in a line, e.g. `Order 1042 from alice@example.com`", where, ev.ID)
	case len(ev.Title) > kt.MaxTitleChars:
		return bad("%s", kt.OverBound(where, "the title has", len(ev.Title), kt.Bound{Max: kt.MaxTitleChars, Unit: "characters"}, "a title says what the input is in a line; put the rest in the payload").Message)
	case len(ev.Payload) > kt.MaxJSONBytes:
		return bad("%s", kt.OverBound(where, "the payload has", len(ev.Payload), kt.Bound{Max: kt.MaxJSONBytes, Unit: "bytes"}, "keep payloads small and pass references (a URL, a file name)").Message)
	}
	// One id however its letters are composed (issue 38, low): "é" as one
	// code point or as "e" and a combining accent is the same id, the
	// form Unicode calls NFC; the id as sent is kept to find an event
	// posted before ids were normalized (commit).
	ev.sentID, ev.ID = ev.ID, norm.NFC.String(ev.ID)
	if len(ev.Payload) == 0 {
		ev.Payload = json.RawMessage("null")
	}
	if !json.Valid(ev.Payload) {
		return bad("%s %q: the payload is not JSON; send a JSON value (an object such as {\"order\": 1042})", where, ev.ID)
	}
	if d := kt.JSONDepth(ev.Payload); d > kt.MaxPayloadDepth {
		return bad("%s", kt.OverBound(fmt.Sprintf("%s %q", where, ev.ID), "the payload nests", d, kt.Bound{Max: kt.MaxPayloadDepth, Unit: "levels deep"}, fmt.Sprintf("a handler returns values at most %d levels deep, and its consumer could not pass it on; send it flatter", kt.MaxJSONDepth)).Message)
	}
	return nil
}

// open refuses a topic the workflow does not open to the event API.
func (ev *APIEvent) open(decl script.Declaration) error {
	if decl.OpenToAPI(ev.Topic) {
		return nil
	}
	var open []string
	for _, t := range decl.Topics {
		if decl.OpenToAPI(t) {
			open = append(open, t)
		}
	}
	known := "none; declare one in the script's topics as \"NAME\": { from: \"api\" } and deploy"
	if len(open) > 0 {
		known = strings.Join(open, ", ")
	}
	for _, t := range decl.Topics {
		if t == ev.Topic {
			return kt.Refuse("topic %s of %s is written by its handlers, not open to the event API (topics open to it: %s); to post events to it, declare it %q: { from: \"api\" } in the script's topics and deploy", ev.Topic, ev.Workflow, known, ev.Topic)
		}
	}
	return kt.Missing("workflow %s has no topic %q (topics open to the event API: %s)", ev.Workflow, ev.Topic, known)
}

// commit writes the input, its first attempt and its event, and wakes the
// topic's consumer; an id posted before is found and left as it is.
func (ev *APIEvent) commit(tx store.Tx, v kt.Version, decl script.Declaration, ms int64) (Posted, error) {
	key := script.FromAPI + ":" + ev.Topic + ":" + ev.ID
	had, err := tx.InputGetByKey(ev.Workflow, key)
	if errors.Is(err, kt.ErrNotFound) && ev.sentID != "" && ev.sentID != ev.ID {
		// Posted before ids were normalized, as it was sent then.
		had, err = tx.InputGetByKey(ev.Workflow, script.FromAPI+":"+ev.Topic+":"+ev.sentID)
	}
	switch {
	case err == nil:
		e, err := tx.EventGet(ev.Workflow, ev.Topic, had.ID)
		if err != nil {
			return Posted{}, err
		}
		return Posted{Input: had.ID, Event: e.ID, Already: true, Message: fmt.Sprintf("event %s of topic %s in %s was already posted (input %s, event %d, %s): nothing new was written",
			ev.ID, ev.Topic, ev.Workflow, had.ID, e.ID, e.Status)}, nil
	case !errors.Is(err, kt.ErrNotFound):
		return Posted{}, err
	}
	// Through the one producer writer, so an input posted through the
	// event API cannot differ from one a producer registers.
	in := kt.Input{ID: transition.NewID(), Workflow: ev.Workflow, Key: key, Kind: kt.KindInput, Source: script.FromAPI, Type: ev.Topic, ExternalID: ev.ID, Title: ev.Title,
		CurrentAttempt: 1, CreatedBy: transition.CreatedByAPI, LastVersion: v.ID, CreatedAt: ms, UpdatedAt: ms}
	evs, err := transition.WriteProduced(tx, transition.Produced{Workflow: ev.Workflow, Version: v.ID, Consumers: decl.ConsumerOf(), CreatedBy: transition.CreatedByAPI,
		Inputs: []kt.Input{in}, Publishes: []transition.Publish{{Topic: ev.Topic, MessageID: in.ID, InputID: in.ID, Payload: ev.Payload}}, Now: ms})
	if err != nil {
		return Posted{}, err
	}
	e := evs[0]
	return Posted{Input: in.ID, Event: e.ID, Message: fmt.Sprintf("event %s posted to topic %s of %s (input %s, event %d)", ev.ID, ev.Topic, ev.Workflow, in.ID, e.ID)}, nil
}

// invisible says r is a space or a character that shows nothing (a
// zero-width space, a byte order mark: Unicode's format characters).
func invisible(r rune) bool { return unicode.IsSpace(r) || unicode.Is(unicode.Cf, r) }

// invisibleEnds says s starts or ends with an invisible character.
func invisibleEnds(s string) bool { return strings.TrimFunc(s, invisible) != s }

// cleanText says s is UTF-8 text a person can read: no control characters
// (tabs aside) and no U+FFFD, which is what JSON decoding makes of invalid
// bytes and lone surrogates — two different ids would otherwise become one,
// and PostgreSQL refuses a NUL that SQLite stores.
func cleanText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r == utf8.RuneError || (unicode.IsControl(r) && r != '\t') {
			return false
		}
	}
	return true
}
