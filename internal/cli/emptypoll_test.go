package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testsink"
)

// A consumer run whose prepare reserved nothing (the first poll after a
// deploy, before the producer published) is not listed: keep run counts
// the producer's run and the consumer's run that took the event, keep runs
// lists those two, and the write went once (issue 27).
func TestAnEmptyConsumerPollIsNotListedAsARun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sink := testsink.New()
	defer sink.Close()
	script := `export default Keep.workflow({
  name: "polls",
  topics: { "t": {} },
  producers: { p: { publishes: ["t"], schedule: { interval: "1h" }, handler: async (ctx, s) => {
    const id = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "Tick 1" });
    await ctx.publish("t", { inputId: id, payload: { n: 1 } });
    return s; } } },
  consumers: { c: Keep.consumer({ subscribe: ["t"],
    async prepare(ctx) { const [e] = await ctx.peek("t"); if (!e) return { reservations: [] };
      return { reservations: [{ topic: "t", ids: [e.messageId] }], data: e.payload, ui: { title: "Send tick " + e.payload.n } }; },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "` + sink.URL + `/ticks", json: p.data }); },
  }) },
});`
	if err := os.WriteFile(filepath.Join(dir, "wf.js"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	r := keep(t, "run", "--data", data, "--config", sinkConfig(t, dir, sink), filepath.Join(dir, "wf.js"))
	if r.code != 0 {
		t.Fatalf("keep run: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if !strings.Contains(r.out, "workflow polls (version 1.0): idle, 2 runs") {
		t.Fatalf("keep run counts the empty poll (or misses a run):\n%s", r.out)
	}
	if n := len(sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink: %d", n)
	}
	r = keep(t, "runs", "polls", "--data", data, "--json")
	var runs []struct{ Handler, Status, Title string }
	if err := json.Unmarshal([]byte(r.out), &runs); err != nil {
		t.Fatalf("keep runs --json: %v\n%s%s", err, r.out, r.err)
	}
	handlers := []string{}
	for _, run := range runs {
		handlers = append(handlers, run.Handler)
		if run.Status != "committed" || (run.Handler == "c" && run.Title != "Send tick 1") {
			t.Errorf("run %+v", run)
		}
	}
	if strings.Join(handlers, ",") != "c,p" {
		t.Fatalf("keep runs lists the runs of %v, want c (the one that took the tick), then p", handlers)
	}
}
