// Reaching for process
// expect: 'process' is not defined
// refused: process does not exist in keep's sandbox
export default Keep.workflow({
  name: "hostile",
  topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    process.exit(1)
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "Tick 1" })
    await ctx.publish("a", { messageId: "1", inputId, payload: { n: 1 } })
    
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"],
    async prepare(ctx, state) {
      const [e] = await ctx.peek("a"); if (!e) return { reservations: [] }
      
      return { reservations: [{ topic: "a", ids: [e.messageId] }], data: { n: e.payload.n } }
    },
    async mutate(ctx, p) {
      
      await ctx.files.write({ path: "hostile.txt", content: "should not be written" })
    },
    async next(ctx, p, r) {
      
    },
  }) },
})
