package testrun

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sendWorkflow writes one file per job the producer finds: a consumer's
// write, with files.write's real reconcile (by content at its path).
const sendWorkflow = `export default Keep.workflow({
  name: "send",
  topics: { "job": {} },
  producers: { poll: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const jobs = await ctx.files.list({ dir: "jobs" });
    for (const j of jobs) {
      const inputId = ctx.registerInput({ source: "files", type: "file", id: j.path, title: "Job " + j.name });
      await ctx.publish("job", { messageId: j.name, inputId, payload: { name: j.name } });
    }
  } } },
  consumers: { send: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) {
      const [e] = await ctx.peek("job", { limit: 1 });
      if (!e) return { reservations: [] };
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload, ui: { title: "Send " + e.payload.name } };
    },
    async mutate(ctx, p) { await ctx.files.write({ path: "out/" + p.data.name, content: "sent " + p.data.name }); },
  }) },
});
`

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// oneJob is a case whose producer finds one job, with a fault and an
// expectation.
func oneJob(faults, expect string) string {
	return `{ answers: { "files.list": [{ args: { dir: "jobs" }, answer: [{ path: "jobs/a", name: "a" }] }] },
    faults: ` + faults + `, expect: ` + expect + ` }`
}

// TestFaultsBehaveAsInProduction runs each fault class through the real
// engine: what the fake connector applied is what reconcile finds, so a
// write whose answer was lost is never sent again, and one that never
// landed is sent once more.
func TestFaultsBehaveAsInProduction(t *testing.T) {
	t.Parallel()
	once := `{ writes: [{ tool: "files.write", target: "file out/a", payload: { content: "sent a" } }], inputs: [{ title: "Job a", status: "done" }] }`
	cases := map[string]string{
		"timeoutAfterApply": oneJob(`{ "files.write": [{ fault: "timeoutAfterApply" }] }`, once),
		"500AfterApply":     oneJob(`{ "files.write": [{ fault: "500AfterApply" }] }`, once),
		"timeout":           oneJob(`{ "files.write": [{ fault: "timeout" }] }`, once),
		"503":               oneJob(`{ "files.write": [{ fault: "503" }] }`, once),
		"429":               oneJob(`{ "files.write": [{ fault: "429", retryAfter: 0, times: 2 }] }`, once),
		"401":               oneJob(`{ "files.write": [{ fault: "401" }] }`, `{ writes: [], blocked: ["Send a"], runs: { "paused:approval": 1 } }`),
		"read 503":          `{ answers: { "files.list": [{ answer: [] }] }, faults: { "files.list": [{ fault: "503" }] }, expect: { writes: [], runs: { retried: 1, committed: 1 } } }`,
	}
	var b strings.Builder
	b.WriteString("export default Keep.test({ workflow: \"./wf.js\", cases: {\n")
	for name, c := range cases {
		b.WriteString("  \"" + name + "\": " + c + ",\n")
	}
	b.WriteString("} });\n")
	dir := writeFiles(t, map[string]string{"wf.js": sendWorkflow, "wf.test.js": b.String()})
	res, err := Run(context.Background(), filepath.Join(dir, "wf.test.js"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cases) != len(cases) {
		t.Fatalf("ran %d cases, want %d", len(res.Cases), len(cases))
	}
	for _, c := range res.Cases {
		if !c.OK {
			t.Errorf("case %s failed: %+v", c.Name, c.Failures)
		}
	}
}

// TestAFailureSaysWhichAssertionAndWhy: a case expecting the write twice,
// and one whose read the test does not declare.
func TestAFailureSaysWhichAssertionAndWhy(t *testing.T) {
	t.Parallel()
	test := `export default Keep.test({
  workflow: "./wf.js",
  cases: {
    "twice": {
      answers: { "files.list": [{ answer: [{ path: "jobs/a", name: "a" }] }] },
      faults: { "files.write": [{ fault: "timeoutAfterApply" }] },
      expect: {
        writes: [{ tool: "files.write" }, { tool: "files.write" }],
      },
    },
    "no answer": {
      answers: { "files.read": [{ args: { path: "x" }, answer: {} }] },
      expect: { writes: [] },
    },
  },
});
`
	dir := writeFiles(t, map[string]string{"wf.js": sendWorkflow, "wf.test.js": test})
	res, err := Run(context.Background(), filepath.Join(dir, "wf.test.js"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed() != 2 {
		t.Fatalf("%d cases failed, want 2: %+v", res.Failed(), res.Cases)
	}
	twice := res.Cases[0].Failures
	if len(twice) != 1 || twice[0].Assertion != "expect.writes" || twice[0].Line != 8 || !strings.Contains(twice[0].Message, "expected 2 writes, got 1") {
		t.Errorf("the failure of twice: %+v", twice)
	}
	none := res.Cases[1].Failures
	if len(none) != 1 || none[0].Assertion != "answers" || !strings.Contains(none[0].Message, `files.list({"dir":"jobs"})`) || !strings.Contains(none[0].Message, "its answers declare files.read") {
		t.Errorf("the failure of no answer: %+v", none)
	}
}

// TestInvalidTestFileSaysWhereAndWhat: each mistake at its line, with
// what to write instead.
func TestInvalidTestFileSaysWhereAndWhat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, cases, want string }{
		{"fault", `"c": {
      faults: { "files.write": [{ fault: "timeout_after" }] },
      expect: {} }`, `wf.test.js:5: cases.c.faults["files.write"][0].fault: "timeout_after" is no fault keep test knows; write one of`},
		{"method", `"c": {
      answers: { "files.lst": [{ answer: [] }] },
      expect: {} }`, `wf.test.js:5: cases.c.answers["files.lst"]: connector "files" has no method "lst"; files has: files.list`},
		{"key", `"c": {
      expects: {} }`, `wf.test.js:5: cases.c.expects: is not something a test says; write one of: answers, faults, events, webhooks, decide, expect`},
		{"read after apply", `"c": {
      faults: { "files.list": [{ fault: "timeoutAfterApply" }] },
      expect: {} }`, `timeoutAfterApply is a fault of a write`},
		{"function", `"c": { answers: { "files.list": [{ answer: () => [] }] }, expect: {} }`, `is a function; a test is data`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			test := "export default Keep.test({\n  workflow: \"./wf.js\",\n  cases: {\n    " + tc.cases + "\n  },\n});\n"
			dir := writeFiles(t, map[string]string{"wf.js": sendWorkflow, "wf.test.js": test})
			_, err := Run(context.Background(), filepath.Join(dir, "wf.test.js"), Options{})
			var inv *Invalid
			if !errors.As(err, &inv) {
				t.Fatalf("err %v, want *Invalid", err)
			}
			if msg := strings.ReplaceAll(err.Error(), dir+"/", ""); !strings.Contains(msg, tc.want) {
				t.Fatalf("error %q\nwant it to contain %q", msg, tc.want)
			}
		})
	}
}

