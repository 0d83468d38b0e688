package script

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// Not parallel: StopWorkers and WorkerStats are process-wide.

func thenScript(prepareBody, mutateBody string) string {
	return `export default Keep.workflow({
  name: "then", topics: { "in": {} },
  consumers: { c: Keep.consumer({ subscribe: ["in"],
    async prepare(ctx) { await ctx.peek("in", { limit: 1 }); ` + prepareBody + `; return { reservations: [{ topic: "in", ids: ["1"] }], data: { n: 1 } } },
    async mutate(ctx, p) { ` + mutateBody + `; await ctx.http.request({ method: "GET", url: "http://127.0.0.1:1/read/" + p.data.n }) },
  }) },
})`
}

// thenInvocation is prepare with mutate as its Then, both served by h,
// Next recording its call in h's log and answering next.
func thenInvocation(h *hostLog, lim Limits, next bool) Invocation {
	tools := map[string][]string{"http": {"request"}}
	mut := Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "mutate", Tools: tools, Host: h.call, Limits: lim}
	return Invocation{Kind: kt.HandlerConsumer, Name: "c", Phase: "prepare", Args: []json.RawMessage{json.RawMessage(`null`)},
		Tools: tools, Host: h.call, Limits: lim, Then: &mut,
		Next: func(v json.RawMessage) bool { h.calls = append(h.calls, "next "+string(v)); return next }}
}

func servePage(m string, a json.RawMessage) (json.RawMessage, error) {
	if m == "peek" {
		return json.RawMessage(`[]`), nil
	}
	return json.RawMessage(`{"status":200}`), nil
}

// Each phase has its own time limit: a prepare and a mutate that each
// take 80% of it (here 3s of 4s) both finish, as two invocations did.
func TestThenEachPhaseHasItsOwnTimeLimit(t *testing.T) {
	p := compile(t, thenScript(`{ const end = Date.now() + 3000; while (Date.now() < end) {} }`, `{ const end = Date.now() + 3000; while (Date.now() < end) {} }`))
	defer p.Release()
	h := &hostLog{serve: servePage}
	o, err := p.Invoke(thenInvocation(h, Limits{Timeout: 4 * time.Second, MemoryLimit: 64 << 20}, true))
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if o.Then == nil || o.ThenErr != nil {
		t.Fatalf("mutate: %+v, %v (host calls %q)", o.Then, o.ThenErr, h.calls)
	}
}

// Next is asked after prepare's calls and before any of mutate's; when it
// says no, none of mutate's calls is served, Outcome.Then stays nil, the
// worker is killed, and the next invocation of the program is served.
func TestThenNextRefusedServesNothingOfMutate(t *testing.T) {
	p := compile(t, thenScript(``, ``))
	defer p.Release()
	for _, next := range []bool{true, false} {
		h := &hostLog{serve: servePage}
		_, killed0 := WorkerStats()
		o, err := p.Invoke(thenInvocation(h, consumerLimits, next))
		_, killed := WorkerStats()
		if err != nil {
			t.Fatalf("next=%v: %v", next, err)
		}
		want := []string{"peek ", "next ", "http.request "}
		if !next {
			want = want[:2]
		}
		if len(h.calls) != len(want) {
			t.Fatalf("next=%v: host calls %q, want %q", next, h.calls, want)
		}
		for i, w := range want {
			if !strings.HasPrefix(h.calls[i], w) {
				t.Fatalf("next=%v: host calls %q, want %q", next, h.calls, want)
			}
		}
		if next && (o.Then == nil || o.ThenErr != nil) {
			t.Fatalf("mutate: %+v %v", o.Then, o.ThenErr)
		}
		if !next && o.Then != nil {
			t.Fatalf("mutate refused but its outcome kept: %+v", o.Then)
		}
		if inWorkers() && !next && killed != killed0+1 {
			t.Errorf("workers killed %d -> %d, want the one that ran the refused mutate", killed0, killed)
		}
	}
}

// keep stopping (StopWorkers) while it serves a call of mutate run in
// prepare's invocation: the invocation ends with ErrStopping as mutate's
// error (the run is recovered at the next start), prepare's value kept.
func TestThenStopWorkersDuringMutate(t *testing.T) {
	workersOnly(t)
	p := compile(t, thenScript(``, ``))
	defer p.Release()
	defer ResumeWorkers()
	h := &hostLog{serve: func(m string, a json.RawMessage) (json.RawMessage, error) {
		if m == "http.request" {
			StopWorkers()
		}
		return servePage(m, a)
	}}
	o, err := p.Invoke(thenInvocation(h, consumerLimits, true))
	if err != nil || o.Then == nil || !errors.Is(o.ThenErr, ErrStopping) {
		t.Fatalf("got %v, then %+v %v; want prepare's value and mutate's ErrStopping", err, o.Then, o.ThenErr)
	}
	if !strings.Contains(string(o.Value), `"ids":["1"]`) {
		t.Fatalf("prepare's value %s", o.Value)
	}
	ResumeWorkers()
	h2 := &hostLog{serve: servePage}
	if o, err := p.Invoke(thenInvocation(h2, consumerLimits, true)); err != nil || o.ThenErr != nil {
		t.Fatalf("after resuming: %v %v", err, o.ThenErr)
	}
}
