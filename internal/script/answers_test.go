package script

import (
	"encoding/json"
	"fmt"
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
func consumerRun(t *testing.T, p *Program, answers []Answer, writes map[string]*kt.ReadsBy, peekPage string) (trips int64, calls []string, prepared json.RawMessage) {
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
	m, err := p.Invoke(Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "mutate", Args: []json.RawMessage{o.Value}, Tools: tools, Host: write, Limits: consumerLimits, Writes: writes})
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
	workersOnly(t)
	p := compile(t, consumerScript)
	defer p.Release()
	page := `[{"messageId":"7","payload":{"i":7}}]`
	peek := Answer{Method: "peek", Args: json.RawMessage(`{"topic":"in","limit":1}`), Value: json.RawMessage(page)}
	consumerRun(t, p, nil, nil, page) // the worker and its VM
	for _, c := range []struct {
		name    string
		answers []Answer
		writes  map[string]*kt.ReadsBy
		trips   int64
	}{
		{"asked", nil, nil, 4},
		{"answered ahead", []Answer{peek}, nil, 3},
		{"an answer to other arguments", []Answer{{Method: "peek", Args: json.RawMessage(`{"topic":"in","limit":2}`), Value: json.RawMessage(page)}}, nil, 4},
		{"answered ahead, the write taken over", []Answer{peek}, httpWrites, 2},
		{"answered ahead, a write rule that calls a POST a read", []Answer{peek}, map[string]*kt.ReadsBy{"http.request": {Arg: "method", Reads: []string{"POST"}}}, 3},
	} {
		trips, calls, prepared := consumerRun(t, p, c.answers, c.writes, page)
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

// httpWrites is what keep's registry tells of http.request.
var httpWrites = map[string]*kt.ReadsBy{"http.request": {Arg: "method", Default: "GET", Reads: []string{"GET", "HEAD"}}}

// Issue 25: mutate's write is taken over without asking keep, and keep is
// still asked, in order; a read is asked, and so is everything after the
// call taken over (keep refuses a second write, and says so).
func TestAWriteIsTakenOverWithoutARoundTrip(t *testing.T) {
	p := compile(t, `export default Keep.workflow({
  name: "w", topics: { "in": {} },
  consumers: { c: Keep.consumer({ subscribe: ["in"],
    async prepare(ctx) { return { reservations: [] } },
    async mutate(ctx, p) {
      const r = await ctx.http.request({ method: "get", url: "http://x/read" })
      await ctx.http.request({ method: "POST", url: "http://x/" + r.id })
      if (p.twice) await ctx.http.request({ method: "PUT", url: "http://x/again" })
    },
  }) },
})`)
	defer p.Release()
	tools := map[string][]string{"http": {"request"}}
	second := &kt.Error{Class: kt.ClassLogic, Message: "phase violation: a second mutation in mutate"}
	for _, twice := range []bool{false, true} {
		h := &hostLog{serve: func(m string, a json.RawMessage) (json.RawMessage, error) {
			switch {
			case strings.Contains(string(a), "/read"):
				return json.RawMessage(`{"id":"7"}`), nil
			case strings.Contains(string(a), "/again"):
				return nil, second
			}
			return nil, ErrSuspend
		}}
		before := WorkerRoundTrips()
		o, err := p.Invoke(Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "mutate", Args: []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"twice":%v}`, twice))},
			Tools: tools, Host: h.call, Limits: consumerLimits, Writes: httpWrites})
		trips := WorkerRoundTrips() - before
		want := []string{`http.request {"method":"get","url":"http://x/read"}`, `http.request {"method":"POST","url":"http://x/7"}`}
		if twice {
			want = append(want, `http.request {"method":"PUT","url":"http://x/again"}`)
		}
		if strings.Join(h.calls, "|") != strings.Join(want, "|") {
			t.Errorf("twice=%v: the host served %q, want %q", twice, h.calls, want)
		}
		switch {
		case !twice && (err != nil || !o.Suspended):
			t.Errorf("the write was not taken over: %+v, %v", o, err)
		case twice && err != second:
			t.Errorf("a second write: got %+v, %v; want keep's refusal", o, err)
		}
		// The invocation, the read's answer, and (twice) the second write's refusal.
		if wantTrips := map[bool]int64{false: 2, true: 3}[twice]; inWorkers() && trips != wantTrips {
			t.Errorf("twice=%v: %d round trips, want %d", twice, trips, wantTrips)
		}
	}
}

// A call taken over must be one the host takes over: a read's answer
// (a bug in keep: the two sides disagree on what writes) ends the
// invocation with an internal error, and its worker.
func TestAWriteTakenOverMustBeTheHosts(t *testing.T) {
	workersOnly(t)
	p := compile(t, consumerScript)
	defer p.Release()
	_, killed0 := WorkerStats()
	o, err := p.Invoke(Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "mutate", Args: []json.RawMessage{json.RawMessage(`{"data":{"i":1}}`)},
		Tools: map[string][]string{"http": {"request"}}, Host: func(string, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{}`), nil },
		Limits: consumerLimits, Writes: httpWrites})
	if kt.ClassOf(err) != kt.ClassInternal || !strings.Contains(fmt.Sprint(err), "took it for a write and keep for a read") {
		t.Errorf("a read's answer to a call taken over: got %+v, %v", o, err)
	}
	if _, killed := WorkerStats(); killed == killed0 {
		t.Error("the worker serves on after keep and it disagreed on a write")
	}
}

