package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// Issue 42: keep graph and keep activity print what the page draws (the
// same API), and the card's do: lines come safest first, each saying what
// it risks, in the page's order.
func TestGraphActivityAndTheCardsOrderFromTheCLI(t *testing.T) {
	t.Parallel()
	_, _, data, r := blockedHook(t, "")
	if r.code != 3 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	// Skip (nothing sent) before It didn't happen and Reprocess (sent again).
	skip, didnt, again := strings.Index(r.out, "--skip   (risk: the write may be missing"), strings.Index(r.out, "--didnt-happen   (risk: the write may happen twice"), strings.Index(r.out, "--reprocess   (risk: the write may happen twice: a new attempt sends a new write with a new key")
	if skip < 0 || didnt < skip || again < didnt {
		t.Fatalf("the card's choices are not safest first with their risk:\n%s", r.out)
	}

	g := keep(t, "graph", "--data", data, "hook")
	if g.code != 0 || !strings.Contains(g.out, "consumer c") || !strings.Contains(g.out, "topic:job") || !strings.Contains(g.out, "connector:http.request (writes)") {
		t.Fatalf("keep graph: %d\n%s\n%s", g.code, g.out, g.err)
	}
	var graph struct {
		Nodes []struct {
			ID                           string
			Reserved, Blocked, DoneToday int
		}
	}
	if err := json.Unmarshal([]byte(keep(t, "graph", "--data", data, "hook", "--json").out), &graph); err != nil {
		t.Fatal(err)
	}
	counts := map[string][3]int{}
	for _, n := range graph.Nodes {
		counts[n.ID] = [3]int{n.Reserved, n.Blocked, n.DoneToday}
	}
	if counts["producer:p"] != [3]int{0, 0, 1} || counts["consumer:c"] != [3]int{1, 1, 0} || counts["connector:http.request"] != [3]int{0, 1, 0} {
		t.Fatalf("keep graph --json: reserved, blocked, done today %v", counts)
	}

	a := keep(t, "activity", "--data", data, "hook", "--hours", "168")
	if a.code != 0 || !strings.Contains(a.out, "INPUTS") {
		t.Fatalf("keep activity: %d\n%s\n%s", a.code, a.out, a.err)
	}
	var act struct {
		Hours []struct{ Inputs, Writes int }
	}
	if err := json.Unmarshal([]byte(keep(t, "activity", "--data", data, "hook", "--json").out), &act); err != nil {
		t.Fatal(err)
	}
	inputs, writes := 0, 0
	for _, h := range act.Hours {
		inputs, writes = inputs+h.Inputs, writes+h.Writes
	}
	if len(act.Hours) != 24 || inputs != 1 || writes != 0 {
		t.Fatalf("keep activity --json: %d hours, %d inputs, %d writes; want 24, 1, 0", len(act.Hours), inputs, writes)
	}
	if r := keep(t, "activity", "--data", data, "hook", "--hours", "0"); r.code == 0 || !strings.Contains(r.err, "168 for a week") {
		t.Fatalf("--hours 0: %d %s", r.code, r.err)
	}
}
