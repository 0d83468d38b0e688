package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestItemsCommands(t *testing.T) {
	t.Parallel()
	dir, data := quickstart(t)
	if r := keep(t, "run", "--data", data, filepath.Join(dir, "workflow.js")); r.code != 0 {
		t.Fatal(r.err)
	}
	r := keep(t, "items", "--data", data, "quickstart-orders", "--json")
	var items []map[string]any
	if err := json.Unmarshal([]byte(r.out), &items); err != nil || len(items) != 3 {
		t.Fatalf("items: %v %s", err, r.out)
	}
	for _, f := range []string{"key", "title", "kind", "status", "attempt", "source", "type", "externalId", "updatedAt"} {
		if _, ok := items[0][f]; !ok {
			t.Errorf("items lack %q", f)
		}
	}
	key := items[0]["key"].(string)
	if r := keep(t, "reprocess", "--data", data, key); r.code != 0 || !strings.Contains(r.out, "attempt 2") {
		t.Fatalf("reprocess: %d %s %s", r.code, r.out, r.err)
	}
	if r := keep(t, "run", "--data", data, filepath.Join(dir, "workflow.js")); r.code != 0 {
		t.Fatal(r.err)
	}
	r = keep(t, "show", "item", "--data", data, key, "--json")
	var d struct {
		Item     map[string]any
		Attempts []struct {
			Attempt   int
			Status    string
			Version   string
			Mutations []map[string]any
		}
	}
	if err := json.Unmarshal([]byte(r.out), &d); err != nil || len(d.Attempts) != 2 {
		t.Fatalf("show item: %v %s %s", err, r.out, r.err)
	}
	if d.Attempts[0].Attempt != 1 || d.Attempts[1].Status != "done" || d.Attempts[1].Version != "1.0" || len(d.Attempts[1].Mutations) != 1 || d.Attempts[1].Mutations[0]["status"] != "applied" {
		t.Fatalf("attempts %+v", d.Attempts)
	}
	r = keep(t, "show", "item", "--data", data, key)
	if !strings.Contains(r.out, "Attempt 1") || !strings.Contains(r.out, "Attempt 2") || !strings.Contains(r.out, "← current") {
		t.Fatalf("show item text:\n%s", r.out)
	}
	// The tree: the writes of the last attempt hang under └─ without a
	// stem (issue 12: "│  ├─" was drawn under "└─").
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "   └─ files.write") || !strings.Contains(r.out, "\n│  └─ files.write") {
		t.Fatalf("show item tree:\n%s", r.out)
	}
	// show input takes the input's id, its key, and the id `keep inputs`
	// prints beside its source (a person copies that one).
	r = keep(t, "inputs", "--data", data, "quickstart-orders")
	ext := items[0]["externalId"].(string)
	if !strings.Contains(r.out, "files/file  "+ext) {
		t.Fatalf("keep inputs does not show %q:\n%s", ext, r.out)
	}
	for _, ref := range []string{items[0]["id"].(string), key, ext} {
		r = keep(t, "show", "input", "--data", data, ref, "--json")
		var in struct {
			Input   map[string]any
			Outputs []map[string]any
		}
		if err := json.Unmarshal([]byte(r.out), &in); r.code != 0 || err != nil || in.Input["key"] != key || len(in.Outputs) != 2 {
			t.Fatalf("show input %s: exit %d %v\n%s%s", ref, r.code, err, r.out, r.err)
		}
	}
	if r := keep(t, "show", "input", "--data", data, "nope"); r.code != 1 || !strings.Contains(r.err, `there is no item "nope": name it by its id or its key, SOURCE:TYPE:ID`) {
		t.Fatalf("show input unknown: %d %s", r.code, r.err)
	}
	if r := keep(t, "skip", "--data", data, "nope"); r.code != 1 || !strings.Contains(r.err, `there is no item "nope"`) {
		t.Fatalf("skip unknown: %d %s", r.code, r.err)
	}
	if r := keep(t, "deploy", "--grant", "--data", data, "--reprocess=all", filepath.Join(dir, "workflow.js")); r.code != exitUsageCode {
		t.Fatalf("--reprocess without --major: %d %s", r.code, r.err)
	}
	if r := keep(t, "deploy", "--grant", "--data", data, "--major", filepath.Join(dir, "workflow.js")); r.code != 1 || !strings.Contains(r.err, "--reprocess=none") || !strings.Contains(r.err, "--reprocess=all") || !strings.Contains(r.err, "KEY,KEY") {
		t.Fatalf("--major without a choice (not on a terminal): %d %s", r.code, r.err)
	}
	if r := keep(t, "deploy", "--grant", "--data", data, "--major", "--reprocess=nope", filepath.Join(dir, "workflow.js")); r.code != 1 || !strings.Contains(r.err, "nothing was deployed") {
		t.Fatalf("--reprocess with an unknown key: %d %s", r.code, r.err)
	}
	if r := keep(t, "deploy", "--grant", "--data", data, "--major", "--reprocess=all", filepath.Join(dir, "workflow.js")); r.code != 0 || !strings.Contains(r.out, "version 2.0") || !strings.Contains(r.out, "3 items start a new attempt") {
		t.Fatalf("--major --reprocess=all: %d %s %s", r.code, r.out, r.err)
	}
	if r := keep(t, "run", "--data", data, filepath.Join(dir, "workflow.js")); r.code != 0 || strings.Count(r.out, "applied") != 7 {
		t.Fatalf("after start fresh: %s", r.out)
	}
}