// A write taken over that keep refuses (a grant missing, arguments it
// refuses: a user's mistake, not keep's) ends the invocation with keep's
// error, as when the worker asked: nothing the script does after it is
// served (a read, a log line, a throw), and the worker serves on — a
// workflow missing a grant must not cost a process per attempt.
func TestAWriteTakenOverThatKeepRefusesEndsTheInvocationNotTheWorker(t *testing.T) {
	workersOnly(t)
	p := compile(t, `export default Keep.workflow({
  name: "w", topics: { "in": {} },
  consumers: { c: Keep.consumer({ subscribe: ["in"],
    async prepare(ctx) { return { reservations: [] } },
    async mutate(ctx, p) {
      await ctx.http.request({ method: "PATCH", url: "http://x/write" })
      if (p.then === "read") await ctx.http.request({ method: "GET", kind: "byId", url: "http://x/read" })
      if (p.then === "log") console.log("after")
      if (p.then === "throw") throw new Error("after")
      if (p.then === "flood") for (;;) console.log("after")
    },
  }) },
})`)
	defer p.Release()
	tools := map[string][]string{"http": {"request"}}
	refused := &kt.Error{Class: kt.ClassPermission, Message: "ctx.http.request PATCH x is not granted to w"}
	write := `http.request {"method":"PATCH","url":"http://x/write"}`
	invoke := func(then string, serve func(string, json.RawMessage) (json.RawMessage, error)) (*hostLog, Outcome, error) {
		h := &hostLog{serve: serve}
		o, err := p.Invoke(Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "mutate", Args: []json.RawMessage{json.RawMessage(`{"then":"` + then + `"}`)},
			Tools: tools, Host: h.call, Limits: consumerLimits, Writes: httpWrites})
		return h, o, err
	}
	invoke("", func(string, json.RawMessage) (json.RawMessage, error) { return nil, ErrSuspend }) // the worker and its VM
	for _, then := range []string{"", "read", "log", "throw"} {
		_, killed0 := WorkerStats()
		h, o, err := invoke(then, func(string, json.RawMessage) (json.RawMessage, error) { return nil, refused })
		if err != refused {
			t.Errorf("then %q: got %+v, %v; want keep's refusal", then, o, err)
		}
		if strings.Join(h.calls, "|") != write {
			t.Errorf("then %q: the host served %q, want only the write", then, h.calls)
		}
		if _, killed := WorkerStats(); killed != killed0 {
			t.Errorf("then %q: %d sandbox workers killed for a write keep refused", then, killed-killed0)
		}
		// The worker serves the next invocation as it should.
		h, o, err = invoke("", func(string, json.RawMessage) (json.RawMessage, error) { return nil, ErrSuspend })
		if err != nil || !o.Suspended || strings.Join(h.calls, "|") != write {
			t.Errorf("then %q: the next invocation: %+v, %v, the host served %q", then, o, err, h.calls)
		}
	}
	// A script that goes on talking is not waited for: its worker is
	// killed (maxDrained), the error is keep's refusal all the same. (That
	// it is not waited for to its time limit, engine's TestHostileCorpus
	// log-flood tells: its time limit is beyond its settle.)
	_, killed0 := WorkerStats()
	if h, o, err := invoke("flood", func(string, json.RawMessage) (json.RawMessage, error) { return nil, refused }); err != refused || strings.Join(h.calls, "|") != write {
		t.Errorf("a log flood after the refusal: %+v, %v, the host served %q", o, err, h.calls)
	}
	if _, killed := WorkerStats(); killed != killed0+1 {
		t.Errorf("a log flood after the refusal: %d workers killed, want 1", killed-killed0)
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
	if trips := WorkerRoundTrips() - before; inWorkers() && trips != 2 {
		t.Errorf("%d round trips, want 2 (the invocation, the second peek)", trips)
	}
}

