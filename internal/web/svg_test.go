package web

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/apitype"
)

const hostile = `</text><script>alert(1)</script><a href="javascript:x">&amp;'`

// wellFormed parses an SVG as XML and lists its elements: a text of the
// data that got out of its escaping shows as an element of its own.
func wellFormed(t *testing.T, svg string) []string {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	var els []string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return els
		}
		if err != nil {
			t.Fatalf("not well-formed SVG: %v\n%s", err, svg)
		}
		if s, ok := tok.(xml.StartElement); ok {
			els = append(els, s.Name.Local)
		}
	}
}

func noScript(t *testing.T, what string, els []string, svg string) {
	t.Helper()
	for _, e := range els {
		if e == "script" {
			t.Fatalf("%s: a hostile name became a <script> element:\n%s", what, svg)
		}
	}
	if !strings.Contains(svg, "&lt;script&gt;") {
		t.Fatalf("%s: the hostile text is not shown escaped:\n%s", what, svg)
	}
}

// The pictures draw names, targets, methods and errors that are data (a
// script's, a target's answer): each is escaped, and the numbers are the
// API's.
func TestPicturesEscapeHostileTextAndShowTheNumbers(t *testing.T) {
	t.Parallel()
	g := apitype.Graph{Workflow: "w" + hostile, Nodes: []apitype.GraphNode{
		{ID: "producer:" + hostile, Kind: "producer", Name: hostile, Column: 0, DoneToday: 4},
		{ID: "topic:t", Kind: "topic", Name: "t" + hostile, Column: 1, Pending: 7, Reserved: 2},
		{ID: "consumer:c", Kind: "consumer", Name: "c", Column: 2, Pending: 7, Reserved: 2, Blocked: 1, BlockedRun: "r" + hostile},
		{ID: "connector:http.request", Kind: "connector", Name: "http.request", Column: 3, Blocked: 1, BlockedRun: "r1", Targets: []string{"https://x.example/" + hostile}},
		{ID: "webhook:gh", Kind: "webhook", Name: "gh" + hostile, Column: 0, Intake: &apitype.GraphIntake{Received: 9, Accepted: 5, Duplicate: 1, Refused: 2, Failed: 1, Held: 3, LastReceived: "2026-11-28T10:42:00Z"}},
		{ID: "api:t", Kind: "api", Name: "t" + hostile, Column: 0, Intake: &apitype.GraphIntake{Received: 6, Accepted: 6}},
	}, Edges: []apitype.GraphEdge{{From: "producer:" + hostile, To: "topic:t"}, {From: "topic:t", To: "consumer:c"}, {From: "consumer:c", To: "connector:http.request", Kind: "write"},
		{From: "producer:" + hostile, To: "connector:http.request", Kind: "read"}}}
	svg := string(graphSVG(g))
	els := wellFormed(t, svg)
	noScript(t, "graph", els, svg)
	for _, s := range []string{`data-node="topic:t" data-pending="7" data-reserved="2" data-blocked="0" data-done="0"`, `class="node consumer blocked"`,
		`⚠ BLOCKED: open its card`, `data-done="4"`, `7 pending · 2 reserved`,
		`data-node="webhook:gh" data-pending="0" data-reserved="0" data-blocked="0" data-done="0" data-received="9" data-held="3" data-refused="2" data-failed="1" data-last="2026-11-28T10:42:00Z"`,
		`9 received today · 3 held`, `2 refused · 1 failed today`, `last received Nov 28 10:42`, `data-node="api:t"`, `6 posted today`,
		`class="edge write" data-from="consumer:c" data-to="connector:http.request" data-kind="write"`, `data-kind="read"`, `>reads</text>`, `writes (a handler's mutate)`} {
		if !strings.Contains(svg, s) {
			t.Errorf("graph lacks %s:\n%s", s, svg)
		}
	}
	// Work, a write and a read (and the legend's two); only the read dashed and labelled.
	if n, r := strings.Count(svg, `<path class="edge`), strings.Count(svg, `<path class="edge read"`); n != 6 || r != 2 || strings.Count(svg, `>reads</text>`) != 1 {
		t.Errorf("graph: %d edges, %d reads, %d read labels; want 6 (2 of them the legend's), 2, 1", n, r, strings.Count(svg, `>reads</text>`))
	}
	// Columns by role: the producer left of the topic, left of the consumer, left of the connector.
	xs := []int{}
	for _, id := range []string{"producer:", "topic:t", "consumer:c", "connector:http.request"} {
		i := strings.Index(svg, `data-node="`+id)
		j := strings.Index(svg[i:], "translate(")
		xs = append(xs, i+j)
		var x int
		if _, err := fmtSscan(svg[i+j+len("translate("):], &x); err != nil {
			t.Fatal(err)
		}
		xs[len(xs)-1] = x
	}
	for i := 1; i < len(xs); i++ {
		if xs[i] <= xs[i-1] {
			t.Errorf("columns out of order: x %v", xs)
		}
	}

	a := apitype.Activity{Workflow: hostile, From: "2026-11-27T21:00:00Z", To: "2026-11-28T21:00:00Z"}
	for i := 0; i < 24; i++ {
		a.Hours = append(a.Hours, apitype.ActivityHour{Start: "2026-11-27T21:00:00Z"})
	}
	a.Hours[3] = apitype.ActivityHour{Start: "2026-11-28T00:00:00Z", Inputs: 5, Writes: 3, Failures: 1, BlockedMinutes: 30}
	a.Hours[4] = apitype.ActivityHour{Start: "2026-11-28T01:00:00Z", Inputs: 2}
	for _, small := range []bool{false, true} {
		svg := string(activitySVG(a, small))
		wellFormed(t, svg)
		for _, s := range []string{`data-series="inputs" data-total="7"`, `data-series="writes" data-total="3"`, `data-series="failures" data-total="1"`,
			`data-series="blocked" data-total="30"`, `data-hour="2026-11-28T00:00:00Z" data-n="5"`} {
			if !strings.Contains(svg, s) {
				t.Errorf("activity (small %v) lacks %s:\n%s", small, s, svg)
			}
		}
		if strings.Contains(svg, "<script") {
			t.Fatalf("activity: hostile text unescaped:\n%s", svg)
		}
	}

	trace := []apitype.TraceLine{
		{At: 1000, Kind: "phase", Phase: "preparing"},
		{At: 1010, Phase: "preparing", Kind: "call", Method: "http.request", Duration: 40, Outcome: "ok"},
		{At: 1100, Kind: "phase", Phase: "mutating"},
		{At: 1110, Phase: "mutating", Kind: "call", Method: "http.request", Duration: 300, Outcome: "uncertain: " + hostile},
		{At: 1500, Phase: "mutating", Kind: "call", Method: "http.request.reconcile", Duration: 20, Outcome: "not-found"},
		{At: 1600, Phase: "mutating", Kind: "error", Outcome: "indeterminate", Text: hostile},
	}
	svg = string(timelineSVG(trace))
	els = wellFormed(t, svg)
	noScript(t, "timeline", els, svg)
	for _, s := range []string{`data-phase="preparing" data-ms="100"`, `data-phase="mutating" data-ms="500"`, `data-method="http.request" data-ms="300"`,
		`class="call failed"`, `class="call reconcile"`, `600 ms</text>`, "stopped: "} {
		if !strings.Contains(svg, s) {
			t.Errorf("timeline lacks %s:\n%s", s, svg)
		}
	}
}

