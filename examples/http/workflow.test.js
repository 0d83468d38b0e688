// @ts-check
/// <reference path="./keep.d.ts" />
// Tests of the alerts-to-tickets example: run them with
//   keep test examples/http/workflow.test.js
// No ticket service is needed: http.request answers as each case says.
const alerts = JSON.stringify([
  { id: "disk-db1", host: "db1", message: "disk 91% full" },
  { id: "cert-web", host: "web", message: "TLS certificate expires in 6 days" },
]);
const readAlerts = { "files.read": [{ args: { path: "alerts.json" }, answer: { path: "alerts.json", content: alerts } }] };

export default Keep.test({
  workflow: "./workflow.js",
  cases: {
    "each alert opens one ticket": {
      answers: {
        ...readAlerts,
        "http.request": [{ args: { method: "POST" }, answer: { status: 201, json: { id: "T-1" } } }],
      },
      expect: {
        writes: [
          { tool: "http.request", target: "POST http://127.0.0.1:8090/tickets", payload: { json: { title: "[db1] disk 91% full", alert: "disk-db1" } } },
          { tool: "http.request", target: "POST http://127.0.0.1:8090/tickets", payload: { json: { title: "[web] TLS certificate expires in 6 days", alert: "cert-web" } } },
        ],
        inputs: [
          { title: "Alert on db1: disk 91% full", status: "done" },
          { title: "Alert on web: TLS certificate expires in 6 days", status: "done" },
        ],
      },
    },

    "a ticket created before the service timed out is not opened twice": {
      answers: readAlerts,
      // The service creates the ticket for disk-db1, and its answer never
      // comes: the reconcile probe finds the ticket, so keep sends no
      // second POST.
      faults: { "http.request": [{ args: { json: { title: "[db1] disk 91% full", alert: "disk-db1" } }, fault: "timeoutAfterApply" }] },
      expect: {
        writes: [
          { tool: "http.request", payload: { json: { title: "[db1] disk 91% full", alert: "disk-db1" } } },
          { tool: "http.request", payload: { json: { title: "[web] TLS certificate expires in 6 days", alert: "cert-web" } } },
        ],
        inputs: [
          { title: "Alert on db1: disk 91% full", status: "done" },
          { title: "Alert on web: TLS certificate expires in 6 days", status: "done" },
        ],
      },
    },

    "a service that says 429 is tried again after its Retry-After": {
      answers: readAlerts,
      faults: { "http.request": [{ fault: "429", retryAfter: 1 }] },
      expect: {
        writes: [{ tool: "http.request" }, { tool: "http.request" }],
        runs: { retried: 1 },
      },
    },

    "tried again once the credential is fixed, each ticket is opened once": {
      answers: readAlerts,
      faults: { "http.request": [{ fault: "401" }] },
      // A person fixes the token, then chooses Try again on the card.
      decide: [{ card: "answered 401 Unauthorized", action: "try-again" }],
      expect: {
        writes: [{ tool: "http.request" }, { tool: "http.request" }],
        inputs: [
          { title: "Alert on db1: disk 91% full", status: "done" },
          { title: "Alert on web: TLS certificate expires in 6 days", status: "done" },
        ],
      },
    },

    "an alert a person skips opens no ticket": {
      answers: readAlerts,
      faults: { "http.request": [{ args: { json: { title: "[db1] disk 91% full", alert: "disk-db1" } }, fault: "403" }] },
      decide: [{ card: "answered 403 Forbidden", action: "skip" }],
      expect: {
        writes: [{ tool: "http.request", payload: { json: { title: "[web] TLS certificate expires in 6 days", alert: "cert-web" } } }],
        inputs: [
          { title: "Alert on db1: disk 91% full", status: "skipped" },
          { title: "Alert on web: TLS certificate expires in 6 days", status: "done" },
        ],
      },
    },

    "a refused credential waits for a person, and nothing is sent": {
      answers: readAlerts,
      faults: { "http.request": [{ fault: "401" }] },
      expect: {
        writes: [],
        blocked: ["answered 401 Unauthorized"],
        inputs: [
          { title: "Alert on db1: disk 91% full", status: "needs_attention" },
          { title: "Alert on web: TLS certificate expires in 6 days", status: "pending" },
        ],
      },
    },
  },
});