// The host's own answer to a call answered ahead must be the answer given:
// one that differs, or an error, ends the invocation with that error (the
// script went on with a value it should not have had) — never its result.
func TestAnAnswerGivenAheadMustBeTheHosts(t *testing.T) {
	workersOnly(t)
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

// A call the worker answered ahead or took over tells keep without
// waiting: that frame waits in the worker's buffer for the next one. When
// the worker then dies — it ends itself out of memory, or keep kills it in
// a native loop past the time limit — keep must still have been told: the
// host serves the call (the run's trace has it, as when it was asked)
// before the invocation fails.
func TestACallNotWaitedOnReachesTheHostWhenTheWorkerDies(t *testing.T) {
	workersOnly(t)
	const oom, loop = `{ const a = new Uint8Array(48 << 20); a.fill(1) }`, `Array.prototype.indexOf.call({ length: 2 ** 53 - 1 }, 1)`
	for name, c := range map[string]struct{ phase, body, want string }{
		"a peek answered ahead, then out of memory": {"prepare", oom, "out of memory"},
		"a peek answered ahead, then a native loop": {"prepare", loop, "time limit"},
		"a write taken over, then out of memory":    {"mutate", oom, "out of memory"},
		"a write taken over, then a native loop":    {"mutate", loop, "time limit"},
	} {
		t.Run(name, func(t *testing.T) {
			p := compile(t, `export default Keep.workflow({
  name: "dies", topics: { "in": {} },
  consumers: { c: Keep.consumer({ subscribe: ["in"],
    async prepare(ctx) { await ctx.peek("in", { limit: 1 }); `+map[string]string{"prepare": c.body}[c.phase]+`; return { reservations: [] } },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "http://127.0.0.1:1/sink" }); `+map[string]string{"mutate": c.body}[c.phase]+` },
  }) },
})`)
			defer p.Release()
			h := &hostLog{serve: func(m string, a json.RawMessage) (json.RawMessage, error) {
				if m == "peek" {
					return json.RawMessage(`[]`), nil
				}
				return nil, ErrSuspend
			}}
			inv := Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: c.phase, Args: []json.RawMessage{json.RawMessage(`null`)},
				Tools: map[string][]string{"http": {"request"}}, Host: h.call, Limits: Limits{Timeout: 300 * time.Millisecond, MemoryLimit: 32 << 20}}
			if c.phase == "prepare" {
				inv.Answers = []Answer{{Method: "peek", Args: json.RawMessage(`{"topic":"in","limit":1}`), Value: json.RawMessage(`[]`)}}
			} else {
				inv.Writes = httpWrites
			}
			_, err := p.Invoke(inv)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want the invocation to fail: %s, got %v", c.want, err)
			}
			if len(h.calls) != 1 || !strings.HasPrefix(h.calls[0], map[string]string{"prepare": "peek ", "mutate": "http.request "}[c.phase]) {
				t.Errorf("the host served %q, want the %s's call the script made before its worker died", h.calls, c.phase)
			}
		})
	}
}
