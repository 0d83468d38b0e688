// @ts-check
/// <reference path="./keep.d.ts" />
// HTTP example: each alert in alerts.json becomes an input, and each alert
// opens exactly one ticket in a local ticket service. The POST carries keep's
// Idempotency-Key; the reconcile probe lets keep find out whether an
// uncertain POST (timeout, reset, 5xx) created the ticket before sending again.
//
//   go run ./examples/http/service &      # the ticket service on 127.0.0.1:8090
//   go run ./cmd/keep run --config examples/http/keep.toml examples/http/workflow.js
//
// keep.toml allows 127.0.0.1:8090: keep refuses this machine's and private
// networks' addresses that keep.toml does not name.
export default Keep.workflow({
  name: "alerts-to-tickets",
  topics: { "alert.raised": {} },

  producers: {
    readAlerts: {
      publishes: ["alert.raised"],
      schedule: { interval: "5m" },
      handler: async (ctx, state) => {
        const { content } = await ctx.files.read({ path: "alerts.json" });
        for (const a of JSON.parse(content)) {
          const inputId = ctx.registerInput({ source: "files", type: "file", id: a.id, title: `Alert on ${a.host}: ${a.message}` });
          await ctx.publish("alert.raised", { messageId: a.id, inputId, payload: a });
        }
      },
    },
  },

  consumers: {
    openTicket: Keep.consumer({
      subscribe: ["alert.raised"],
      async prepare(ctx, state) {
        const [ev] = await ctx.peek("alert.raised", { limit: 1 });
        if (!ev) return { reservations: [] };
        return { reservations: [{ topic: "alert.raised", ids: [ev.messageId] }], data: ev.payload };
      },
      async mutate(ctx, prepared) {
        await ctx.http.request({
          method: "POST",
          url: "http://127.0.0.1:8090/tickets",
          json: { title: `[${prepared.data.host}] ${prepared.data.message}`, alert: prepared.data.id },
          timeoutMs: 5000,
          reconcile: { method: "GET", url: "http://127.0.0.1:8090/tickets/{idempotencyKey}" },
        });
      },
    }),
  },
});
