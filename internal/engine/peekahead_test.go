package engine_test

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// twoJobs is hookScript whose producer publishes two jobs, a and b.
func twoJobs() string {
	return strings.Replace(hookScript("", ""), `await ctx.publish("job", { messageId: "a", inputId, payload: { id: "a" } })`,
		`await ctx.publish("job", { messageId: "a", inputId, payload: { id: "a" } })
    await ctx.publish("job", { messageId: "b", inputId, payload: { id: "b" } })`, 1)
}

// peekEntries are the ctx.peek entries of a run's trace, as "phase outcome".
func peekEntries(t *testing.T, r kt.Run) []string {
	t.Helper()
	var tr struct{ Entries []kt.TraceEntry }
	if err := json.Unmarshal(r.Trace, &tr); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range tr.Entries {
		if e.Method == "peek" {
			out = append(out, e.Phase+" "+e.Kind+" "+e.Outcome)
		}
	}
	return out
}

// Issue 25: a consumer's prepare peeks first what it peeked at its last
// run, so the step's plan reads that page and the sandbox answers the peek
// without a round trip to the worker, and the sandbox takes mutate's write
// over without asking (keep is told, and captures it), and mutate runs in
// prepare's invocation (script.Invocation.Then): once the peek is learnt
// (here at the empty poll after the deploy) a run makes two round trips
// (the invocations of prepare with mutate, and of next), not five. What
// the run does, reserves, sends and traces is the same. The round trips
// are this keep's own (its sandbox runtime's, issue 41).
func TestAConsumersPeekIsReadAheadByTheStep(t *testing.T) {
	e := newEnv(t)
	wf := e.deploy(twoJobs())
	// The first step is the consumer's, dirty since the deploy: an empty
	// poll, whose prepare asks for its peek and so learns it.
	before := e.k.Sandbox.WorkerRoundTrips()
	if _, err := e.k.Engine.Step(e.ctx(), wf); err != nil {
		t.Fatal(err)
	}
	poll := e.k.Sandbox.WorkerRoundTrips() - before
	stepUntilPending(t, e, wf, 2)
	var trips []int64
	for _, job := range []string{"a", "b"} {
		before := e.k.Sandbox.WorkerRoundTrips()
		if did, err := e.k.Engine.Step(e.ctx(), wf); err != nil || !did {
			t.Fatalf("the consumer's step: did %v, %v", did, err)
		}
		trips = append(trips, e.k.Sandbox.WorkerRoundTrips()-before)
		r := lastRun(t, e, wf)
		if r.Status != kt.StatusCommitted || r.Handler != "c" {
			t.Fatalf("run %s %s in %s: %s", r.Handler, r.Status, r.Phase, r.ErrorMessage)
		}
		want := map[string]string{"a": "prepare call 2 events", "b": "prepare call 1 events"}[job]
		if got := peekEntries(t, r); len(got) != 1 || got[0] != want {
			t.Errorf("run of job %s: its trace has the peeks %q, want [%q]", job, got, want)
		}
	}
	if ws := e.sink.Writes(); len(ws) != 2 || ws[0].Path != "/write/a" || ws[1].Path != "/write/b" {
		t.Fatalf("writes at the sink: %+v", ws)
	}
	for _, ev := range e.events(wf, "job") {
		if ev.Status != kt.EventConsumed {
			t.Fatalf("event %s is %s", ev.MessageID, ev.Status)
		}
	}
	if !script.InProcess() && !script.Wasm() && (poll != 2 || trips[0] != 2 || trips[1] != 2) {
		t.Fatalf("round trips to the sandbox worker: %d in the first, empty poll (want 2: prepare and its peek), %v per consumer run (want [2 2]: the peek answered ahead, mutate run with prepare, the write taken over without asking)", poll, trips)
	}
}

// peekThen is hookScript whose prepare peeks job, and when it has one runs
// body before it reserves it.
func peekThen(body string) string {
	return strings.Replace(hookScript("", ""), `if (!e) return { reservations: [] }`, `if (!e) return { reservations: [] }
      `+body, 1)
}

// A prepare whose peek was answered ahead and whose worker then dies (out
// of memory: the worker ends itself; a native loop past the time limit:
// keep kills it) fails as it did when the peek was asked: its trace still
// has the peek (keep served it, from the page read ahead), before the
// failure. The worker told keep of the peek without waiting: that frame
// must not die with the worker.
func TestAPeekAnsweredAheadIsTracedWhenTheWorkerDies(t *testing.T) {
	if script.InProcess() {
		t.Skip("no worker process")
	}
	for name, c := range map[string]struct{ body, want string }{
		"out of memory": {`{ const a = new Uint8Array(64 << 20); a.fill(1) }`, "out of memory"},
		"native loop":   {`Array.prototype.indexOf.call({ length: 2 ** 53 - 1 }, 1)`, "time limit"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			if c.want == "out of memory" {
				e = newEnvWith(t, roomyPolicy)
			}
			wf := e.deploy(peekThen(c.body))
			// The empty poll after the deploy learns the peek.
			if _, err := e.k.Engine.Step(e.ctx(), wf); err != nil {
				t.Fatal(err)
			}
			stepUntilPending(t, e, wf, 1)
			if _, err := e.k.Engine.Step(e.ctx(), wf); err != nil {
				t.Fatal(err)
			}
			r := lastRun(t, e, wf)
			if r.Handler != "c" || r.Status == kt.StatusCommitted || !strings.Contains(r.ErrorMessage, c.want) {
				t.Fatalf("run %s %s: %q, want a failure saying %q", r.Handler, r.Status, r.ErrorMessage, c.want)
			}
			if got := peekEntries(t, r); len(got) != 1 || got[0] != "prepare call 1 events" {
				t.Errorf("the failed run's trace has the peeks %q, want [\"prepare call 1 events\"] (the peek it made before it died)", got)
			}
			if ws := e.sink.Writes(); len(ws) != 0 {
				t.Errorf("writes at the sink: %+v", ws)
			}
		})
	}
}

