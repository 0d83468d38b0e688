package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// ordersScript opens order.placed to the event API; its consumer writes
// each order to the sink, and notes is a topic its handlers write.
const ordersScript = `export default Keep.workflow({
  name: "orders",
  topics: { "order.placed": { from: "api" }, notes: {} },
  producers: { p: { publishes: ["notes"], schedule: { interval: "1h" }, handler: async () => {} } },
  consumers: { c: Keep.consumer({ subscribe: ["order.placed"],
    async prepare(ctx) {
      const [e] = await ctx.peek("order.placed")
      if (!e) return { reservations: [] }
      return { reservations: [{ topic: "order.placed", ids: [e.messageId] }], data: e.payload }
    },
    async mutate(ctx, prepared) { await ctx.http.request({ method: "POST", url: "%SINK%/write/" + prepared.data.order, json: prepared.data }) } }) } })`

// TestPublishThroughTheAPI: an event posted twice (same id) is one input
// and one event, and the consumer writes it to the sink once; what the
// API refuses it refuses with a clear error and writes nothing.
func TestPublishThroughTheAPI(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.deploy(ordersScript, "orders.js")
	const path = "/api/v1/workflows/orders/topics/order.placed/events"
	body := map[string]any{"id": "1042", "title": "Order 1042 from alice@example.com", "payload": map[string]any{"order": 1042, "total": "12.50"}}
	code, first, _ := r.call("POST", path, body, nil)
	if code != http.StatusCreated || first["ok"] != true || first["already"] != false || first["input"] == "" {
		t.Fatalf("first post: %d %v", code, first)
	}
	// The same id again, even with another title: the same input, no
	// second event, and the answer says so.
	body["title"] = "Order 1042 (sent again)"
	code, again, _ := r.call("POST", path, body, nil)
	if code != http.StatusOK || again["already"] != true || again["input"] != first["input"] || again["event"] != first["event"] || !strings.Contains(again["message"].(string), "already posted") {
		t.Fatalf("second post: %d %v (first %v)", code, again, first)
	}
	r.settle()
	// Posted once more after its consumer wrote it: still nothing new.
	if code, obj, _ := r.call("POST", path, body, nil); code != http.StatusOK || obj["already"] != true {
		t.Fatalf("third post: %d %v", code, obj)
	}
	r.settle()
	if ws := r.sink.Writes(); len(ws) != 1 || ws[0].Path != "/write/1042" || !strings.Contains(string(ws[0].Body), `"total":"12.50"`) {
		t.Fatalf("sink writes %v, want one to /write/1042", ws)
	}
	_, topics, _ := r.call("GET", "/api/v1/workflows/orders/topics", nil, nil)
	if ts, _ := topics["topics"].([]any); len(ts) == 0 || fmt.Sprint(ts[0].(map[string]any)["writers"]) != "[the event API]" || ts[0].(map[string]any)["consumed"] != 1.0 {
		t.Fatalf("topics %v", topics)
	}
	_, _, inputs := r.call("GET", "/api/v1/workflows/orders/inputs", nil, nil)
	if len(inputs) != 1 {
		t.Fatalf("inputs %v", inputs)
	}
	in := inputs[0].(map[string]any)
	if in["source"] != "api" || in["type"] != "order.placed" || in["externalId"] != "1042" || in["title"] != "Order 1042 from alice@example.com" || in["status"] != "done" {
		t.Fatalf("input %v", in)
	}

	refused := []struct {
		name, path string
		body       any
		code       int
		says       string
	}{
		{"handlers' topic", "/api/v1/workflows/orders/topics/notes/events", map[string]any{"id": "1", "title": "t"}, http.StatusConflict, `declare it "notes": { from: "api" }`},
		{"unknown topic", "/api/v1/workflows/orders/topics/nope/events", map[string]any{"id": "1", "title": "t"}, http.StatusNotFound, `has no topic "nope" (topics open to the event API: order.placed)`},
		{"unknown workflow", "/api/v1/workflows/nope/topics/order.placed/events", map[string]any{"id": "1", "title": "t"}, http.StatusNotFound, `no workflow "nope"`},
		{"bad JSON", path, `{"id": "1", "title": "t", "payload": {`, http.StatusBadRequest, `send {"id": "…", "title": "…", "payload": {…}}`},
		{"unknown field", path, `{"id": "1", "title": "t", "data": {}}`, http.StatusBadRequest, `unknown field "data"`},
		{"missing id", path, map[string]any{"title": "t", "payload": 1}, http.StatusBadRequest, "it has no id; send the event's id in your system"},
		{"missing title", path, map[string]any{"id": "2"}, http.StatusBadRequest, "it has no title"},
		{"long id", path, map[string]any{"id": strings.Repeat("i", 501), "title": "t"}, http.StatusBadRequest, "the id has 501 characters, over keep's bound of 500 characters"},
		{"oversize payload", path, map[string]any{"id": "3", "title": "t", "payload": strings.Repeat("x", 1<<20)}, http.StatusBadRequest, "over keep's bound of 1 MiB"},
		{"blank id", path, map[string]any{"id": "   ", "title": "t"}, http.StatusBadRequest, "it has no id"},
		// A lone surrogate becomes U+FFFD when decoded: two ids would become one.
		{"id that is not text", path, `{"id": "\ud800", "title": "t"}`, http.StatusBadRequest, "the id is not plain text"},
		{"NUL in the id", path, map[string]any{"id": "a\x00b", "title": "t"}, http.StatusBadRequest, "the id is not plain text"},
		{"NUL in the title", path, map[string]any{"id": "6", "title": "a\x00b"}, http.StatusBadRequest, "the title is not plain text"},
		// A payload a consumer's sandbox cannot parse would fail every run
		// of the consumer as its own stack overflow, holding up the topic.
		{"payload nested too deep", path, `{"id": "7", "title": "t", "payload": ` + strings.Repeat("[", 6000) + strings.Repeat("]", 6000) + `}`, http.StatusBadRequest, "the payload nests 6000 levels deep, over keep's bound of 150 levels"},
		{"body over the API's bound", path, `{"id": "4", "title": "t", "payload": "` + strings.Repeat("x", 5<<20) + `"}`, http.StatusBadRequest, "too large"},
	}
	for _, c := range refused {
		code, obj, _ := r.call("POST", c.path, c.body, nil)
		e, _ := obj["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if code != c.code || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %d %q, want %d saying %q", c.name, code, msg, c.code, c.says)
		}
	}
	// Without proof of who sends it, nothing is posted.
	if code, obj, _ := r.call("POST", path, map[string]any{"id": "5", "title": "t"}, map[string]string{"Authorization": ""}); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("without the secret: %d %v", code, obj)
	}
	if _, _, inputs := r.call("GET", "/api/v1/workflows/orders/inputs", nil, nil); len(inputs) != 1 {
		t.Fatalf("refused posts stored inputs: %v", inputs)
	}
	r.settle()
	if ws := r.sink.Writes(); len(ws) != 1 {
		t.Fatalf("sink writes after refused posts %v", ws)
	}
	// A person's reprocess of the posted input opens its event again: its
	// consumer writes it once more, as for a producer's input.
	if code, obj, _ := r.call("POST", "/api/v1/items/"+first["input"].(string)+"/reprocess", nil, nil); code != 200 {
		t.Fatalf("reprocess: %d %v", code, obj)
	}
	r.settle()
	if ws := r.sink.Writes(); len(ws) != 2 || ws[1].Path != "/write/1042" {
		t.Fatalf("sink writes after reprocess %v, want a second to /write/1042", ws)
	}
}

