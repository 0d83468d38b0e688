// @ts-check
/// <reference path="./keep.d.ts" />
// Quick start: every order file dropped into incoming/ becomes an input,
// and each order gets exactly one confirmation file in out/.
// Run it with: go run ./cmd/keep run examples/quickstart/workflow.js
export default Keep.workflow({
  name: "quickstart-orders",
  topics: { "order.received": {} },

  producers: {
    pollOrders: {
      publishes: ["order.received"],
      schedule: { interval: "1m" },
      handler: async (ctx, state) => {
        const files = await ctx.files.list({ dir: "incoming", glob: "*.json" });
        for (const f of files) {
          const { content } = await ctx.files.read({ path: f.path });
          const order = JSON.parse(content);
          const inputId = ctx.registerInput({
            source: "files",
            type: "file",
            id: f.path,
            title: `Order ${order.id} from ${order.customer}: ${order.items.length} item(s)`,
          });
          await ctx.publish("order.received", { messageId: `order:${order.id}`, inputId, payload: order });
        }
        return { filesSeen: files.length };
      },
    },
  },

  consumers: {
    confirmOrder: Keep.consumer({
      subscribe: ["order.received"],
      async prepare(ctx, state) {
        const [ev] = await ctx.peek("order.received", { limit: 1 });
        if (!ev) return { reservations: [], data: {} };
        const o = ev.payload;
        const total = o.items.reduce((sum, i) => sum + i.qty * i.price, 0);
        return {
          reservations: [{ topic: "order.received", ids: [ev.messageId] }],
          data: { id: o.id, customer: o.customer, total },
          ui: { title: `Confirm order ${o.id} for ${o.customer}` },
        };
      },
      async mutate(ctx, prepared) {
        const d = prepared.data;
        await ctx.files.write({
          path: `out/order-${d.id}.json`,
          content: JSON.stringify({ order: d.id, customer: d.customer, total: d.total, status: "confirmed" }, null, 2) + "\n",
        });
      },
      async next(ctx, prepared, mutationResult) {
        ctx.log(`order ${prepared.data.id}: ${mutationResult.status}`);
      },
    }),
  },
});
