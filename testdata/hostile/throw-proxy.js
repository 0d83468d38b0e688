// A thrown Proxy whose traps throw: reported, not "never finished"
// expect: could not be read (a getter or a Proxy threw
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
      const trap = () => { throw new Error("trap") }
      throw new Proxy({}, { get: trap, getPrototypeOf: trap, has: trap, ownKeys: trap, getOwnPropertyDescriptor: trap })
    },
    async mutate(ctx, p) {
      await ctx.files.write({ path: "hostile.txt", content: "should not be written" })
    },
  }) },
})