// TestTheDeployAnswerSaysWhichEventsItLeavesWaiting: the deploy's answer
// lists the topics whose waiting events the new version leaves without
// their consumer or without the event API, with their count and the
// command that skips them; a version that still reads them says the event
// API no longer takes new ones; nothing waiting, nothing said.
func TestTheDeployAnswerSaysWhichEventsItLeavesWaiting(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	consumer := `consumers: { c: Keep.consumer({ subscribe: ["order.placed"],
    async prepare(ctx) { const [e] = await ctx.peek("order.placed"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "order.placed", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.files.write({ path: "out/" + p.data.order + ".json", content: "x" }) } }) }`
	v1 := `export default Keep.workflow({ name: "orders", topics: { "order.placed": { from: "api" } }, ` + consumer + ` })`
	// Still read, now published by a producer of its own.
	v2 := `export default Keep.workflow({ name: "orders", topics: { "order.placed": {} },
  producers: { p: { publishes: ["order.placed"], schedule: { interval: "1h" }, handler: async () => {} } }, ` + consumer + ` })`
	// Neither read nor open to the API.
	v3 := `export default Keep.workflow({ name: "orders", topics: { notes: {} },
  producers: { p: { publishes: ["notes"], schedule: { interval: "1h" }, handler: async () => {} } } })`
	deploy := func(src string) []any {
		t.Helper()
		code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": src, "file": "orders.js", "grant": true, "kind": "major", "reprocess": "none"}, nil)
		if code != 200 {
			t.Fatalf("deploy: %d %v", code, obj)
		}
		s, ok := obj["stranded"].([]any)
		if !ok {
			t.Fatalf("the deploy's answer has no stranded list: %v", obj)
		}
		return s
	}
	if code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": v1, "file": "orders.js", "grant": true}, nil); code != 200 {
		t.Fatalf("deploy v1: %d %v", code, obj)
	}
	if code, obj, _ := r.call("POST", "/api/v1/workflows/orders/pause", nil, nil); code != 200 {
		t.Fatalf("pause: %d %v", code, obj)
	}
	for _, id := range []string{"1", "2", "3"} {
		if code, obj, _ := r.call("POST", "/api/v1/workflows/orders/topics/order.placed/events", map[string]any{"id": id, "title": "Order " + id, "payload": map[string]any{"order": id}}, nil); code != 201 {
			t.Fatalf("post %s: %d %v", id, code, obj)
		}
	}
	s := deploy(v2)
	if len(s) != 1 {
		t.Fatalf("v2 stranded %v", s)
	}
	x := s[0].(map[string]any)
	if x["topic"] != "order.placed" || x["pending"] != float64(3) || !strings.Contains(x["message"].(string), "3 events posted through the event API wait on topic order.placed, which version 2.0 no longer opens to the event API (new posts are refused); c still takes the ones waiting") {
		t.Fatalf("v2 stranded %v", x)
	}
	s = deploy(v3)
	if len(s) != 1 {
		t.Fatalf("v3 stranded %v", s)
	}
	x = s[0].(map[string]any)
	if x["pending"] != float64(3) || !strings.Contains(x["message"].(string), "3 events wait on topic order.placed, which no consumer of version 3.0 reads (c read it)") || !strings.Contains(x["message"].(string), "keep skip-pending orders order.placed") {
		t.Fatalf("v3 stranded %v", x)
	}
	// v1 again reads them: nothing is left behind.
	if s := deploy(v1); len(s) != 0 {
		t.Fatalf("v1 again: stranded %v", s)
	}
}

