// @ts-check
/// <reference path="./keep.d.ts" />
export default Keep.workflow({
  name: "email-to-sheets",

  topics: {
    "email.received": {},
    "row.created": {},
  },

  producers: {
    pollEmail: {
      publishes: ["email.received"],
      schedule: { interval: "5m" },
      handler: async (ctx, state) => {
        const emails = await ctx.gmail.search({ after: state?.cursor });
        for (const e of emails) {
          // Register the external input
          const inputId = ctx.registerInput({
            source: "gmail",
            type: "email",
            id: e.id,
            title: `Email from ${e.from}: "${e.subject}"`
          });

          // Publish event referencing the input
          await ctx.publish("email.received", {
            messageId: e.id,
            inputId,
            payload: { subject: e.subject, from: e.from },
          });
        }
        return { cursor: emails.lastCursor };
      }
    }
  },

  consumers: {
    processEmail: Keep.consumer({
      subscribe: ["email.received"],
      publishes: ["row.created"],

      async prepare(ctx, state) {
        const pending = await ctx.peek("email.received");
        if (pending.length === 0) return { reservations: [], data: {} };
        const event = pending[0];
        return {
          reservations: [{ topic: "email.received", ids: [event.messageId] }],
          data: { messageId: event.messageId, from: event.payload.from, subject: event.payload.subject },
          ui: {
            title: `Add row for ${event.payload.from}`
          }
        };
      },

      async mutate(ctx, prepared) {
        await ctx.sheets.appendRow({
          spreadsheetId: "...",
          values: [prepared.data.from, prepared.data.subject]
        });
      },

      async next(ctx, prepared, mutationResult) {
        if (mutationResult.status === 'applied') {
          // No inputId needed - caused_by inherited from reserved events
          await ctx.publish("row.created", {
            messageId: `row:${prepared.data.messageId}`,
            payload: { rowId: mutationResult.result.rowId }
          });
        }
      },
    })
  }
});
