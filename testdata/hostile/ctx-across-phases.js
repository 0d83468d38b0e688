// A ctx captured in prepare used in mutate
// expect: not extensible
// refused: ctx is stored in an object's property
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
      globalThis.savedCtx = ctx
      return { reservations: [{ topic: "a", ids: [e.messageId] }], data: { n: e.payload.n } }
    },
    async mutate(ctx, p) {
      await savedCtx.files.write({ path: 'x', content: 'y' })
      await ctx.files.write({ path: "hostile.txt", content: "should not be written" })
    },
    async next(ctx, p, r) {
      
    },
  }) },
})