// Issue 38 (low): ids that differ only in how their letters are composed
// (NFC "é" and NFD "e" + U+0301) are one id — the second post finds the
// first — and an id with a space or an invisible character at either end
// is refused with a 400 that says so, storing nothing. An id posted,
// decomposed, before ids were normalized is still found as it was sent.
func TestAnEventIdIsOneIdHoweverItIsComposed(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.deploy(ordersScript, "orders.js")
	const path = "/api/v1/workflows/orders/topics/order.placed/events"
	const nfc, nfd = "caf\u00e9-1", "cafe\u0301-1"
	code, first, _ := r.call("POST", path, map[string]any{"id": nfc, "title": "Order café", "payload": map[string]any{"order": 1}}, nil)
	if code != http.StatusCreated {
		t.Fatalf("first post: %d %v", code, first)
	}
	code, again, _ := r.call("POST", path, map[string]any{"id": nfd, "title": "Order café", "payload": map[string]any{"order": 1}}, nil)
	if code != http.StatusOK || again["already"] != true || again["input"] != first["input"] {
		t.Fatalf("the same id decomposed: %d %v (first %v)", code, again, first)
	}
	for _, id := range []string{" " + nfc, nfc + " ", nfc + "\u00a0", "\u200b" + nfc, nfc + "\ufeff", "\t" + nfc} {
		code, obj, _ := r.call("POST", path, map[string]any{"id": id, "title": "Order café", "payload": map[string]any{"order": 1}}, nil)
		e, _ := obj["error"].(map[string]any)
		if msg, _ := e["message"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "the id starts or ends with a space (or an invisible character)") {
			t.Errorf("id %q: %d %q, want 400 saying the id starts or ends with a space", id, code, msg)
		}
	}
	// An input posted decomposed before ids were normalized (written as
	// keep wrote it then).
	const oldNFD = "cafe\u0301-2"
	if err := r.k.Store.Update(context.Background(), func(tx store.Tx) error {
		in := kt.Input{ID: "in-old", Workflow: "orders", Key: "api:order.placed:" + oldNFD, Source: "api", Type: "order.placed", ExternalID: oldNFD, Title: "Order 2", CurrentAttempt: 1, CreatedAt: 1, UpdatedAt: 1}
		if err := tx.InputPut(in); err != nil {
			return err
		}
		_, err := tx.EventPublish(&kt.Event{Workflow: "orders", Topic: "order.placed", MessageID: in.ID, Payload: []byte(`{"order":2}`), Status: kt.EventConsumed, CausedBy: []string{in.ID}, Attempt: 1, CreatedAt: 1, UpdatedAt: 1})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if code, obj, _ := r.call("POST", path, map[string]any{"id": oldNFD, "title": "Order 2", "payload": map[string]any{"order": 2}}, nil); code != http.StatusOK || obj["input"] != "in-old" {
		t.Fatalf("an id posted decomposed before: %d %v", code, obj)
	}
	r.settle()
	if _, _, inputs := r.call("GET", "/api/v1/workflows/orders/inputs", nil, nil); len(inputs) != 2 {
		t.Fatalf("inputs %v, want the two", inputs)
	}
	if ws := r.sink.Writes(); len(ws) != 1 {
		t.Fatalf("sink writes %v, want one", ws)
	}
}
