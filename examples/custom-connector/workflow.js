// @ts-check
/// <reference path="./keep.d.ts" />
// The HTTP example again, through a connector declared in keep.toml
// (tickets.open) instead of raw http.request calls:
//
//   go run ./examples/http/service &      # the ticket service on 127.0.0.1:8090
//   cd examples/custom-connector && go run ../../cmd/keep run workflow.js
export default Keep.workflow({
  name: "alerts-to-tickets-custom",
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
        await ctx.tickets.open({ title: `[${prepared.data.host}] ${prepared.data.message}`, alert: prepared.data.id });
      },
    }),
  },
});
