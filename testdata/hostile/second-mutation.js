// Two mutations in mutate
// expect: second mutation
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
      ctx.files.write({ path: 'one.txt', content: '1' }); ctx.files.write({ path: 'two.txt', content: '2' })
      await ctx.files.write({ path: "hostile.txt", content: "should not be written" })
    },
    async next(ctx, p, r) {
      
    },
  }) },
})
