package webhooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/testbin"
)

// ordersScript opens order.placed to the event API and has a GitHub-style
// webhook; a consumer writes each to the sink.
const ordersScript = `export default Keep.workflow({
  name: "orders",
  topics: { "order.placed": { from: "api" }, push: {} },
  webhooks: {
    gh: {
      publishes: ["push"],
      verify: { hmac: { header: "X-Hub-Signature-256", prefix: "sha256=", secret: "GITHUB_SECRET" } },
      dedupe: { header: "X-GitHub-Delivery" },
      handler: async (ctx, req) => {
        const inputId = ctx.registerInput({ source: "http", type: "webhook", id: req.json.after, title: "push " + req.json.after })
        await ctx.publish("push", { inputId, payload: { after: req.json.after } })
      },
    },
  },
  consumers: {
    orders: Keep.consumer({
      subscribe: ["order.placed"],
      async prepare(ctx) {
        const [e] = await ctx.peek("order.placed")
        if (!e) return { reservations: [] }
        return { reservations: [{ topic: "order.placed", ids: [e.messageId] }], data: e.payload }
      },
      async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/order-" + p.data.order, json: p.data }) },
    }),
    pushes: Keep.consumer({
      subscribe: ["push"],
      async prepare(ctx) {
        const [e] = await ctx.peek("push")
        if (!e) return { reservations: [] }
        return { reservations: [{ topic: "push", ids: [e.messageId] }], data: e.payload }
      },
      async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/push-" + p.data.after, json: p.data }) },
    }),
  },
})`

// TestOneIDPostedInParallelOnPostgreSQL: on PostgreSQL, where transactions
// do run at once, 40 posts of one event id to the event API (and 4 keep
// publish of it beside them) are one input, one event and one write at
// the sink: one answer says created, every other says already posted; 20
// senders of one signed webhook delivery are one accepted and 19
// duplicates, one input and one write.
func TestOneIDPostedInParallelOnPostgreSQL(t *testing.T) {
	k := setupWith(t, pgtest.FreshSchema(t), `webhook_max_body = "64KiB"`, func(k *keep) string {
		return strings.ReplaceAll(ordersScript, "%SINK%", k.sink.URL)
	})
	k.serve()
	secret, err := os.ReadFile(k.path("data/api.secret"))
	if err != nil {
		t.Fatalf("the instance secret: %v", err)
	}
	post := func() (int, string) {
		body := `{"id": "1042", "title": "Order 1042", "payload": {"order": 1042}}`
		req, _ := http.NewRequest(http.MethodPost, k.api+"/api/v1/workflows/orders/topics/order.placed/events", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(secret)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	var mu sync.Mutex
	answers := map[string]int{}
	count := func(s string) {
		mu.Lock()
		answers[s]++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body := post()
			var r struct{ Already bool }
			_ = json.Unmarshal([]byte(body), &r)
			count(fmt.Sprintf("api %d already=%v", code, r.Already))
		}()
	}
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := k.keep("", "publish", "orders", "order.placed", "--id", "1042", "--title", "Order 1042", "--json", `{"order": 1042}`)
			switch {
			case err != nil:
				count("publish failed: " + out)
			case strings.Contains(out, "already posted"):
				count("publish already")
			default:
				count("publish created")
			}
		}()
	}
	push := []byte(`{"ref": "refs/heads/main", "after": "c0ffee"}`)
	sig := "sha256=" + hexMAC(secrets["GITHUB_SECRET"], string(push))
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := k.post("/hooks/orders/gh", push, map[string]string{"X-GitHub-Delivery": "g-1", "X-Hub-Signature-256": sig})
			var r struct{ Status string }
			_ = json.Unmarshal([]byte(a.body), &r)
			count(fmt.Sprintf("hook %d %s", a.code, r.Status))
		}()
	}
	wg.Wait()
	// One of the 44 created it (a post or a keep publish, whichever came
	// first); the other 43 were told it was posted before.
	created, already := answers["api 201 already=false"]+answers["publish created"], answers["api 200 already=true"]+answers["publish already"]
	if created != 1 || already != 43 || answers["hook 200 accepted"] != 1 || answers["hook 200 duplicate"] != 19 {
		t.Fatalf("the answers: %v\nwant 1 created and 43 already posted, 1 accepted and 19 duplicate deliveries; keep said:\n%s", answers, k.logs)
	}
	testbin.WaitFor(t, "the consumers to write the order and the push", func() bool {
		return k.writesTo("/write/order-1042") >= 1 && k.writesTo("/write/push-c0ffee") >= 1
	}, k.logs)
	out, err := k.keep("", "events", "orders", "--json")
	if err != nil {
		t.Fatalf("keep events: %v\n%s", err, out)
	}
	var evs struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &evs); err != nil {
		t.Fatalf("keep events --json: %v\n%s", err, out)
	}
	if n, ins := len(evs.Events), k.inputsOf("orders"); n != 2 || ins != 2 {
		t.Fatalf("%d events and %d inputs, want 2 and 2 (one order, one push):\n%s", n, ins, out)
	}
	if o, p := k.writesTo("/write/order-1042"), k.writesTo("/write/push-c0ffee"); o != 1 || p != 1 || len(k.sink.Writes()) != 2 {
		var all bytes.Buffer
		for _, w := range k.sink.Writes() {
			fmt.Fprintln(&all, w.Path)
		}
		t.Fatalf("writes at the sink: order %d, push %d, all:\n%s", o, p, all.String())
	}
}
