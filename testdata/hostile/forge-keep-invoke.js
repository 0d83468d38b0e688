// The prelude's entry point __keep_invoke called by the script itself, with
// forged arguments: once it recorded failed:internal (issue 23, low)
// expect: keep's own
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
      globalThis.__keep_invoke("consumer", "c", "mutate", JSON.stringify([{ data: {} }]), JSON.stringify({ epoch: 99 }), 99)
      return { reservations: [{ topic: "a", ids: [e.messageId] }], data: { n: e.payload.n } }
    },
    async mutate(ctx, p) {
      await ctx.files.write({ path: "hostile.txt", content: "should not be written" })
    },
  }) },
})
