package engine_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/intake"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// An event posted while the consumer's prepare is under way and finds
// nothing is not stranded: the run that reserved nothing does not clear the
// wake-up the event set, so the consumer runs again and takes it (an attack
// found it pending for good, with the workflow shown idle).
func TestAnEventThatComesInDuringAnEmptyPrepareIsTaken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	eventDuringAnEmptyPrepare(t, e, func() error {
		_, err := intake.Post(e.ctx(), e.k.Store, intake.APIEvent{Workflow: "late", Topic: "job", ID: "e2", Title: "Job e2", Payload: json.RawMessage(`{"id":"e2"}`)}, time.Now())
		return err
	})
}

// The same with a request that began before the consumer's run: keep
// publish's request reads the clock when it comes in (Control.Do), then
// reads the declaration and waits for the write transaction, so the
// event's wake-up may carry a time older than the run it interrupts (as
// may another node's clock). That wake-up must stand all the same: an
// attack found the event pending for good, the consumer clean and the
// workflow shown idle, because the wake-up was judged by its time.
func TestAnEventFromARequestOlderThanTheEmptyPrepareIsTaken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The request came in a second before the consumer's run began.
	came := time.Now().Add(-time.Second)
	ctl := &control.Control{Store: e.k.Store, Now: func() time.Time { return came }}
	eventDuringAnEmptyPrepare(t, e, func() error {
		_, err := ctl.Do(e.ctx(), control.Request{Action: kt.ActPublish, Workflow: "late", Topic: "job",
			Event: intake.APIEvent{ID: "e2", Title: "Job e2", Payload: json.RawMessage(`{"id":"e2"}`)}})
		return err
	})
}

// eventDuringAnEmptyPrepare deploys a consumer of an API topic whose
// prepare, finding nothing, waits on a read at the sink; post runs there,
// committed before prepare returns. The event must be written once and its
// input done.
func eventDuringAnEmptyPrepare(t *testing.T, e *env, post func() error) {
	t.Helper()
	var once sync.Once
	posted := make(chan error, 1)
	e.sink.OnRead = func(path string) {
		if path == "/read" {
			once.Do(func() { posted <- post() })
		}
	}
	wf := e.deploy(`export default Keep.workflow({ name: "late",
  topics: { "job": { from: "api" } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) {
      const [ev] = await ctx.peek("job")
      if (!ev) { await ctx.http.request({ method: "GET", url: "%SINK%/read" }); return { reservations: [] } }
      return { reservations: [{ topic: "job", ids: [ev.messageId] }], data: ev.payload }
    },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data }) },
  }) },
})`)
	e.settle()
	select {
	case err := <-posted:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("the consumer's prepare never read: the test did not post its event")
	}
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink: %d, want 1 (the event posted during an empty prepare was stranded: inputs %+v)", n, e.inputs(wf))
	}
	if in := e.inputs(wf); len(in) != 1 || in[0].Status != "done" {
		t.Fatalf("inputs %+v", in)
	}
}
