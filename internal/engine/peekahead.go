package engine

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// Peeking ahead (issue 25). A consumer's prepare nearly always begins with
// the same ctx.peek: its subscribed topic, the same limit. So the step's
// plan, which reads the handler rows and the oldest pending events in one
// read transaction already, reads the page that peek will read in the same
// transaction, and the run hands it to the sandbox as an answer given
// ahead (script.Invocation.Answers): the worker answers the script's call
// at once, without a round trip to keep (one of a consumer run's four), and
// the call needs no read transaction of its own.
//
// Nothing else changes: the host still serves the call, in the order of the
// script's calls, with its checks, its trace entry and the events it saw
// pending (queueRead), from that page instead of a new read; the sandbox
// checks that the host's answer is the one given. The page is as the plan
// read it, with the handler's row: an event published after it marks the
// consumer dirty after the row the run compares at its commit was read, so
// it is not missed (rowRead), as it is not when published while prepare runs.
//
// What peek to read is learnt: the arguments of the first ctx.peek of the
// handler's last prepare, in the version it ran. A prepare that peeked
// nothing forgets it (its next run reads nothing ahead), so a handler that
// peeks otherwise than it did costs one read in vain at most, then learns.

// peekGuess is what a consumer's last prepare peeked first.
type peekGuess struct {
	version int64
	args    json.RawMessage
	topic   string
	limit   int
}

// peekGuesses holds the guesses by workflow and handler.
type peekGuesses struct{ m sync.Map }

type peekKey struct{ workflow, handler string }

func (g *peekGuesses) get(wf, handler string) (peekGuess, bool) {
	v, ok := g.m.Load(peekKey{wf, handler})
	if !ok {
		return peekGuess{}, false
	}
	return v.(peekGuess), true
}

func (g *peekGuesses) learn(wf, handler string, guess peekGuess) {
	if old, ok := g.get(wf, handler); ok && old.version == guess.version && bytes.Equal(old.args, guess.args) {
		return
	}
	guess.args = bytes.Clone(guess.args)
	g.m.Store(peekKey{wf, handler}, guess)
}

func (g *peekGuesses) forget(wf, handler string) { g.m.Delete(peekKey{wf, handler}) }

// peekAhead is the page read ahead for a run's prepare: the answer to its
// first ctx.peek with exactly args.
type peekAhead struct {
	args   json.RawMessage
	events []kt.Event
}

// readAhead reads, inside the plan's transaction, the page the chosen
// consumer's prepare is expected to peek first; nil when nothing is
// expected of it (not learnt yet, another version, a topic it no longer
// subscribes to).
func (p *stepPlan) readAhead(tx store.Tx, h kt.Handler, guesses *peekGuesses) (*peekAhead, error) {
	if h.Type != kt.HandlerConsumer || guesses == nil {
		return nil, nil
	}
	g, ok := guesses.get(p.wf.Name, h.Name)
	if !ok || g.version != p.wf.ActiveVersion || !slices.Contains(p.prog.Decl.Consumers[h.Name].Subscribe, g.topic) {
		return nil, nil
	}
	evs, _, err := tx.EventsPendingWithin(p.wf.Name, g.topic, g.limit, kt.MaxHostCallBytes/2)
	if err != nil {
		return nil, err
	}
	return &peekAhead{args: g.args, events: evs}, nil
}

// answers is what the sandbox may answer ahead for h's phase: the peek
// read ahead, as queueRead will answer it.
func (h *host) answers() []script.Answer {
	if h.ahead == nil {
		return nil
	}
	page, err := peekPage(h.ahead.events)
	if err != nil {
		return nil
	}
	return []script.Answer{{Method: "peek", Args: h.ahead.args, Value: page}}
}

// peekPage is the answer of ctx.peek and ctx.getByIds: the events as the
// script sees them.
func peekPage(evs []kt.Event) (json.RawMessage, error) {
	out := make([]eventView, 0, len(evs))
	for _, ev := range evs {
		out = append(out, eventView{MessageID: ev.MessageID, Topic: ev.Topic, Payload: ev.Payload, Attempt: ev.Attempt, CreatedAt: ev.CreatedAt})
	}
	return json.Marshal(out)
}

// readAheadFor takes the page read ahead when a call is the one it
// answers: the first ctx.peek of the phase, with exactly its arguments.
func (h *host) readAheadFor(method string, raw json.RawMessage) ([]kt.Event, bool) {
	a := h.ahead
	if a == nil || method != "peek" || !bytes.Equal(a.args, raw) {
		return nil, false
	}
	h.ahead = nil
	return a.events, true
}

// learnPeek notes the first ctx.peek of a prepare for the handler's next
// run (not a dry run's: it sees pinned events as released).
func (h *host) learnPeek(raw json.RawMessage, topic string, limit int) {
	h.peeks++
	if h.peeks == 1 && h.phase == phasePrepare && h.released == "" && h.reads == nil && !h.dry {
		h.e.peekGuesses.learn(h.run.Workflow, h.run.Handler, peekGuess{version: h.run.Version, args: raw, topic: topic, limit: limit})
	}
}

// preparePeeked forgets the handler's guess when its prepare peeked
// nothing: its next run reads nothing ahead.
func (h *host) preparePeeked() {
	if h.peeks == 0 && h.released == "" && h.reads == nil && !h.dry {
		h.e.peekGuesses.forget(h.run.Workflow, h.run.Handler)
	}
}
