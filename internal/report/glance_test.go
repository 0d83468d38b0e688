package report_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/builtin"
	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/netguard"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqlite"
)

// Time blocked is exact (issue 42): a run that began to wait for a person
// at 10:20 and was decided on at 12:05 counts 40 minutes in the 10:00
// hour, 60 in 11:00 and 5 in 12:00 — not to the run's end (keep carries
// out the decision later). The run blocks and is decided on through the
// engine, on its clock, on a real SQLite file. (Before, the span read ran
// from the run's start to its end, or now when it had not ended: 30
// minutes at 12:00 here, where a person had acted at 12:05.)
func TestTimeBlockedIsFromTheBlockToTheDecision(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	day := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	var clock atomic.Int64
	at := func(h, m int) time.Time { return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	clock.Store(at(10, 0).UnixNano())
	eng := engine.New(engine.Options{Store: st, Registry: connector.NewRegistry(), Now: func() time.Time { return time.Unix(0, clock.Load()).UTC() },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	// The run fails at 10:20: a person must act from then.
	src := `export default Keep.workflow({ name: "feed", topics: { a: {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx) => {
    throw new Error("the feed answered nonsense")
  } } },
  consumers: { c: { subscribe: ["a"], prepare: async (ctx) => ({ reservations: [] }), mutate: async (ctx) => {} } },
})`
	if _, err := control.Deploy(ctx, eng, "feed.js", src, control.DeployOptions{Grant: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.QueueAtStart(ctx, st, "feed", at(10, 0)); err != nil {
		t.Fatal(err)
	}
	clock.Store(at(10, 20).UnixNano())
	for i := 0; i < 20; i++ {
		if did, err := eng.Step(ctx, "feed"); err != nil {
			t.Fatal(err)
		} else if !did {
			break
		}
	}
	open := openRun(t, st, "feed")
	if open.Status != kt.StatusFailedLogic {
		t.Fatalf("the run is %s, want %s", open.Status, kt.StatusFailedLogic)
	}
	if _, err := (&control.Control{Store: st, Now: func() time.Time { return at(12, 5) }}).Do(ctx, control.Request{Action: kt.ActSkip, Run: open.ID}); err != nil {
		t.Fatal(err)
	}
	a, err := report.Activity(ctx, st, "feed", 24, at(12, 30))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	total := 0
	for _, h := range a.Hours {
		got[h.Start] = h.BlockedMinutes
		total += h.BlockedMinutes
	}
	for h, want := range map[int]int{10: 40, 11: 60, 12: 5} {
		if m := got[report.Time(at(h, 0).UnixMilli())]; m != want {
			t.Errorf("%d:00: %d minutes blocked, want %d (all: %v)", h, m, want, got)
		}
	}
	if total != 105 {
		t.Errorf("%d minutes blocked in all, want 105", total)
	}
}

// openStore is a store on a real SQLite file, closed at the test's end.
func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// openRun is workflow wf's unfinished run.
func openRun(t *testing.T, st store.Store, wf string) kt.Run {
	t.Helper()
	var r kt.Run
	if err := st.View(context.Background(), func(tx store.Tx) error {
		var err error
		r, err = tx.RunOpen(wf)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

// The arrows to connectors are the writes (a mutate's calls) and, apart,
// the reads (the other phases'): the issue draws "the connectors and
// targets they write to". A producer's GET and a consumer's prepare GET
// are reads; the consumer's mutate POST is its write, and the method's
// target is where the write goes, not where the reads do.
func TestGraphDrawsWritesApartFromReads(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	set, err := builtin.Build(&connector.Host{Config: config.Config{}, Guard: netguard.New([]string{"api.example.com"})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	eng := engine.New(engine.Options{Store: st, Registry: set.Registry(t.TempDir()), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	src := `export default Keep.workflow({ name: "orders", topics: { job: {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    await ctx.http.request({ method: "GET", url: "https://api.example.com/new" })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { await ctx.http.request({ method: "GET", url: "https://api.example.com/customers" }); return { reservations: [] } },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "https://api.example.com/orders", json: {} }) },
  }) },
})`
	if _, err := control.Deploy(context.Background(), eng, "orders.js", src, control.DeployOptions{Grant: true}); err != nil {
		t.Fatal(err)
	}
	g, err := report.Graph(context.Background(), st, "orders", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range g.Edges {
		if e.Kind != "" {
			got = append(got, e.From+" → "+e.To+" ("+e.Kind+")")
		}
	}
	slices.Sort(got)
	want := []string{"consumer:c → connector:http.request (read)", "consumer:c → connector:http.request (write)", "producer:p → connector:http.request (read)"}
	if !slices.Equal(got, want) {
		t.Fatalf("arrows to connectors %q, want %q", got, want)
	}
	for _, n := range g.Nodes {
		if n.ID == "connector:http.request" && !slices.Equal(n.Targets, []string{"https://api.example.com/orders"}) {
			t.Errorf("the write's target: %v, want https://api.example.com/orders (not the reads')", n.Targets)
		}
	}
}
