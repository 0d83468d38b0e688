package engine_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// pollScript polls a feed every minute and finds nothing new (its state
// holds the newest id it saw): issue 44's "producer polling a 53 KB feed".
const pollScript = `export default Keep.workflow({
  name: "poller",
  topics: { "item": {} },
  producers: { poll: { publishes: ["item"], schedule: { interval: "1m" }, handler: async (ctx, state) => {
    const r = await ctx.http.request({ method: "GET", url: "%SINK%/feed" })
    const newest = r.json.items[0].id
    return { newest }
  } } },
})`

// eventScript takes events through the event API and its consumer POSTs
// each: issue 44's "an event API post + its consumer's POST".
const eventScript = `export default Keep.workflow({
  name: "events",
  topics: { "order": { from: "api" } },
  consumers: { c: Keep.consumer({ subscribe: ["order"],
    async prepare(ctx) {
      const [e] = await ctx.peek("order")
      if (!e) return { reservations: [] }
      return { reservations: [{ topic: "order", ids: [e.messageId] }], data: e.payload }
    },
    async mutate(ctx, p) {
      await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, timeoutMs: 5000 })
    },
  }) },
})`

// postOrder posts order n through the event API.
func postOrder(b testing.TB, e *env, wf string, n int) {
	b.Helper()
	id := fmt.Sprintf("order-%d", n)
	payload, _ := json.Marshal(map[string]any{"id": id, "customer": fmt.Sprintf("customer-%d", n), "amount": n * 3,
		"note": "a note of about a hundred bytes, as an order carries: what, who, how much, and why"})
	if _, err := engine.PostEvent(e.ctx(), e.k.Store, engine.APIEvent{Workflow: wf, Topic: "order", ID: id, Title: "Order " + id, Payload: payload}, time.Now()); err != nil {
		b.Fatal(err)
	}
}

// feed53KB is a feed of 100 items, 53 KB of JSON.
func feed53KB() []byte {
	type item struct {
		ID, Title, Link, Summary string
	}
	var items []item
	for i := 0; i < 100; i++ {
		items = append(items, item{ID: fmt.Sprintf("item-%03d", 100-i), Title: fmt.Sprintf("Title of item %d", i), Link: fmt.Sprintf("https://example.com/items/%d", i),
			Summary: strings.Repeat("lorem ipsum dolor sit amet ", 17)})
	}
	b, _ := json.Marshal(map[string]any{"items": items})
	return b
}

// BenchmarkYearOfWork (issue 44 #5) generates history: b.N polls of a
// 53 KB feed that find nothing new and b.N events published and written
// at the sink, on SQLite. It reports the bytes keep.db grows by per poll
// and per event while kept whole, what each keeps once pruned (the rows
// that make work idempotent), and the arithmetic of a year — a 1-minute
// poller plus 1,000 events a day — with no retention (before issue 44)
// and under the default one ([retention] days = 14). Run it with
// -benchtime=300x: sizes, not timings, are its figures.
func BenchmarkYearOfWork(b *testing.B) {
	e := newEnv(b)
	e.sink.Feed = feed53KB()
	sz, ok := e.k.Store.(store.Sizer)
	if !ok {
		b.Skip("the store cannot tell its size (PostgreSQL): the figures are SQLite's")
	}
	size := func() int64 {
		n, err := sz.Size(e.ctx())
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	prune := func() {
		time.Sleep(5 * time.Millisecond)
		if _, err := e.k.Engine.Prune(e.ctx(), kt.Retention{Horizon: time.Millisecond, KeepDoneRuns: 0, Batch: 200}, false); err != nil {
			b.Fatal(err)
		}
	}
	poller, events := e.deploy(pollScript), e.deploy(eventScript)
	e.settle()
	prune()
	w0, s0 := len(e.sink.Writes()), size()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := runNow(e, poller); err != nil {
			b.Fatal(err)
		}
		e.settle()
	}
	s1 := size()
	prune()
	s2 := size()
	for i := 0; i < b.N; i++ {
		postOrder(b, e, events, i)
		e.settle()
	}
	s3 := size()
	prune()
	s4 := size()
	b.StopTimer()
	if n := len(e.sink.Writes()) - w0; n != b.N {
		b.Fatalf("%d writes at the sink for %d events", n, b.N)
	}
	n := float64(b.N)
	poll, pollPruned := float64(s1-s0)/n, float64(s2-s0)/n
	event, eventPruned := float64(s3-s2)/n, float64(s4-s2)/n
	const polls, eventsYear, days = 525_600.0, 365_000.0, 14.0
	before := polls*poll + eventsYear*event
	windowPolls, windowEvents := days*1440, days*1000
	after := windowPolls*poll + (polls-windowPolls)*pollPruned + windowEvents*event + (eventsYear-windowEvents)*eventPruned
	b.ReportMetric(poll, "B/poll")
	b.ReportMetric(pollPruned, "B/poll-pruned")
	b.ReportMetric(event, "B/event")
	b.ReportMetric(eventPruned, "B/event-pruned")
	b.ReportMetric(before/1e9, "GB/year-kept-all")
	b.ReportMetric(after/1e9, "GB/year-14d")
}
