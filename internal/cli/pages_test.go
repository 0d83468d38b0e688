package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestListsShowTheNewestPageAndSayHowToSeeMore (issue 44): keep inputs,
// outputs, runs and items show the newest --limit rows and say how many
// more there are and how to see them; --all shows all; --json keeps stdout
// one JSON array and says the rest on stderr.
func TestListsShowTheNewestPageAndSayHowToSeeMore(t *testing.T) {
	t.Parallel()
	dir, data := quickstart(t)
	if r := keep(t, "run", "--data", data, filepath.Join(dir, "workflow.js")); r.code != 0 {
		t.Fatalf("run: exit %d\n%s%s", r.code, r.out, r.err)
	}
	wf := "quickstart-orders"
	r := keep(t, "inputs", "--data", data, wf, "--limit", "2")
	if r.code != 0 || strings.Count(r.out, "files/file") != 2 || !strings.Contains(r.out, "showing the newest 2 of 3; 1 more: keep inputs "+wf+" --all, or the next page: keep inputs "+wf+" --limit 2 --cursor ") {
		t.Fatalf("inputs --limit 2: exit %d\n%s%s", r.code, r.out, r.err)
	}
	// The cursor printed shows the rest.
	cursor := strings.Fields(r.out[strings.Index(r.out, "--cursor "):])[1]
	if r := keep(t, "inputs", "--data", data, wf, "--limit", "2", "--cursor", cursor); r.code != 0 || strings.Count(r.out, "files/file") != 1 || strings.Contains(r.out, "showing") {
		t.Fatalf("inputs --cursor: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if r := keep(t, "inputs", "--data", data, wf, "--all", "--limit", "1"); r.code != 0 || strings.Count(r.out, "files/file") != 3 || strings.Contains(r.out, "showing") {
		t.Fatalf("inputs --all: exit %d\n%s%s", r.code, r.out, r.err)
	}
	for _, list := range []string{"inputs", "outputs", "runs", "items"} {
		r := keep(t, list, "--data", data, wf, "--limit", "1", "--json")
		var rows []map[string]any
		if err := json.Unmarshal([]byte(r.out), &rows); r.code != 0 || err != nil || len(rows) != 1 || !strings.Contains(r.err, "more: keep "+list+" "+wf+" --all") {
			t.Fatalf("%s --limit 1 --json: exit %d %v\nstdout %s\nstderr %s", list, r.code, err, r.out, r.err)
		}
		r = keep(t, list, "--data", data, wf, "--all", "--json")
		if err := json.Unmarshal([]byte(r.out), &rows); r.code != 0 || err != nil || len(rows) < 3 || r.err != "" {
			t.Fatalf("%s --all --json: exit %d %v, %d rows\nstderr %s", list, r.code, err, len(rows), r.err)
		}
	}
	// --limit 0 meant every row before lists were paged (scripts call
	// keep runs WF --limit 0): it still does.
	if r := keep(t, "inputs", "--data", data, wf, "--limit", "0"); r.code != 0 || strings.Count(r.out, "files/file") != 3 || strings.Contains(r.out, "showing") {
		t.Fatalf("inputs --limit 0: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if r := keep(t, "inputs", "--data", data, wf, "--limit", "1001"); r.code != exitUsageCode || !strings.Contains(r.err, "--limit 1001: use a number from 1 to 1000") {
		t.Fatalf("inputs --limit 1001: exit %d %s", r.code, r.err)
	}
	if r := keep(t, "inputs", "--data", data, wf, "--cursor", "nonsense"); r.code == 0 || !strings.Contains(r.err, "is not one keep gave") {
		t.Fatalf("inputs --cursor nonsense: exit %d %s", r.code, r.err)
	}
}
