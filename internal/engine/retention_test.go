package engine_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/intake"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
)

// inboxScript registers an input per file of the inbox and publishes an
// event of the same id; its consumer POSTs each event to the sink.
const inboxScript = `export default Keep.workflow({
  name: "feed",
  topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    for (const f of await ctx.files.list({ dir: "inbox", glob: "*.json" })) {
      const id = f.name.replace(".json", "")
      const inputId = ctx.registerInput({ source: "files", type: "file", id, title: "File " + id })
      await ctx.publish("job", { messageId: id, inputId, payload: { id, pad: "` + "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" + `" } })
    }
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) {
      const [e] = await ctx.peek("job")
      if (!e) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload }
    },
    async mutate(ctx, p) {
      await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, timeoutMs: 2000 })
    },
  }) },
})`

// TestPruneKeepsAnEventAPIPostOnce: an event posted through the event
// API, consumed, pruned past the horizon, then posted again with the same
// id: keep finds the old input and writes nothing; the sink saw one write.
func TestPruneKeepsAnEventAPIPostOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(eventScript)
	postOrder(t, e, wf, 1)
	e.settle()
	time.Sleep(20 * time.Millisecond)
	rep, err := e.k.Engine.Prune(e.ctx(), kt.Retention{Horizon: time.Millisecond, Batch: 10}, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Kinds[1].Rows != 1 || rep.Kinds[2].Rows != 1 {
		t.Fatalf("pruned %+v, want the event's payload and the write's bodies", rep.Kinds)
	}
	p, err := intake.Post(e.ctx(), e.k.Store, intake.APIEvent{Workflow: wf, Topic: "order", ID: "order-1", Title: "Order order-1", Payload: json.RawMessage(`{"id":"order-1"}`)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !p.Already {
		t.Fatalf("the same id posted again after the prune: %+v, want already posted", p)
	}
	e.settle()
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("%d writes at the sink, want 1", n)
	}
	ins, err := report.AllInputs(e.ctx(), e.k.Store, wf)
	if err != nil || len(ins) != 1 || ins[0].Status != kt.ItemDone {
		t.Fatalf("inputs after the prune: %+v (%v), want one, done", ins, err)
	}
}

// TestPruneNeverWeakensThePromise (issue 44 #2): work runs, the history
// past a short horizon is pruned, then the producer sees the old files
// again (re-registers the old inputs, re-publishes the old messageIds):
// nothing is written twice at the sink, the inputs still show done, and a
// new file is still written once. Runs on SQLite, and on PostgreSQL with
// KEEP_TEST_ENGINE_STORE=postgres.
func TestPruneNeverWeakensThePromise(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeInbox(t, e, "a", "b", "c")
	wf := e.deploy(inboxScript)
	e.settle()
	if n := len(e.sink.Writes()); n != 3 {
		t.Fatalf("before the prune: %d writes at the sink, want 3", n)
	}
	// Everything finished so far is past a 1 ms horizon once 20 ms passed
	// (keep's clock never steps back).
	time.Sleep(20 * time.Millisecond)
	pol := kt.Retention{Horizon: time.Millisecond, KeepDoneRuns: 1, Batch: 2}
	dry, err := e.k.Engine.Prune(e.ctx(), pol, true)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.k.Engine.Prune(e.ctx(), pol, false)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for i, c := range rep.Kinds {
		counts[c.Kind] = c.Rows
		if c.Rows > 0 && c.Bytes <= 0 {
			t.Errorf("%s: %d rows pruned and 0 bytes", c.Kind, c.Rows)
		}
		if dry.Kinds[i] != c {
			t.Errorf("the dry run said %+v, the prune did %+v", dry.Kinds[i], c)
		}
	}
	// Runs: a producer run and three consumer runs; the newest done run
	// of the version (a consumer's) is spared (KeepDoneRuns 1), and with
	// it its write's params (its replay compares with them). Events: 3,
	// ledger rows: 2 of 3.
	if counts["runs"] != 3 || counts["events"] != 3 || counts["mutations"] != 2 || rep.Spared != 1 {
		t.Fatalf("pruned %v, spared %d; want 3 runs (one of 4 spared), 3 events, 2 ledger rows (the spared run's kept)", counts, rep.Spared)
	}
	if again, err := e.k.Engine.Prune(e.ctx(), pol, false); err != nil || again.Kinds[0].Rows+again.Kinds[1].Rows+again.Kinds[2].Rows != 0 {
		t.Fatalf("a second prune pruned %+v (%v), want nothing", again.Kinds, err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		ev, err := tx.EventGet(wf, "job", "a")
		if err != nil {
			return err
		}
		if string(ev.Payload) != "null" || ev.Status != kt.EventConsumed {
			return fmt.Errorf("event a after the prune: payload %s, status %s; want null, consumed", ev.Payload, ev.Status)
		}
		runs, err := tx.RunList(wf, 0)
		if err != nil {
			return err
		}
		withTrace := 0
		for _, r := range runs {
			if r.Trace != nil {
				withTrace++
			}
		}
		if withTrace != 1 {
			return fmt.Errorf("%d runs of %d kept their trace, want 1 (the newest done run, for the Maintainer's replay)", withTrace, len(runs))
		}
		return nil
	}))

	// The producer polls again: the old inputs are registered again and
	// the old messageIds published again.
	if _, err := runNow(e, wf); err != nil {
		t.Fatal(err)
	}
	e.settle()
	if n := len(e.sink.Writes()); n != 3 {
		t.Fatalf("after the prune and a poll that saw the old files again: %d writes at the sink, want 3 (nothing twice)", n)
	}
	ins, err := report.AllInputs(e.ctx(), e.k.Store, wf)
	if err != nil {
		t.Fatal(err)
	}
	var st []string
	for _, in := range ins {
		st = append(st, in.ExternalID+":"+string(in.Status))
	}
	sort.Strings(st)
	if fmt.Sprint(st) != "[a:done b:done c:done]" {
		t.Fatalf("inputs after the prune: %v, want each done", st)
	}
	// New work still flows, once.
	writeInbox(t, e, "d")
	if _, err := runNow(e, wf); err != nil {
		t.Fatal(err)
	}
	e.settle()
	if n := len(e.sink.Writes()); n != 4 {
		t.Fatalf("a new file after the prune: %d writes, want 4", n)
	}
}

