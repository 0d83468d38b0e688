package engine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

func prepareScript(ret string) string {
	return `export default Keep.workflow({
  name: "prep",
  topics: { "a": {}, "b": {} },
  producers: {
    p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx) => {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "Tick 1" })
      await ctx.publish("a", { messageId: "1", inputId, payload: {} })
    } },
    q: { publishes: ["b"], schedule: { interval: "1h" }, handler: async (ctx) => {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "2", title: "Tick 2" })
      await ctx.publish("b", { messageId: "2", inputId, payload: {} })
    } },
  },
  consumers: {
    c: Keep.consumer({ subscribe: ["a"], async prepare(ctx) {
      const [e] = await ctx.peek("a"); if (!e) return { reservations: [] }
      ` + ret + `
    } }),
    d: Keep.consumer({ subscribe: ["b"], async prepare(ctx) { return { reservations: [] } } }),
  },
})`
}

func TestReservationsAreChecked(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ ret, want string }{
		"unsubscribed topic": {`return { reservations: [{ topic: "b", ids: ["2"] }] }`, `topic "b", which consumer c does not subscribe to`},
		"missing event":      {`return { reservations: [{ topic: "a", ids: ["nope"] }] }`, "a/nope, which does not exist"},
		"not an array":       {`return { reservations: "a" }`, "reservations must be an array"},
		"bad ids":            {`return { reservations: [{ topic: "a", ids: [1] }] }`, "must be a messageId string"},
		"not an object":      {`return 42`, "must return an object"},
		"nothing":            {`return`, "prepare returned nothing"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			wf := e.deploy(prepareScript(c.ret))
			e.settle()
			r := e.open(wf)
			if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, c.want) {
				t.Fatalf("run %s %s: %s (want %q)", r.Handler, r.Status, r.ErrorMessage, c.want)
			}
			// Nothing stays reserved by the failed run.
			for _, ev := range e.events(wf, "a") {
				if ev.ReservedBy != "" {
					t.Fatalf("event %s reserved by %s", ev.MessageID, ev.ReservedBy)
				}
			}
		})
	}
}

func TestWakeAtIsClamped(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		wake     string
		min, max time.Duration
	}{
		"too soon": {"Date.now() + 10", 29 * time.Second, 31 * time.Second},
		"too late": {"Date.now() + 7 * 86400000", 23*time.Hour + 59*time.Minute, 24*time.Hour + time.Minute},
		"in range": {"Date.now() + 3600000", 59 * time.Minute, 61 * time.Minute},
		"iso date": {"new Date(Date.now() + 120000).toISOString()", 110 * time.Second, 130 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			wf := e.deploy(strings.Replace(prepareScript(`return { reservations: [] }`), `if (!e) return { reservations: [] }`, `return { reservations: [], wakeAt: `+c.wake+` }`, 1))
			start := time.Now()
			e.settle()
			var h kt.Handler
			_ = e.k.Store.View(e.ctx(), func(tx storeTx) error {
				var err error
				h, err = tx.HandlerGet(wf, "c")
				return err
			})
			got := time.UnixMilli(h.WakeAt).Sub(start)
			if got < c.min || got > c.max {
				t.Fatalf("wakeAt in %s, want between %s and %s", got, c.min, c.max)
			}
		})
	}
}

func TestFailureInsideMutateKeepsTheSelectionPinned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := strings.Replace(manyScript("pinned", 1), `await ctx.files.write({ path: "pinned/" + p.data.i, content: "x" })`,
		`const r = await ctx.files.read({ path: "template.txt" }); await ctx.files.write({ path: "pinned/" + p.data.i, content: r.content })`, 1)
	wf := e.deploy(src)
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusApproval || r.ErrorClass != kt.ClassPrecondition || r.Phase != kt.PhaseMutating {
		t.Fatalf("run %s %s %s: %s", r.Status, r.ErrorClass, r.Phase, r.ErrorMessage)
	}
	if ev := e.events(wf, "a"); ev[0].ReservedBy != r.ID {
		t.Fatalf("the selection was released: reserved by %q", ev[0].ReservedBy)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "files", "template.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.resolve(r.ID, "try-again")
	e.settle()
	e.noOpenRun(wf)
	b, err := os.ReadFile(filepath.Join(e.dir, "files", "pinned", "0"))
	if err != nil || string(b) != "hello" {
		t.Fatalf("written %q %v", b, err)
	}
	// The retry used the same PrepareResult.
	for _, x := range e.runs(wf) {
		if x.RetryOf == r.ID && x.Status != "committed" {
			t.Fatalf("retry %+v", x)
		}
	}
}

// A run whose prepare reserved nothing commits at once: next does not run
// (issue 24 #6; docs/scripts.md says so), and the run is not stored (an
// empty poll is not listed, issue 27), though prepare's wakeAt is kept.
func TestNextDoesNotRunWhenPrepareReservedNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(`export default Keep.workflow({ name: "idle", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx) => {} } },
  consumers: { c: Keep.consumer({ subscribe: ["a"],
    async prepare(ctx) { return { reservations: [{ topic: "a", ids: [] }], wakeAt: Date.now() + 3600000 } },
    async next(ctx) { throw new Error("next ran with nothing reserved") } }) } })`)
	// A deploy makes every consumer dirty: c runs once, and finds nothing.
	e.settle()
	e.noOpenRun(wf)
	for _, r := range e.runs(wf) {
		if r.Handler == "c" {
			t.Fatalf("a run of c that reserved nothing was stored: %+v", r)
		}
	}
	var h kt.Handler
	if err := e.k.Store.View(e.ctx(), func(tx storeTx) error {
		var err error
		h, err = tx.HandlerGet(wf, "c")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if h.Dirty || h.WakeAt < time.Now().Add(30*time.Minute).UnixMilli() {
		t.Fatalf("handler after the run: dirty %v wakeAt %d", h.Dirty, h.WakeAt)
	}
}
