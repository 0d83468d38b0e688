package script

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// The tests of this file count round trips with a process-wide counter, so
// none of them is parallel (Go runs the parallel tests after them).

var consumerLimits = Limits{Timeout: 5 * time.Second, MemoryLimit: 64 << 20}

// hostLog is a HostFunc that records the calls it serves.
type hostLog struct {
	calls []string
	serve func(method string, args json.RawMessage) (json.RawMessage, error)
}

func (h *hostLog) call(method string, args json.RawMessage) (json.RawMessage, error) {
	h.calls = append(h.calls, method+" "+string(args))
	return h.serve(method, args)
}

// consumerRun makes prepare and mutate of consumerScript as the engine
// makes them, prepare given answers; it returns the round trips made to
// the worker, prepare's host calls and its result.
func consumerRun(t *testing.T, p *Program, answers []Answer, peekPage string) (trips int64, calls []string, prepared json.RawMessage) {
	t.Helper()
	tools := map[string][]string{"http": {"request"}}
	h := &hostLog{serve: func(m string, a json.RawMessage) (json.RawMessage, error) { return json.RawMessage(peekPage), nil }}
	before := WorkerRoundTrips()
	o, err := p.Invoke(Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "prepare", Args: []json.RawMessage{json.RawMessage(`null`)},
		Tools: tools, Host: h.call, Limits: consumerLimits, Answers: answers})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	write := func(string, json.RawMessage) (json.RawMessage, error) { return nil, ErrSuspend }
	m, err := p.Invoke(Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "mutate", Args: []json.RawMessage{o.Value}, Tools: tools, Host: write, Limits: consumerLimits})
	if err != nil || !m.Suspended {
		t.Fatalf("mutate: %v %+v", err, m)
	}
	return WorkerRoundTrips() - before, h.calls, o.Value
}

// Issue 25: prepare's ctx.peek answered ahead (the step's plan read its
// page) costs no round trip to the worker: a consumer run makes three
// (prepare's invocation; mutate's invocation and its write), not four. The
// host is still asked, in order, and the script sees the very page.
func TestAPeekAnsweredAheadSavesItsRoundTrip(t *testing.T) {
	if InProcess() {
		t.Skip("no worker process: no round trips")
	}
	p := compile(t, consumerScript)
	defer p.Release()
	page := `[{"messageId":"7","payload":{"i":7}}]`
	peek := Answer{Method: "peek", Args: json.RawMessage(`{"topic":"in","limit":1}`), Value: json.RawMessage(page)}
	consumerRun(t, p, nil, page) // the worker and its VM
	for _, c := range []struct {
		name    string
		answers []Answer
		trips   int64
	}{
		{"asked", nil, 4},
		{"answered ahead", []Answer{peek}, 3},
		{"an answer to other arguments", []Answer{{Method: "peek", Args: json.RawMessage(`{"topic":"in","limit":2}`), Value: json.RawMessage(page)}}, 4},
	} {
		trips, calls, prepared := consumerRun(t, p, c.answers, page)
		if trips != c.trips {
			t.Errorf("%s: %d round trips per consumer run, want %d", c.name, trips, c.trips)
		}
		if want := []string{`peek {"topic":"in","limit":1}`}; strings.Join(calls, "|") != strings.Join(want, "|") {
			t.Errorf("%s: the host served %q, want %q", c.name, calls, want)
		}
		if want := `{"reservations":[{"topic":"in","ids":["7"]}],"data":{"i":7}}`; string(prepared) != want {
			t.Errorf("%s: prepare returned %s, want %s", c.name, prepared, want)
		}
	}
}

// An answer is given once: the same call made again is the host's to
// answer (events may have come since).
func TestAnAnswerIsGivenOnce(t *testing.T) {
	p := compile(t, `export default Keep.workflow({
  name: "twice", topics: { "in": {} },
  consumers: { c: Keep.consumer({ subscribe: ["in"],
    async prepare(ctx) { const a = await ctx.peek("in", { limit: 1 }); const b = await ctx.peek("in", { limit: 1 }); return { reservations: [], data: { a, b } } },
    async mutate(ctx, p) {},
  }) },
})`)
	defer p.Release()
	h := &hostLog{serve: func(m string, a json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`["host"]`), nil }}
	before := WorkerRoundTrips()
	o, err := p.Invoke(Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "prepare", Args: []json.RawMessage{json.RawMessage(`null`)}, Host: h.call, Limits: consumerLimits,
		Answers: []Answer{{Method: "peek", Args: json.RawMessage(`{"topic":"in","limit":1}`), Value: json.RawMessage(`["host"]`)}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"reservations":[],"data":{"a":["host"],"b":["host"]}}`; string(o.Value) != want {
		t.Errorf("prepare returned %s, want %s", o.Value, want)
	}
	if len(h.calls) != 2 {
		t.Errorf("the host served %q, want both peeks", h.calls)
	}
	if trips := WorkerRoundTrips() - before; !InProcess() && trips != 2 {
		t.Errorf("%d round trips, want 2 (the invocation, the second peek)", trips)
	}
}

// The host's own answer to a call answered ahead must be the answer given:
// one that differs, or an error, ends the invocation with that error (the
// script went on with a value it should not have had) — never its result.
func TestAnAnswerGivenAheadMustBeTheHosts(t *testing.T) {
	if InProcess() {
		t.Skip("keep's own process asks the host every call")
	}
	p := compile(t, consumerScript)
	defer p.Release()
	answers := []Answer{{Method: "peek", Args: json.RawMessage(`{"topic":"in","limit":1}`), Value: json.RawMessage(`[{"messageId":"7","payload":{"i":7}}]`)}}
	refused := &kt.Error{Class: kt.ClassLogic, Message: "phase violation: not now"}
	for _, c := range []struct {
		name  string
		serve func(string, json.RawMessage) (json.RawMessage, error)
		want  func(error) bool
	}{
		{"another page", func(string, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`[]`), nil },
			func(err error) bool {
				return kt.ClassOf(err) == kt.ClassInternal && strings.Contains(err.Error(), "answered it ahead with something else")
			}},
		{"an error", func(string, json.RawMessage) (json.RawMessage, error) { return nil, refused },
			func(err error) bool { return err == refused }},
	} {
		_, killed0 := WorkerStats()
		o, err := p.Invoke(Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "prepare", Args: []json.RawMessage{json.RawMessage(`null`)},
			Host: c.serve, Limits: consumerLimits, Answers: answers})
		if !c.want(err) {
			t.Errorf("%s: got %+v, %v", c.name, o, err)
		}
		if _, killed := WorkerStats(); killed == killed0 {
			t.Errorf("%s: the worker that gave the script a wrong answer serves on", c.name)
		}
	}
}