// TestPruneSparesUnfinishedWork: a run blocked on a write whose outcome
// is unknown keeps its trace, its event its payload and its ledger row
// its params, however old: the card and the reconciliation read them.
func TestPruneSparesUnfinishedWork(t *testing.T) {
	t.Parallel()
	e, wf, open := unknownWrite(t)
	time.Sleep(20 * time.Millisecond)
	if _, err := e.k.Engine.Prune(e.ctx(), kt.Retention{Horizon: time.Millisecond, Batch: 10}, false); err != nil {
		t.Fatal(err)
	}
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		r, err := tx.RunGet(open.ID)
		if err != nil {
			return err
		}
		if r.Status.Finished() || r.Trace == nil {
			return fmt.Errorf("the blocked run after a prune: %s, trace %d bytes; want it unfinished with its trace", r.Status, len(r.Trace))
		}
		m, err := tx.MutationByRun(open.ID)
		if err != nil {
			return err
		}
		if len(m.Params) <= 2 {
			return fmt.Errorf("the blocked write's params after a prune: %s", m.Params)
		}
		evs, err := tx.EventsReservedBy(open.ID)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if string(ev.Payload) == "null" {
				return fmt.Errorf("the blocked run's event %s lost its payload", ev.MessageID)
			}
		}
		if len(evs) == 0 {
			return fmt.Errorf("the blocked run of %s holds no event", wf)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
