package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testsink"
)

// TestPublishFromTheCLI: keep publish posts an event through keep's API
// (served in this process: no keep serve), carries it out at once, and
// the same --id again writes nothing new: the sink sees one write.
func TestPublishFromTheCLI(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := sinkConfig(t, dir, sink)
	src := `export default Keep.workflow({ name: "orders",
  topics: { "order.placed": { from: "api" }, notes: {} },
  producers: { p: { publishes: ["notes"], schedule: { interval: "1h" }, handler: async () => {} } },
  consumers: { c: Keep.consumer({ subscribe: ["order.placed"],
    async prepare(ctx) { const [e] = await ctx.peek("order.placed"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "order.placed", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, prepared) { await ctx.http.request({ method: "POST", url: "` + sink.URL + `/write/" + prepared.data.order, json: prepared.data }) } }) } })`
	if err := os.WriteFile(filepath.Join(dir, "orders.js"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := keep(t, "run", "--data", data, "--config", cfg, filepath.Join(dir, "orders.js")); r.code != 0 {
		t.Fatalf("run: %d\n%s\n%s", r.code, r.out, r.err)
	}
	publish := func(args ...string) result {
		return keep(t, append([]string{"publish", "--data", data, "--config", cfg, "orders"}, args...)...)
	}
	r := publish("order.placed", "--id", "1042", "--title", "Order 1042 from alice@example.com", "--json", `{"order": 1042, "total": "12.50"}`)
	if r.code != 0 || !strings.Contains(r.out, "event 1042 posted to topic order.placed of orders") || !strings.Contains(r.out, "carried out") {
		t.Fatalf("publish: %d\n%s\n%s", r.code, r.out, r.err)
	}
	r = publish("order.placed", "--id", "1042", "--title", "Order 1042 again", "--json", `{"order": 1042}`)
	if r.code != 0 || !strings.Contains(r.out, "already posted") {
		t.Fatalf("publish again: %d\n%s\n%s", r.code, r.out, r.err)
	}
	if ws := sink.Writes(); len(ws) != 1 || ws[0].Path != "/write/1042" {
		t.Fatalf("sink writes %v, want one to /write/1042", ws)
	}
	if r := keep(t, "inputs", "--data", data, "orders"); !strings.Contains(r.out, "Order 1042 from alice@example.com") || !strings.Contains(r.out, "done") {
		t.Fatalf("inputs: %s", r.out)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"notes", "--id", "1", "--title", "t"}, `declare it "notes": { from: "api" }`},
		{[]string{"nope", "--id", "1", "--title", "t"}, `has no topic "nope"`},
		{[]string{"order.placed", "--title", "t"}, "it has no id"},
		{[]string{"order.placed", "--id", "2", "--title", "t", "--json", `{"order": `}, "--json is not JSON"},
		{[]string{"order.placed", "--id", "2", "--title", "t", "--json", `"` + strings.Repeat("x", 1<<20) + `"`}, "over keep's bound of 1 MiB"},
	} {
		if r := publish(c.args...); r.code == 0 || !strings.Contains(r.err, c.says) {
			t.Errorf("keep publish orders %s: %d %q, want an error saying %q", c.args[0], r.code, r.err, c.says)
		}
	}
	if r := keep(t, "publish", "--data", data, "nope", "order.placed", "--id", "1", "--title", "t"); r.code == 0 || !strings.Contains(r.err, `no workflow "nope"`) {
		t.Errorf("unknown workflow: %d %s", r.code, r.err)
	}
	if ws := sink.Writes(); len(ws) != 1 {
		t.Fatalf("sink writes after refused posts %v", ws)
	}
}
