package api_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testsink"
)

// itemWorkflow is a task with one item per inbox file, whose script is body.
func itemWorkflow(body string) string {
	return `export default Keep.workflow({
  name: "items",
  tasks: {
    notify: Keep.task({ schedule: { interval: "1h" }, async run(ctx, state) {
      for (const f of await ctx.files.list({ dir: "inbox", glob: "*.json" })) {
        const id = f.name.replace(".json", "")
        await ctx.withItem("email:" + id, "Email " + id, async (ctx) => {
          ` + body + `
        })
      }
    } }),
  },
})`
}

// consumerWorkflow writes its one input's event to the sink, without a
// way for keep to check the write.
const consumerWorkflow = `export default Keep.workflow({
  name: "orders", topics: { "order": {} },
  producers: { p: { publishes: ["order"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Order a" })
    await ctx.publish("order", { messageId: "a", inputId, payload: { n: 1 } })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["order"],
    async prepare(ctx) { const [e] = await ctx.peek("order"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "order", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/a", json: p.data, timeoutMs: 300 }) } }) } })`

// TestAnItemThatNeedsAttentionIsOfferedReprocessThroughTheAPI (issue 24
// #7, ch 12 §12.7): a task item or a consumer's input that needs attention
// — its write's content differs from the one already applied in its
// attempt, or its write's outcome is unknown — has Reprocess on its card
// (GET …/blocked, the page and keep status show that card); taking it
// through the API starts a new attempt, and the sink sees the write the
// person asked for once, under a key of its own.
func TestAnItemThatNeedsAttentionIsOfferedReprocessThroughTheAPI(t *testing.T) {
	t.Parallel()
	twoWrites := func(n int) string {
		return fmt.Sprintf(`if (ctx.item.isDone) return
          await ctx.http.request({ method: "POST", url: "%%SINK%%/write/" + id, json: { n: %d } })
          await ctx.http.request({ method: "POST", url: "%%SINK%%/write/" + id + "-copy", json: { n: 0 } })`, n)
	}
	for _, c := range []struct {
		name, wf, script, minor string
		faults                  []testsink.Fault
		status                  string // the input's status with the card
		asked                   string // the body of the write the person asked for
		writes                  int    // the sink's writes in all, after
	}{
		// The first write applies, the second is refused (400): the item
		// fails. A minor version changes the first write's content: the
		// retry finds it applied with other content, and the item needs
		// attention. Reprocess: attempt 2 sends {n:2} and the copy.
		{name: "task item, payload changed", wf: "items", script: itemWorkflow(twoWrites(1)), minor: itemWorkflow(twoWrites(2)),
			faults: []testsink.Fault{testsink.OK, testsink.Status(400)}, status: "needs_attention", asked: `{"n":2}`, writes: 3},
		// The write applies and its answer never comes: unknown.
		{name: "task item, outcome unknown", wf: "items", script: itemWorkflow(`if (ctx.item.isDone) return
          await ctx.http.request({ method: "POST", url: "%SINK%/write/" + id, json: { n: 3 }, timeoutMs: 300 })`),
			faults: []testsink.Fault{testsink.TimeoutAfter}, status: "needs_attention", asked: `{"n":3}`, writes: 2},
		{name: "consumer input, outcome unknown", wf: "orders", script: consumerWorkflow,
			faults: []testsink.Fault{testsink.TimeoutAfter}, status: "needs_attention", asked: `{"n":1}`, writes: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, "")
			root := inboxWith(t, "a")
			r.sink.Queue(c.faults...)
			deploy := func(src, kind string) {
				t.Helper()
				body := map[string]any{"script": strings.ReplaceAll(src, "%SINK%", r.sink.URL), "file": c.wf + ".js", "grant": true, "kind": kind, "filesRoot": root}
				if code, obj, _ := r.call("POST", "/api/v1/workflows", body, nil); code != 200 {
					t.Fatalf("deploy: %d %v", code, obj)
				}
				r.settle()
			}
			deploy(c.script, "")
			if c.minor != "" {
				deploy(c.minor, "minor")
			}
			_, _, cards := r.call("GET", "/api/v1/workflows/"+c.wf+"/blocked", nil, nil)
			if len(cards) != 1 {
				t.Fatalf("cards: %v", cards)
			}
			card := cards[0].(map[string]any)
			if actions, _ := card["actions"].([]any); !slices.Contains(actions, any("reprocess")) {
				t.Fatalf("the card offers %v, not reprocess: %s", actions, card["reason"])
			}
			_, _, ins := r.call("GET", "/api/v1/workflows/"+c.wf+"/items", nil, nil)
			if st := ins[0].(map[string]any)["status"]; st != c.status {
				t.Fatalf("item status %v with the card, want %s", st, c.status)
			}
			before := len(r.sink.Writes())
			code, obj, _ := r.call("POST", "/api/v1/runs/"+card["runId"].(string)+"/resolve", map[string]string{"action": "reprocess"}, nil)
			if code != 200 || !strings.Contains(obj["message"].(string), "attempt 2") {
				t.Fatalf("reprocess: %d %v", code, obj)
			}
			r.settle()
			ws := r.sink.Writes()
			asked := 0
			for _, w := range ws[before:] {
				var v any
				_ = json.Unmarshal(w.Body, &v)
				if b, _ := json.Marshal(v); string(b) == c.asked {
					asked++
				}
				for _, old := range ws[:before] {
					if old.Key == w.Key {
						t.Errorf("the new attempt's write %s went under the key of the first attempt's", w.Path)
					}
				}
			}
			if asked != 1 || len(ws) != c.writes {
				t.Fatalf("the sink saw %d writes of %s after the reprocess (want 1), %d in all (want %d): %+v", asked, c.asked, len(ws), c.writes, ws)
			}
			_, _, ins = r.call("GET", "/api/v1/workflows/"+c.wf+"/items", nil, nil)
			if in := ins[0].(map[string]any); in["status"] != "done" || in["attempt"] != float64(2) {
				t.Fatalf("item after the reprocess: %v", in)
			}
			if _, _, cards := r.call("GET", "/api/v1/workflows/"+c.wf+"/blocked", nil, nil); len(cards) != 0 {
				t.Fatalf("still blocked: %v", cards)
			}
		})
	}
}
