// @ts-check
/// <reference path="./keep.d.ts" />
// The quick start's tests: run them with
//   keep test examples/quickstart/workflow.test.js
// Nothing is read from incoming/ or written to out/: the files connector
// answers as each case says, and keep records the writes it would make.
const order = (id, customer, items) => JSON.stringify({ id, customer, items });

export default Keep.test({
  workflow: "./workflow.js",
  cases: {
    "each order gets one confirmation": {
      answers: {
        "files.list": [{ args: { dir: "incoming" }, answer: [{ path: "incoming/order-1.json", name: "order-1.json" }, { path: "incoming/order-2.json", name: "order-2.json" }] }],
        "files.read": [
          { args: { path: "incoming/order-1.json" }, answer: { path: "incoming/order-1.json", content: order(1, "alice@example.com", [{ sku: "MUG", qty: 2, price: 12.5 }]) } },
          { args: { path: "incoming/order-2.json" }, answer: { path: "incoming/order-2.json", content: order(2, "bob@example.com", [{ sku: "TEA", qty: 1, price: 8 }]) } },
        ],
      },
      expect: {
        writes: [
          { tool: "files.write", target: "file out/order-1.json", payload: { content: '{\n  "order": 1,\n  "customer": "alice@example.com",\n  "total": 25,\n  "status": "confirmed"\n}\n' } },
          { tool: "files.write", target: "file out/order-2.json" },
        ],
        inputs: [
          { title: "Order 1 from alice@example.com: 1 item(s)", status: "done" },
          { title: "Order 2 from bob@example.com: 1 item(s)", status: "done" },
        ],
      },
    },

    "a confirmation whose answer was lost is not written twice": {
      answers: {
        "files.list": [{ answer: [{ path: "incoming/order-7.json", name: "order-7.json" }] }],
        "files.read": [{ answer: { path: "incoming/order-7.json", content: order(7, "dan@example.com", [{ sku: "POT", qty: 1, price: 49 }]) } }],
      },
      // The write lands, then its answer is lost: keep cannot know it
      // happened until reconcile finds it, and must not send it again.
      faults: { "files.write": [{ fault: "timeoutAfterApply" }] },
      expect: {
        writes: [{ tool: "files.write", target: "file out/order-7.json" }],
        inputs: [{ title: "Order 7 from dan@example.com: 1 item(s)", status: "done" }],
      },
    },

    "a folder with nothing in it writes nothing": {
      answers: { "files.list": [{ answer: [] }] },
      expect: { writes: [], inputs: [] },
    },
  },
});