// TestEveryFaultKindHasAName: a fault kind keep's fakes know and keep
// test cannot arm would be a failure class no author can test.
func TestEveryFaultKindHasAName(t *testing.T) {
	named := map[string]bool{}
	for _, k := range FaultNames {
		named[k] = true
	}
	for k := range faultKinds() {
		if !named[k] {
			t.Errorf("fault kind %q has no name in FaultNames", k)
		}
		if faultText[k] == "" {
			t.Errorf("fault kind %q has no text in faultText", k)
		}
	}
}

// TestEventsArePostedAsKeepPublishDoes: a workflow fed by keep's event API
// is tested with the events a case posts; a topic not open to the API is
// refused at the event's line, as keep publish refuses it.
func TestEventsArePostedAsKeepPublishDoes(t *testing.T) {
	t.Parallel()
	wf := `export default Keep.workflow({
  name: "orders",
  topics: { "order.placed": { from: "api" } },
  consumers: { confirm: Keep.consumer({ subscribe: ["order.placed"],
    async prepare(ctx) {
      const [e] = await ctx.peek("order.placed", { limit: 1 });
      if (!e) return { reservations: [] };
      return { reservations: [{ topic: "order.placed", ids: [e.messageId] }], data: e.payload };
    },
    async mutate(ctx, p) { await ctx.files.write({ path: "out/" + p.data.id, content: "confirmed for " + p.data.customer }); },
  }) },
});
`
	test := `export default Keep.test({
  workflow: "./wf.js",
  cases: {
    "an order posted is confirmed once": {
      events: { "order.placed": [{ id: "1042", title: "Order 1042", payload: { id: "1042", customer: "ann" } }, { id: "1042", title: "Order 1042", payload: { id: "1042", customer: "ann" } }] },
      expect: {
        writes: [{ tool: "files.write", target: "file out/1042", payload: { content: "confirmed for ann" } }],
        inputs: [{ title: "Order 1042", status: "done" }],
      },
    },
  },
});
`
	dir := writeFiles(t, map[string]string{"wf.js": wf, "wf.test.js": test})
	res, err := Run(context.Background(), filepath.Join(dir, "wf.test.js"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed() != 0 {
		t.Fatalf("%+v", res.Cases)
	}
	closed := strings.Replace(test, `"order.placed": [`, `"order.shipped": [`, 1)
	dir = writeFiles(t, map[string]string{"wf.js": wf, "wf.test.js": closed})
	_, err = Run(context.Background(), filepath.Join(dir, "wf.test.js"), Options{})
	var inv *Invalid
	if !errors.As(err, &inv) || inv.Line != 5 || !strings.Contains(err.Error(), `cases["an order posted is confirmed once"].events["order.shipped"]`) {
		t.Fatalf("err %v", err)
	}
}

// TestWebhookDeliveriesAreSignedAndDeliveredAsKeepServeDoes: a case's
// requests pass the webhook's real verification (GitHub's HMAC, Stripe's,
// Slack's, a token), a retry of a delivery is found by its id and changes
// nothing, and a request without the id dedupe names fails the case.
func TestWebhookDeliveriesAreSignedAndDeliveredAsKeepServeDoes(t *testing.T) {
	t.Parallel()
	wf := `export default Keep.workflow({
  name: "hooks",
  topics: { "push": {}, "charge": {} },
  webhooks: {
    github: { publishes: ["push"], verify: { hmac: { header: "X-Hub-Signature-256", prefix: "sha256=", secret: "GITHUB_SECRET" } },
      dedupe: { header: "X-GitHub-Delivery" },
      handler: async (ctx, req) => {
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id: req.headers["x-github-delivery"], title: "Push " + req.json.after });
        await ctx.publish("push", { messageId: req.json.after, inputId, payload: req.json });
      } },
    stripe: { publishes: ["charge"], verify: { stripe: { secret: "STRIPE_SECRET" } }, dedupe: { json: "id" },
      handler: async (ctx, req) => {
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id: req.json.id, title: "Charge " + req.json.id });
        await ctx.publish("charge", { messageId: req.json.id, inputId, payload: { after: req.json.id } });
      } },
  },
  consumers: {
    c: Keep.consumer({ subscribe: ["push"],
      async prepare(ctx) {
        const [e] = await ctx.peek("push", { limit: 1 });
        if (!e) return { reservations: [] };
        return { reservations: [{ topic: "push", ids: [e.messageId] }], data: e.payload };
      },
      async mutate(ctx, p) { await ctx.files.write({ path: "seen/" + p.data.after, content: "seen" }); },
    }),
    d: Keep.consumer({ subscribe: ["charge"],
      async prepare(ctx) {
        const [e] = await ctx.peek("charge", { limit: 1 });
        if (!e) return { reservations: [] };
        return { reservations: [{ topic: "charge", ids: [e.messageId] }], data: e.payload };
      },
      async mutate(ctx, p) { await ctx.files.write({ path: "charged/" + p.data.after, content: "charged" }); },
    }),
  },
});
`
	test := `export default Keep.test({
  workflow: "./wf.js",
  cases: {
    "each push is seen once": {
      webhooks: {
        github: [
          { headers: { "X-GitHub-Delivery": "d1" }, json: { after: "abc" } },
          { headers: { "X-GitHub-Delivery": "d1" }, json: { after: "abc" } },
        ],
        stripe: [{ json: { id: "ch_1" } }],
      },
      expect: {
        inputs: [{ title: "Push abc", status: "done" }, { title: "Charge ch_1", status: "done" }],
      },
    },
    "a delivery without its id": {
      webhooks: { github: [{ json: { after: "abc" } }] },
      expect: { writes: [] },
    },
  },
});
`
	dir := writeFiles(t, map[string]string{"wf.js": wf, "wf.test.js": test})
	res, err := Run(context.Background(), filepath.Join(dir, "wf.test.js"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Cases[0].OK {
		t.Errorf("each push is seen once: %+v", res.Cases[0].Failures)
	}
	f := res.Cases[1].Failures
	if res.Cases[1].OK || len(f) != 1 || f[0].Assertion != `webhooks["github"][0]` || f[0].Line != 17 || !strings.Contains(f[0].Message, "keep did not accept the delivery (bad-input)") || !strings.Contains(f[0].Message, "X-GitHub-Delivery") {
		t.Errorf("a delivery without its id: %+v", f)
	}
}

// TestADecisionNoCardOffersFailsTheCase: a decision on a card no blocked
// run shows, or an action its card does not offer, fails the case saying
// which and what the cards say.
func TestADecisionNoCardOffersFailsTheCase(t *testing.T) {
	t.Parallel()
	blocked := func(decide string) string {
		return oneJob(`{ "files.write": [{ fault: "401" }] }`, `{ writes: [], blocked: ["Send a"] }, decide: `+decide)
	}
	test := "export default Keep.test({ workflow: \"./wf.js\", cases: {\n" +
		"  \"no such card\": " + blocked(`[{ card: "Send b", action: "skip" }]`) + ",\n" +
		"  \"not offered\": " + blocked(`[{ card: "Send a", action: "approve" }]`) + ",\n" +
		"  \"skipped\": " + oneJob(`{ "files.write": [{ fault: "401" }] }`, `{ writes: [], inputs: [{ title: "Job a", status: "skipped" }] }, decide: [{ card: "Send a", action: "skip" }]`) + ",\n" +
		"} });\n"
	dir := writeFiles(t, map[string]string{"wf.js": sendWorkflow, "wf.test.js": test})
	res, err := Run(context.Background(), filepath.Join(dir, "wf.test.js"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"no such card": `no blocked run's card says "Send b", so nobody could skip it`, "not offered": `approve on the run whose card says "Send a" was refused`}
	for _, c := range res.Cases {
		if w, bad := want[c.Name]; bad {
			if c.OK || c.Failures[0].Assertion != "decide[0]" || !strings.Contains(c.Failures[0].Message, w) {
				t.Errorf("%s: %+v", c.Name, c.Failures)
			}
		} else if !c.OK {
			t.Errorf("%s: %+v", c.Name, c.Failures)
		}
	}
}

// TestItemsAreExpectedByTitleAndStatus: an item script's items, done or
// needing a person, as keep items shows them.
func TestItemsAreExpectedByTitleAndStatus(t *testing.T) {
	t.Parallel()
	wf := `export default Keep.workflow({
  name: "confirm",
  tasks: { confirm: Keep.task({ schedule: { interval: "1h" }, async run(ctx) {
    for (const f of await ctx.files.list({ dir: "in" })) {
      await ctx.withItem("order:" + f.name, "Order " + f.name, async (ictx) => {
        if (ictx.item.isDone) return;
        await ictx.files.write({ path: "out/" + f.name, content: "confirmed" });
      });
    }
  } }) },
});
`
	test := `export default Keep.test({
  workflow: "./wf.js",
  cases: {
    "each order is an item": {
      answers: { "files.list": [{ answer: [{ path: "in/a", name: "a" }, { path: "in/b", name: "b" }] }] },
      faults: { "files.write": [{ args: { path: "out/b" }, fault: "403" }] },
      expect: {
        writes: [{ tool: "files.write", target: "file out/a" }],
        items: [{ title: "Order a", status: "done" }, { title: "Order b", status: "needs_attention" }],
        blocked: ["answered 403 Forbidden"],
      },
    },
    "a wrong status says which": {
      answers: { "files.list": [{ answer: [{ path: "in/a", name: "a" }] }] },
      expect: { items: [{ title: "Order a", status: "failed" }] },
    },
  },
});
`
	dir := writeFiles(t, map[string]string{"wf.js": wf, "wf.test.js": test})
	res, err := Run(context.Background(), filepath.Join(dir, "wf.test.js"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Cases[0].OK {
		t.Errorf("each order is an item: %+v", res.Cases[0].Failures)
	}
	f := res.Cases[1].Failures
	if len(f) != 1 || f[0].Assertion != "expect.items[0]" || f[0].Message != `item "Order a" is done, not failed` {
		t.Errorf("a wrong status: %+v", f)
	}
}
