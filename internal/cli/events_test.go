package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// keep events shows a workflow's topics (counts by state) and its events,
// each with its payload and causes, paged; skip-pending and reset-state are
// confirmed, carried out, and recorded in the decision log (issue 12 #8).
func TestEventsAndTheTopicControls(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	script := `export default Keep.workflow({
  name: "queue",
  topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    const runs = (state && state.runs || 0) + 1;
    for (const n of [1, 2, 3]) {
      const id = ctx.registerInput({ source: "system", type: "schedule", id: "job-" + n, title: "Job " + n });
      await ctx.publish("job", { messageId: "job-" + n, inputId: id, payload: { n, runs } });
    }
    return { runs };
  } } },
});`
	if err := os.WriteFile(filepath.Join(dir, "wf.js"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := keep(t, "run", "--data", data, filepath.Join(dir, "wf.js")); r.code != 0 {
		t.Fatalf("run: %d %s %s", r.code, r.out, r.err)
	}
	type view struct {
		Topics []struct {
			Name                                 string
			Pending, Reserved, Consumed, Skipped int
		}
		Producers []struct {
			Name       string
			StateBytes int
		}
		Events []struct {
			ID        int64
			MessageID string
			Status    string
			Payload   map[string]any
			CausedBy  []struct{ ID, Key, Title string }
		}
		Next int64
	}
	events := func(args ...string) view {
		t.Helper()
		r := keep(t, append([]string{"events", "--data", data, "queue", "--json"}, args...)...)
		var v view
		if err := json.Unmarshal([]byte(r.out), &v); r.code != 0 || err != nil {
			t.Fatalf("events %v: exit %d %v\n%s%s", args, r.code, err, r.out, r.err)
		}
		return v
	}
	v := events()
	if len(v.Topics) != 1 || v.Topics[0].Pending != 3 || len(v.Events) != 3 || v.Events[0].Payload["n"] != float64(1) ||
		len(v.Events[0].CausedBy) != 1 || v.Events[0].CausedBy[0].Title != "Job 1" || len(v.Producers) != 1 || v.Producers[0].StateBytes == 0 {
		t.Fatalf("events: %+v", v)
	}
	page := events("--status", "pending", "--limit", "2")
	if len(page.Events) != 2 || page.Next == 0 {
		t.Fatalf("first page: %+v", page)
	}
	if rest := events("--status", "pending", "--after", itoa(page.Next)); len(rest.Events) != 1 || rest.Events[0].MessageID != "job-3" {
		t.Fatalf("second page: %+v", rest)
	}
	if r := keep(t, "events", "--data", data, "queue", "--status", "lost"); r.code != 1 || !strings.Contains(r.err, `no event state "lost"`) {
		t.Fatalf("a bad state: %d %s", r.code, r.err)
	}
	// Without a terminal and without --yes, nothing changes.
	if r := keep(t, "skip-pending", "--data", data, "queue", "job"); r.code != exitUsageCode || !strings.Contains(r.err, "pass --yes") {
		t.Fatalf("skip-pending unconfirmed: %d %s", r.code, r.err)
	}
	if v := events(); v.Topics[0].Pending != 3 {
		t.Fatalf("an unconfirmed skip changed something: %+v", v.Topics)
	}
	if r := keep(t, "skip-pending", "--data", data, "--yes", "queue", "jobs"); r.code != 1 || !strings.Contains(r.err, `no events in a topic "jobs"`) || !strings.Contains(r.err, "job") {
		t.Fatalf("skip-pending of a misspelt topic: %d %s %s", r.code, r.out, r.err)
	}
	r := keep(t, "skip-pending", "--data", data, "--by", "alice", "--yes", "queue", "job")
	if r.code != 0 || !strings.Contains(r.out, "3 pending events skipped") {
		t.Fatalf("skip-pending: %d %s %s", r.code, r.out, r.err)
	}
	if v := events(); v.Topics[0].Skipped != 3 || v.Topics[0].Pending != 0 {
		t.Fatalf("after skip-pending: %+v", v.Topics)
	}
	if r := keep(t, "inputs", "--data", data, "queue"); strings.Count(r.out, "skipped") != 3 {
		t.Fatalf("the inputs do not show skipped:\n%s", r.out)
	}
	// Reset state: the producer runs again at once from scratch; the events
	// it publishes again keep their status (nothing is done twice).
	r = keep(t, "reset-state", "--data", data, "--yes", "queue", "p")
	if r.code != 0 || !strings.Contains(r.out, "state reset") || !strings.Contains(r.out, "carried out") {
		t.Fatalf("reset-state: %d %s %s", r.code, r.out, r.err)
	}
	v = events()
	if v.Topics[0].Skipped != 3 || v.Events[0].Payload["runs"] != float64(1) {
		t.Fatalf("after reset-state: %+v", v)
	}
	if r := keep(t, "reset-state", "--data", data, "--yes", "queue", "nope"); r.code != 1 || !strings.Contains(r.err, `no handler "nope"`) {
		t.Fatalf("reset an unknown handler: %d %s", r.code, r.err)
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