func fmtSscan(s string, x *int) (int, error) { return fmt.Sscan(strings.SplitN(s, ",", 2)[0], x) }

// The page draws its day from the week it read: the same hours, bounds and
// totals the API answers for 24 hours.
func TestTheDayIsTheWeeksLastHours(t *testing.T) {
	t.Parallel()
	week := apitype.Activity{Workflow: "w", From: "2026-11-21T10:00:00Z", To: "2026-11-28T10:00:00Z"}
	start := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for i := range 168 {
		week.Hours = append(week.Hours, apitype.ActivityHour{Start: start.Add(time.Duration(i) * time.Hour).Format(time.RFC3339), Inputs: i})
	}
	day := lastHours(week, 24)
	if len(day.Hours) != 24 || day.From != "2026-11-27T10:00:00Z" || day.To != week.To || day.Hours[0].Inputs != 144 || day.Hours[23].Inputs != 167 {
		t.Fatalf("the day is %s to %s with %d hours (%d … %d inputs)", day.From, day.To, len(day.Hours), day.Hours[0].Inputs, day.Hours[len(day.Hours)-1].Inputs)
	}
	if len(week.Hours) != 168 || week.From != "2026-11-21T10:00:00Z" {
		t.Fatal("taking the day changed the week")
	}
}
