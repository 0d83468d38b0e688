package engine_test

import (
	"strings"
	"testing"
)

// selScript: one input publishes job/a and job2/b; the consumer c
// subscribes to both; prepare is body (state is the consumer's state).
func selScript(body string) string {
	return `export default Keep.workflow({ name: "sel", topics: { "job": {}, "job2": {} },
  producers: { p: { publishes: ["job", "job2"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: { id: "a" } })
    await ctx.publish("job2", { messageId: "b", inputId, payload: { id: "b" } }) } } },
  consumers: { c: Keep.consumer({ subscribe: ["job", "job2"],
    async prepare(ctx, state) { ` + body + ` },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data }) },
    async next(ctx, p, r) { return { done: true } },
  }) },
})`
}

// Selections prepare may make, checked against the copies it read or read
// again: each ends as SPEC §4 says, with the write sent once or the
// script's mistake explained.
func TestPreparesSelectionsEndAsSpecSays(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body string
		writes     int
		failed     string // "" : no open run; else a text of the blocked run's error
	}{
		{"same id twice", `if (state && state.done) return { reservations: [] }
      const [e] = await ctx.peek("job"); const [f] = await ctx.peek("job2"); if (!e || !f) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId, e.messageId] }, { topic: "job2", ids: [f.messageId] }], data: e.payload }`, 1, ""},
		{"two topics, one listed twice", `if (state && state.done) return { reservations: [] }
      const [e] = await ctx.peek("job"); const [f] = await ctx.peek("job2"); if (!e || !f) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId] }, { topic: "job2", ids: [f.messageId] }, { topic: "job", ids: [e.messageId] }], data: e.payload }`, 1, ""},
		{"an id never read", `if (state && state.done) return { reservations: [] }
      const n = await ctx.peek("job2"); if (n.length == 0) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: ["a"] }, { topic: "job2", ids: ["b"] }], data: { id: "a" } }`, 1, ""},
		{"one read, one never read", `if (state && state.done) return { reservations: [] }
      const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId] }, { topic: "job2", ids: ["b"] }], data: e.payload }`, 1, ""},
		{"an id of the other topic", `if (state && state.done) return { reservations: [] }
      const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }
      return { reservations: [{ topic: "job2", ids: [e.messageId] }], data: e.payload }`, 0, "does not exist"},
		{"an id getByIds read done", `if (!(state && state.done)) {
        const [e] = await ctx.peek("job"); const [f] = await ctx.peek("job2"); if (!e || !f) return { reservations: [] }
        return { reservations: [{ topic: "job", ids: [e.messageId] }, { topic: "job2", ids: [f.messageId] }], data: e.payload } }
      const [d] = await ctx.getByIds("job", ["a"])
      if (!d) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: ["a"] }], data: { id: "again" } }`, 1, "already"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			wf := e.deploy(selScript(c.body))
			e.settle()
			if n := len(e.sink.Writes()); n != c.writes {
				t.Fatalf("writes %d, want %d", n, c.writes)
			}
			if c.failed == "" {
				e.noOpenRun(wf)
				if in := e.inputs(wf); len(in) != 1 || in[0].Status != "done" {
					t.Fatalf("inputs %+v", in)
				}
				return
			}
			r := e.open(wf)
			if !strings.Contains(r.ErrorMessage, c.failed) {
				t.Fatalf("blocked run %s: %q, want it to say %q", r.Status, r.ErrorMessage, c.failed)
			}
			t.Logf("blocked: %s: %s", r.Status, r.ErrorMessage)
		})
	}
}
