package maintainer

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/builtin"
	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/netguard"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqlite"
	"github.com/keep-run/keep/internal/testsink"
)

// failing writes order 7 and fails in prepare on order 8, which has no
// customer (a logic error): the version has done work (the producer's run,
// order 7's write) and a failed run that read the customer first.
const failing = `export default Keep.workflow({
  name: "orders",
  topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    for (const j of [{ id: "7", customer: "ann" }, { id: "8" }]) {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id: j.id, title: "Order " + j.id })
      await ctx.publish("job", { messageId: "job-" + j.id, inputId, payload: j })
    }
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) {
      const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }
      await ctx.http.request({ method: "GET", url: "%SINK%/customers/" + e.payload.id })
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: { id: e.payload.id, who: e.payload.customer.toUpperCase() } }
    },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/orders/" + p.data.id, json: p.data }) },
  }) },
})`

// failedRun deploys failing on a real SQLite store and a real sink, steps
// it until its consumer run fails, and returns a Maintainer on it with the
// failed run and the version it failed on.
func failedRun(t *testing.T) (*Maintainer, kt.Run, kt.Version, string) {
	t.Helper()
	sink := testsink.New()
	t.Cleanup(sink.Close)
	src := strings.ReplaceAll(failing, "%SINK%", sink.URL)
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	set, err := builtin.Build(&connector.Host{Config: config.Config{}, Guard: netguard.New([]string{sink.Host()})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	eng := engine.New(engine.Options{Store: st, Registry: set.Registry(t.TempDir()), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	if _, err := control.Deploy(ctx, eng, "orders.js", src, control.DeployOptions{Grant: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.QueueAtStart(ctx, st, "orders", time.Now()); err != nil {
		t.Fatal(err)
	}
	for {
		did, err := eng.Step(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		if !did {
			break
		}
	}
	var run kt.Run
	var v kt.Version
	if err := st.View(ctx, func(tx store.Tx) error {
		var err error
		if run, err = tx.RunOpen("orders"); err != nil {
			return err
		}
		v, err = tx.VersionGet("orders", run.Version)
		return err
	}); err != nil || run.Status != kt.StatusFailedLogic {
		t.Fatalf("the consumer run: %+v, %v; want failed:logic", run, err)
	}
	if n := len(sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink before a repair: %d, want order 7's", n)
	}
	return &Maintainer{Store: st, Engine: eng, Now: time.Now}, run, v, src
}

// The replay checks of a repair, on a real failed run: dryRun replays the
// failed run on it (writes intercepted, reads answered from the failed
// run's), conclude replays the version's done work on it. A repair that
// still fails, or reads what the failed run did not, is refused by dryRun;
// one that changes done work (order 7's write) is held by conclude;
// a fix is activated. Each refusal or hold fails without its check: the
// other checks hold every case.
func TestARepairsReplayChecks(t *testing.T) {
	for _, c := range []struct {
		name    string
		edit    func(src string) string
		refused string // dryRun's refusal, in part; "" it passes
		status  kt.RepairStatus
	}{
		{name: "the fix is activated", status: kt.RepairActivated, edit: func(src string) string {
			return strings.Replace(src, "e.payload.customer.toUpperCase()", `(e.payload.customer || "unknown").toUpperCase()`, 1)
		}},
		{name: "a repair that still fails", refused: "the failed run still fails", edit: func(src string) string {
			return strings.Replace(src, "e.payload.customer.toUpperCase()", `e.payload.customer.name.toUpperCase()`, 1)
		}},
		{name: "a repair that reads what the failed run did not", refused: "it makes a read the recorded run did not make", edit: func(src string) string {
			return strings.Replace(src, `/customers/" + e.payload.id`, `/customers/all?id=" + e.payload.id`, 1)
		}},
		{name: "a repair that changes done work is held", status: kt.RepairHeld, edit: func(src string) string {
			return strings.Replace(strings.Replace(src, "e.payload.customer.toUpperCase()", `(e.payload.customer || "unknown").toUpperCase()`, 1),
				"json: p.data", "json: { ...p.data, version: 2 }", 1)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, run, v, src := failedRun(t)
			repaired := c.edit(src)
			if repaired == src {
				t.Fatal("the edit changed nothing")
			}
			if why := m.check(v, repaired); why != "" {
				t.Fatalf("the repair fails the checks before the replay: %s", why)
			}
			why := m.dryRun(context.Background(), run, repaired)
			if (why == "") != (c.refused == "") || !strings.Contains(why, c.refused) {
				t.Fatalf("dryRun answered %q; want a refusal saying %q", why, c.refused)
			}
			if c.refused != "" {
				t.Logf("refused: %s", why)
				return
			}
			rec := kt.Repair{ID: "r-" + run.ID, Workflow: "orders", RunID: run.ID, Attempt: 1, FromVersion: v.ID}
			if err := m.conclude(context.Background(), rec, v, repaired, engine.UnseenReport{}); err != nil {
				t.Fatal(err)
			}
			var got []kt.Repair
			if err := m.Store.View(context.Background(), func(tx store.Tx) error {
				var err error
				got, err = tx.RepairList("orders")
				return err
			}); err != nil || len(got) != 1 || got[0].Status != c.status {
				t.Fatalf("the repair ended %+v (%v); want %s", got, err, c.status)
			}
		})
	}
}
