package maintainer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testsink"
)

// Item 2 of issue 22: the replay that judges a repair judges a person's
// keep deploy --minor too. A minor version that maps the list an item
// script iterates keeps the withItem call's text, but every done item
// would get another id and be written again: refused, naming the items.
// A major version says the same before it is deployed; a minor version
// that changes nothing done is deployed.
func TestDeployMinorIsJudgedByReplayingDoneWork(t *testing.T) {
	sink := testsink.New()
	t.Cleanup(sink.Close)
	dir := t.TempDir()
	r := &rig{t: t, dir: dir, sink: sink}
	r.keep = r.cli
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(sink.AllowTOML()), 0o644)
	jobs, _ := json.Marshal([]map[string]string{{"id": "1", "customer": "ann"}, {"id": "2", "customer": "cy"}})
	os.WriteFile(filepath.Join(dir, "jobs.json"), jobs, 0o644)
	src := strings.ReplaceAll(taskScript, "%SINK%", sink.URL)
	os.WriteFile(filepath.Join(dir, "orders.js"), []byte(src), 0o644)
	if out, code := r.keep("run", "orders.js"); code != 0 {
		t.Fatalf("run: %d %s", code, out)
	}
	if n := len(sink.Writes()); n != 2 {
		t.Fatalf("%d writes", n)
	}
	mapped := strings.Replace(src, `.content)) {`, `.content).map(j => ({ ...j, id: "r2-" + j.id }))) {`, 1)
	os.WriteFile(filepath.Join(dir, "mapped.js"), []byte(mapped), 0o644)
	out, code := r.keep("deploy", "--minor", "--name", "orders", "mapped.js")
	if code == 0 || !strings.Contains(out, "a new item order:r2-1") || !strings.Contains(out, "a new item order:r2-2") || !strings.Contains(out, "items order:1, order:2 (not entered again)") || !strings.Contains(out, "2 piece(s) of done work would get other ids") || !strings.Contains(out, "Nothing was deployed") {
		t.Fatalf("the minor version was not refused with the items named: %d\n%s", code, out)
	}
	if st, _ := r.keep("status", "orders", "--json"); !strings.Contains(st, `"version": "1.0"`) {
		t.Fatalf("another version is active:\n%s", st)
	}
	// A major version that gives done work other ids waits for consent
	// (issue 39; ch 12 §12.6): refused without --accept-orphans.
	out, code = r.keep("deploy", "--major", "--reprocess=none", "--name", "orders", "mapped.js")
	if code == 0 || !strings.Contains(out, "2 piece(s) of done work would get other ids") || !strings.Contains(out, "--accept-orphans") {
		t.Fatalf("the major version was deployed without consent, or does not say what changes: %d\n%s", code, out)
	}
	out, code = r.keep("deploy", "--major", "--reprocess=none", "--accept-orphans", "--name", "orders", "mapped.js")
	if code != 0 || !strings.Contains(out, "2 piece(s) of done work would get other ids") {
		t.Fatalf("the major version does not say what changes: %d\n%s", code, out)
	}
	harmless := strings.Replace(src, `ctx.log("shipped to "`, `ctx.log("shipped, to "`, 1)
	os.WriteFile(filepath.Join(dir, "harmless.js"), []byte(harmless), 0o644)
	r.keep("deploy", "--major", "--reprocess=none", "--name", "orders", "orders.js") // back to the ids of done work
	if out, code := r.keep("deploy", "--minor", "--name", "orders", "harmless.js"); code != 0 {
		t.Fatalf("a minor version that changes nothing done was refused: %s", out)
	}
	if n := len(sink.Writes()); n != 2 {
		t.Fatalf("%d writes: a deploy's replay sent something", n)
	}
}
