package decide

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testsink"
)

// TestReprocessOnAConsumerInputsCard is issue 24 #7: a consumer run
// blocked on a write whose outcome is unknown holds an input that needs
// attention; its card offered only It didn't happen and Skip, though the
// text said "skip or reprocess" (ch 12 §12.7 lists Reprocess). The card
// offers Reprocess now, and `keep resolve --reprocess` starts a new
// attempt of the input in one decision: the blocked run is closed, its
// write not waited on, and the new attempt writes again under its own key.
func TestReprocessOnAConsumerInputsCard(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	src := consumerScript(sink, `await ctx.http.request({ method: "POST", url: "%SINK%/write/a", json: {} })`)
	must(t, os.WriteFile(filepath.Join(dir, "wf.js"), []byte(src), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(sink.AllowTOML()), 0o644))

	sink.Queue(testsink.Status500) // applied, then 500: the outcome is unknown, keep cannot check it
	code, out := keepIn(t, dir, "run", "--data", data, "wf.js")
	if code != 3 || sink.Requests() != 1 {
		t.Fatalf("keep run: exit %d, %d requests\n%s", code, sink.Requests(), out)
	}
	run := blockedRun(t, data)
	_, out = keep(t, "show", "run", "--data", data, "--json", run)
	var shown struct {
		Card struct {
			Actions []string `json:"actions"`
		} `json:"card"`
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil || !slices.Contains(shown.Card.Actions, "reprocess") {
		t.Fatalf("the card of run %s does not offer reprocess: %v %s", run, err, out)
	}
	_, out = keep(t, "inputs", "--data", data, "--json", "decide")
	if !strings.Contains(out, `"needs_attention"`) {
		t.Fatalf("the input does not need attention:\n%s", out)
	}

	code, out = keep(t, "resolve", "--data", data, run, "--reprocess")
	if code != 0 || !strings.Contains(out, "attempt 2 started") || !strings.Contains(out, "carried out; decide is idle") {
		t.Fatalf("keep resolve --reprocess: exit %d\n%s", code, out)
	}
	ws := sink.Writes()
	if sink.Requests() != 2 || len(ws) != 2 || ws[0].Key == ws[1].Key {
		t.Fatalf("at the sink: %d requests, writes %+v (want 2 writes under two keys: the new attempt writes anew)", sink.Requests(), ws)
	}
	rs := runs(t, data)
	statuses := map[string]string{}
	for _, r := range rs {
		statuses[r.ID] = r.Status
	}
	if statuses[run] != "skipped" {
		t.Fatalf("the blocked run is %q, want skipped: %+v", statuses[run], rs)
	}
	_, out = keep(t, "inputs", "--data", data, "--json", "decide")
	if !strings.Contains(out, `"done"`) {
		t.Fatalf("the input is not done after its new attempt:\n%s", out)
	}
	// A second Reprocess on the closed run is refused, saying why.
	code, out = keep(t, "resolve", "--data", data, run, "--reprocess")
	if code == 0 || !strings.Contains(out, "is not blocked") {
		t.Fatalf("a second reprocess: exit %d\n%s", code, out)
	}
}
