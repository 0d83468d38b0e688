package engine_test

import (
	"sync"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/control"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// A person's Skip of pending events taken while a consumer's prepare has
// selected them (not yet recorded) stands: the write is never sent and the
// input stays skipped (an attack found the skip undone and the write sent,
// by the run writing back the copies prepare had read).
func TestASkipWhilePrepareHoldsTheSelectionStands(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct{ prepareRead, mutateRead string }{
		"during prepare": {`await ctx.http.request({ method: "GET", url: "%SINK%/read" })`, ""},
		"during mutate":  {"", `await ctx.http.request({ method: "GET", url: "%SINK%/read", kind: "byId" })`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			skipWhileHeld(t, c.prepareRead, c.mutateRead, time.Now)
		})
	}
}

// The same when the Skip's request read the clock before the consumer's
// run began (Control.Do stamps the time a request comes in; it then waits
// for the write transaction): the run prepares again and the skip stands.
// An attack found the run failed as the script's mistake instead
// ("prepare reserved job/a, which is already skipped"), blocked for a
// person with a card blaming the script, because the event's change was
// judged by its time.
func TestASkipFromARequestOlderThanThePrepareStands(t *testing.T) {
	t.Parallel()
	came := time.Now().Add(-time.Second)
	skipWhileHeld(t, `await ctx.http.request({ method: "GET", url: "%SINK%/read" })`, "", func() time.Time { return came })
}

func skipWhileHeld(t *testing.T, prepareRead, mutateRead string, clock func() time.Time) {
	e := newEnv(t)
	var once sync.Once
	skipped := make(chan error, 1)
	e.sink.OnRead = func(path string) {
		if path != "/read" {
			return
		}
		// prepare has peeked the event and waits on this read: a person skips it now.
		once.Do(func() {
			ctl := &control.Control{Store: e.k.Store, Now: clock}
			_, err := ctl.Do(e.ctx(), control.Request{Action: kt.ActSkipPending, Workflow: "held", Topic: "job"})
			skipped <- err
		})
	}
	wf := e.deploy(`export default Keep.workflow({ name: "held", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: { id: "a" } }) } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) {
      const [ev] = await ctx.peek("job")
      if (!ev) return { reservations: [] }
      ` + prepareRead + `
      return { reservations: [{ topic: "job", ids: [ev.messageId] }], data: ev.payload }
    },
    async mutate(ctx, p) { ` + mutateRead + `; await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data }) },
  }) },
})`)
	e.settle()
	select {
	case err := <-skipped:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("prepare never read: the test did not skip")
	}
	if n := len(e.sink.Writes()); n != 0 {
		t.Fatalf("writes at the sink: %d, want 0 (the person skipped it)", n)
	}
	e.noOpenRun(wf)
	if in := e.inputs(wf); len(in) != 1 || in[0].Status != "skipped" {
		t.Fatalf("inputs %+v", in)
	}
}
