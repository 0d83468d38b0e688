package engine_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/keep-run/keep/internal/control"
)

// A version deployed while a producer's run of the version before is
// under way makes the new producer due at once (SPEC §5: on deploy every
// producer and task is due now), whatever the old run's commit writes:
// its next scheduled time must not push the new version's first run an
// interval away.
func TestADeployDuringAProducerRunRunsTheNewProducerAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := func(id string) string {
		return strings.ReplaceAll(`export default Keep.workflow({
  name: "dep", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    await ctx.http.request({ method: "GET", url: "%SINK%/read" })
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "ID", title: "Job ID" })
    await ctx.publish("job", { messageId: "ID", inputId, payload: { id: "ID" } })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) {
      const [e] = await ctx.peek("job")
      if (!e) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload }
    },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data }) },
  }) },
})`, "ID", id)
	}
	var once sync.Once
	deployed := make(chan error, 1)
	e.sink.OnRead = func(path string) {
		if path != "/read" {
			return
		}
		// The first run of v1 waits on its read: a person deploys v2.
		once.Do(func() {
			_, err := control.DeployAndGrant(e.ctx(), e.k.Engine, "wf.js", strings.ReplaceAll(src("b"), "%SINK%", e.sink.URL), control.DeployOptions{})
			deployed <- err
		})
	}
	wf := e.deploy(src("a"))
	e.settle()
	select {
	case err := <-deployed:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("the producer never read: the test did not deploy")
	}
	e.noOpenRun(wf)
	var ids []string
	for _, w := range e.sink.Writes() {
		ids = append(ids, w.Path)
	}
	if len(ids) != 2 || !strings.Contains(strings.Join(ids, " "), "/write/b") {
		t.Fatalf("writes at the sink %v: want a's and b's (v2's producer due at once after its deploy)", ids)
	}
}
