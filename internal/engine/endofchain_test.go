package engine_test

import (
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/control"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// An event on a topic no consumer reads ends its chain: its input is done,
// not pending for ever (issue 27: ch 06a's email-to-sheets publishes
// row.created for nobody, and every input stayed pending). A version that
// reads the topic makes the input pending until that consumer is done.
func TestAnEventNobodyReadsEndsItsChain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const flow = `export default Keep.workflow({ name: "chain",
  topics: { "job": {}, "done": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: { id: "a" } })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"], publishes: ["done"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.files.write({ path: "out/" + p.data.id, content: "x" }) },
    async next(ctx, p) { await ctx.publish("done", { messageId: "done:" + p.data.id, payload: {} }) },
  })%READER% },
})`
	wf := e.deploy(strings.Replace(flow, "%READER%", "", 1))
	e.settle()
	if in := e.inputs(wf); len(in) != 1 || in[0].Status != "done" {
		t.Fatalf("with nobody reading done: %+v", in)
	}
	// A major version that reads "done": the event waits for it, so the input does.
	reader := `, d: Keep.consumer({ subscribe: ["done"],
    async prepare(ctx) { const [e] = await ctx.peek("done"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "done", ids: [e.messageId] }], data: {} } },
    async mutate(ctx) { throw new Error("not yet") } })`
	if _, err := control.Deploy(e.ctx(), e.k.Engine, "wf.js", strings.Replace(flow, "%READER%", reader, 1), control.DeployOptions{Kind: kt.DeployMajor, Reprocess: "none"}); err != nil {
		t.Fatal(err)
	}
	if in := e.inputs(wf); len(in) != 1 || in[0].Status != "pending" {
		t.Fatalf("with a consumer of done deployed: %+v", in)
	}
}
