package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testsink"
)

// TestADeployThatLeavesEventsWaitingSaysSo: a version that drops the
// consumer of a topic open to the event API, while events posted there
// wait, says how many wait, on which topic, and the command that skips
// them; keep skip-pending then does what it says, and nothing is written.
func TestADeployThatLeavesEventsWaitingSaysSo(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := sinkConfig(t, dir, sink)
	v1 := `export default Keep.workflow({ name: "orders",
  topics: { "order.placed": { from: "api" } },
  consumers: { c: Keep.consumer({ subscribe: ["order.placed"],
    async prepare(ctx) { const [e] = await ctx.peek("order.placed"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "order.placed", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, prepared) { await ctx.http.request({ method: "POST", url: "` + sink.URL + `/write/" + prepared.data.order, json: prepared.data }) } }) } })`
	v2 := `export default Keep.workflow({ name: "orders",
  topics: { notes: {} },
  producers: { p: { publishes: ["notes"], schedule: { interval: "1h" }, handler: async () => {} } } })`
	file := filepath.Join(dir, "orders.js")
	deploy := func(src string, args ...string) result {
		t.Helper()
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return keep(t, append(append([]string{"deploy", "--data", data, "--config", cfg, "--grant"}, args...), file)...)
	}
	if r := deploy(v1); r.code != 0 || strings.Contains(r.out, "waiting") {
		t.Fatalf("deploy v1: %d\n%s\n%s", r.code, r.out, r.err)
	}
	if r := keep(t, "pause", "--data", data, "orders"); r.code != 0 {
		t.Fatalf("pause: %d %s", r.code, r.err)
	}
	for _, id := range []string{"1", "2"} {
		if r := keep(t, "publish", "--data", data, "orders", "order.placed", "--id", id, "--title", "Order "+id, "--json", `{"order": `+id+`}`); r.code != 0 {
			t.Fatalf("publish: %d\n%s\n%s", r.code, r.out, r.err)
		}
	}
	r := deploy(v2, "--major", "--reprocess=none")
	want := "waiting: 2 events wait on topic order.placed, which no consumer of version 2.0 reads (c read it), and the event API no longer takes events for it: nothing will take them. Skip them with `keep skip-pending orders order.placed`"
	if r.code != 0 || !strings.Contains(r.out, want) {
		t.Fatalf("deploy v2: %d\n%s\n%s\nwant it to say: %s", r.code, r.out, r.err, want)
	}
	if r := keep(t, "skip-pending", "--data", data, "--yes", "orders", "order.placed"); r.code != 0 {
		t.Fatalf("skip-pending: %d\n%s\n%s", r.code, r.out, r.err)
	}
	if r := keep(t, "events", "--data", data, "orders", "--topic", "order.placed", "--status", "skipped", "--json"); strings.Count(r.out, `"status": "skipped"`) != 2 {
		t.Fatalf("events after skip-pending:\n%s%s", r.out, r.err)
	}
	if ws := sink.Writes(); len(ws) != 0 {
		t.Fatalf("sink writes %v", ws)
	}
}
