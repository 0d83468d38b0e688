// A native loop in a producer: a built-in QuickJS polls nothing in (aw43; run with GOMAXPROCS=1 it hung keep before the check called out to Go)
// expect: time limit
export default Keep.workflow({
  name: "hostile",
  topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    Array.prototype.includes.call({ length: 2 ** 53 }, 1)
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