// A page answered ahead is the script's own copy, as an asked one is: a
// prepare that mutates it and peeks again sees the stored events, and a
// payload of HTML characters, line separators, NUL, astral characters and
// deep nesting (100 levels) reaches the script and the sink byte for byte as published.
func TestAPageAnsweredAheadIsTheScriptsOwnCopy(t *testing.T) {
	e := newEnv(t)
	src := strings.Replace(hookScript("", ""), `payload: { id: "a" }`, `payload: { id: "a", s: "<>&\u2028\u2029\u0000é😀", deep: Array.from({ length: 100 }).reduce((d) => [d], 0) }`, 1)
	src = strings.Replace(src, `const [e] = await ctx.peek("job")
      if (!e) return { reservations: [] }`, `const page = await ctx.peek("job")
      const was = JSON.stringify(page)
      if (page.length) { page[0].payload.s = "mutated"; page[0].messageId = "nope"; page.push({ messageId: "x" }) }
      const again = await ctx.peek("job")
      if (JSON.stringify(again) !== was) throw new Error("the second peek saw " + JSON.stringify(again).slice(0, 200))
      const [e] = again
      if (!e) return { reservations: [] }`, 1)
	wf := e.deploy(src)
	if _, err := e.k.Engine.Step(e.ctx(), wf); err != nil { // the empty poll learns the peek
		t.Fatal(err)
	}
	stepUntilPending(t, e, wf, 1)
	if did, err := e.k.Engine.Step(e.ctx(), wf); err != nil || !did {
		t.Fatalf("the consumer's step: did %v, %v", did, err)
	}
	r := lastRun(t, e, wf)
	if r.Status != kt.StatusCommitted || r.Handler != "c" {
		t.Fatalf("run %s %s in %s: %s", r.Handler, r.Status, r.Phase, r.ErrorMessage)
	}
	if got := peekEntries(t, r); strings.Join(got, "|") != "prepare call 1 events|prepare call 1 events" {
		t.Errorf("the run's peeks: %q", got)
	}
	ws := e.sink.Writes()
	if len(ws) != 1 {
		t.Fatalf("writes at the sink: %+v", ws)
	}
	var body struct {
		S    string          `json:"s"`
		Deep json.RawMessage `json:"deep"`
	}
	if err := json.Unmarshal(ws[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if want := "<>&\u2028\u2029\u0000é😀"; body.S != want {
		t.Errorf("the sink got s = %q, want %q", body.S, want)
	}
	if want := strings.Repeat("[", 100) + "0" + strings.Repeat("]", 100); string(body.Deep) != want {
		t.Errorf("the sink got deep = %.80s…, want 100 levels", body.Deep)
	}
}

// Mutate runs in prepare's invocation (script.Invocation.Then), but none of
// its calls is served before prepare's value is checked: a selection the
// engine refuses (here a topic the consumer does not subscribe to) fails
// the run as the script's mistake, with mutate's read never made and its
// write never captured, and the next run of the workflow is served (the
// worker that ran the refused mutate is not used again).
func TestMutateWithPrepareIsNotServedWhenPrepareIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var reads atomic.Int32
	e.sink.OnRead = func(string) { reads.Add(1) }
	src := strings.Replace(strings.Replace(hookScript("", ""), `async prepare(ctx) {`, `async prepare(ctx, state) {`, 1), `return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload }`,
		`return { reservations: [{ topic: state && state.fixed ? "job" : "other", ids: [e.messageId] }], data: e.payload }`, 1)
	src = strings.Replace(src, `async mutate(ctx, p) {`, `async mutate(ctx, p) {
      await ctx.http.request({ method: "GET", url: "%SINK%/read", kind: "byId" })`, 1)
	if src == hookScript("", "") {
		t.Fatal("the script was not changed")
	}
	wf := e.deploy(src)
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, `topic "other"`) {
		t.Fatalf("run %s: %q, want failed:logic naming the topic", r.Status, r.ErrorMessage)
	}
	if n := reads.Load(); n != 0 || len(e.sink.Writes()) != 0 {
		t.Fatalf("mutate of a refused selection was served: %d reads, %d writes at the sink", n, len(e.sink.Writes()))
	}
	// The consumer's state says the selection is right now: the retry
	// prepares again, and mutate reads and writes once.
	must(t, e.k.Store.Update(e.ctx(), func(tx store.Tx) error {
		h, err := tx.HandlerGet(wf, "c")
		if err != nil {
			return err
		}
		h.State = []byte(`{"fixed":true}`)
		return tx.HandlerPut(h)
	}))
	e.resolve(r.ID, kt.ResolveTryAgain)
	e.settle()
	e.noOpenRun(wf)
	if n := reads.Load(); n != 1 || len(e.sink.Writes()) != 1 {
		t.Fatalf("after the fix: %d reads, %d writes at the sink, want 1 and 1", n, len(e.sink.Writes()))
	}
}
