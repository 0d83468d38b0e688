// An error whose message getter throws: said as such, not as out of memory
// expect: could not be read (a getter or a Proxy threw: boom)
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
      const err = new Error("x")
      Object.defineProperty(err, "message", { get() { throw new Error("boom") } })
      throw err
    },
    async mutate(ctx, p) {
      await ctx.files.write({ path: "hostile.txt", content: "should not be written" })
    },
  }) },
})
