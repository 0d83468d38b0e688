package engine_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/intake"
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
	if _, err := intake.Post(e.ctx(), e.k.Store, intake.APIEvent{Workflow: wf, Topic: "order", ID: id, Title: "Order " + id, Payload: payload}, time.Now()); err != nil {
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
// at the sink, on SQLite, and reports what keep.db's pages grow by.
//
// The polls take the path a due schedule takes: the producer is queued
// (as its schedule's due time does, with no decision row: RunNow would
// log a person's "run-now" each time, which a scheduled poll does not)
// and the scheduler runs it. A poll that finds nothing new is folded into
// its handler's run of such polls (a counter and the last trace), so a
// poll has no per-unit row to multiply: the first of them costs a row
// (B/quiet-row: the trace with the feed's answer once), and the first folded ones
// once more the pages the row is rewritten into (B/polls-first, up to
// the middle of the b.N polls); each folded one after that what keep.db
// grows by (B/poll, over the second half: 0 when the pages are reused). The
// benchmark fails if the polls were not folded into one run: it must not
// measure whole polls that no longer happen. An event costs a row set
// each, whole inside the horizon (B/event) and pruned past it
// (B/event-pruned). A year — a 1-minute poller (525,600 polls) plus 1,000
// events a day (365,000) — is then
//
//	no retention: polls-first + 525,600 × poll + 365,000 × event
//	[retention] days = 14: polls-first + 525,600 × poll + 14,000 × event + 351,000 × event-pruned
//
// (the run of quiet polls is rewritten by every poll, so it is never past
// the horizon, and the 200 done runs kept whole are inside the 14 days'
// 14,000 events). Run it with -benchtime=300x: sizes, not timings, are
// its figures.
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
	poll := func(wf string) {
		if err := e.k.QueueProducers(e.ctx(), wf); err != nil {
			b.Fatal(err)
		}
		e.settle()
	}
	events := e.deploy(eventScript)
	e.settle()
	poller := e.deploy(pollScript)
	w0, s0 := len(e.sink.Writes()), size()
	b.ResetTimer()
	e.settle() // the poller's first poll, at its deploy: the first quiet one
	s1 := size()
	half := b.N / 2
	for i := 0; i < half; i++ {
		poll(poller)
	}
	sHalf := size()
	for i := half; i < b.N; i++ {
		poll(poller)
	}
	s2 := size()
	b.StopTimer()
	if quiet := quietRuns(b, e, poller, "poll"); len(quiet) != 1 || quiet[0].QuietPolls != int64(b.N)+1 {
		b.Fatalf("runs of polls that found nothing new: %+v, want one of %d (the polls were not folded)", quiet, b.N+1)
	}
	prune()
	s3 := size()
	b.StartTimer()
	for i := 0; i < b.N; i++ {
		postOrder(b, e, events, i)
		e.settle()
	}
	s4 := size()
	prune()
	s5 := size()
	b.StopTimer()
	if n := len(e.sink.Writes()) - w0; n != b.N {
		b.Fatalf("%d writes at the sink for %d events", n, b.N)
	}
	n := float64(b.N)
	// The first folded polls grow keep.db once (the row rewritten needs
	// a second copy of its pages while the old one is freed); after that
	// the pages are reused. What grows with the polls is the second half's.
	first, folded := float64(sHalf-s0), float64(s2-sHalf)/float64(b.N-half)
	event, eventPruned := float64(s4-s3)/n, float64(s5-s3)/n
	const polls, eventsYear, days = 525_600.0, 365_000.0, 14.0
	pollsYear := first + polls*folded
	before := pollsYear + eventsYear*event
	windowEvents := days * 1000
	after := pollsYear + windowEvents*event + (eventsYear-windowEvents)*eventPruned
	b.ReportMetric(float64(s1-s0), "B/quiet-row")
	b.ReportMetric(first, "B/polls-first")
	b.ReportMetric(folded, "B/poll")
	b.ReportMetric(float64(s3-s0), "B/polls-pruned")
	b.ReportMetric(event, "B/event")
	b.ReportMetric(eventPruned, "B/event-pruned")
	b.ReportMetric(before/1e9, "GB/year-kept-all")
	b.ReportMetric(after/1e9, "GB/year-14d")
}
