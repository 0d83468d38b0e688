// A host abort inside finally blocks
// expect: phase violation
// refused: consumers.c.mutate can write twice
export default Keep.workflow({
  name: "hostile",
  topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "Tick 1" })
    await ctx.publish("a", { messageId: "1", inputId, payload: { n: 1 } })
    
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"],
    async prepare(ctx, state) {
      const [e] = await ctx.peek("a"); if (!e) return { reservations: [] }
      
      return { reservations: [{ topic: "a", ids: [e.messageId] }], data: { n: e.payload.n } }
    },
    async mutate(ctx, p) {
      try { await ctx.files.list({}) } finally { await ctx.files.write({ path: 'x', content: 'y' }) }
      await ctx.files.write({ path: "hostile.txt", content: "should not be written" })
    },
    async next(ctx, p, r) {
      
    },
  }) },
})
