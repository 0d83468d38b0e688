package web

import (
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/apitype"
)

// The pictures of issue 42, drawn here as SVG from the API's answers
// (GET …/graph, …/activity, /runs/{id}): laid out in Go, every text of the
// data (names, titles, methods, targets) escaped, nothing drawn in the
// browser. Each number shown is also in a data- attribute, for the test
// that reads the picture as a person would.

// esc escapes a text of the data for SVG (XML): <, >, &, ' and ".
func esc(s string) string { return template.HTMLEscapeString(s) }

// cut shortens a text to n characters, with an ellipsis.
func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

const (
	nodeW, nodeH = 210, 84
	colGap       = 36
	rowGap       = 14
	graphPad     = 10
)

var kindLabel = map[string]string{"producer": "producer", "webhook": "webhook", "api": "event API", "task": "task", "topic": "topic", "consumer": "consumer", "connector": "connector"}

// graphPos is where a node is drawn (its top left corner).
type graphPos struct{ x, y int }

// legendH is the height of the graph's legend under its nodes.
const legendH = 24

// graphSVG draws a workflow: its nodes in columns by role (what brings work
// in, topics, consumers and tasks, connectors), arrows between them — a
// write solid, a read dashed and labelled "reads" — each node with its
// live counts; a blocked node is outlined in red, says BLOCKED in words
// and links to its card.
func graphSVG(g apitype.Graph) template.HTML {
	at, w, h := graphLayout(g)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="glance graph" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s drawn: %d nodes">`, w, h, w, h, esc(g.Workflow), len(g.Nodes))
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#8a949e"/></marker></defs>`)
	for _, e := range g.Edges {
		graphEdge(&b, e, at)
	}
	for _, n := range g.Nodes {
		graphNode(&b, g.Workflow, n, at[n.ID])
	}
	graphLegend(&b, h-legendH+4)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// graphLayout places each node in its column, one under the other, and
// says the picture's size.
func graphLayout(g apitype.Graph) (at map[string]graphPos, w, h int) {
	at = map[string]graphPos{}
	rows := [4]int{}
	for _, n := range g.Nodes {
		c := min(max(n.Column, 0), 3)
		at[n.ID] = graphPos{graphPad + c*(nodeW+colGap), graphPad + rows[c]*(nodeH+rowGap)}
		rows[c]++
	}
	most := max(rows[0], rows[1], rows[2], rows[3], 1)
	return at, 2*graphPad + 4*nodeW + 3*colGap, 2*graphPad + most*(nodeH+rowGap) - rowGap + legendH
}

// graphEdge draws an arrow; a read (a call of a handler's prepare, next
// or handler) is dashed and says "reads".
func graphEdge(b *strings.Builder, e apitype.GraphEdge, at map[string]graphPos) {
	f, ok1 := at[e.From]
	t, ok2 := at[e.To]
	if !ok1 || !ok2 {
		return
	}
	x1, y1, x2, y2 := f.x+nodeW, f.y+nodeH/2, t.x, t.y+nodeH/2
	if t.x < f.x { // back to an earlier column (a consumer publishing)
		x1, x2 = f.x, t.x+nodeW
	}
	mx := (x1 + x2) / 2
	fmt.Fprintf(b, `<path class="%s" data-from="%s" data-to="%s" data-kind="%s" d="M%d,%d C%d,%d %d,%d %d,%d" marker-end="url(#arrow)"/>`,
		esc(strings.TrimSpace("edge "+e.Kind)), esc(e.From), esc(e.To), esc(e.Kind), x1, y1, mx, y1, mx, y2, x2, y2)
	if e.Kind == "read" {
		fmt.Fprintf(b, `<text class="edge-label muted" x="%d" y="%d" text-anchor="middle">reads</text>`, mx, (y1+y2)/2-4)
	}
}

// graphLegend says what the arrows to connectors mean.
func graphLegend(b *strings.Builder, y int) {
	fmt.Fprintf(b, `<g class="legend" transform="translate(%d,%d)"><path class="edge write" d="M0,8 L36,8" marker-end="url(#arrow)"/><text x="44" y="12">writes (a handler's mutate)</text>`, graphPad, y)
	b.WriteString(`<path class="edge read" d="M250,8 L286,8" marker-end="url(#arrow)"/><text x="294" y="12">reads (prepare, next, a producer's or webhook's handler)</text></g>`)
}

// nodeHref is where a node links: its card when it is blocked, its
// topic's or its webhooks' page.
func nodeHref(wf string, n apitype.GraphNode) string {
	switch {
	case n.BlockedRun != "":
		return "/w/" + url.PathEscape(wf) + "#card-" + url.PathEscape(n.BlockedRun)
	case n.Kind == "topic":
		return "/w/" + url.PathEscape(wf) + "/topics?topic=" + url.QueryEscape(n.Name)
	case n.Kind == "webhook":
		return "/w/" + url.PathEscape(wf) + "/webhooks"
	}
	return ""
}

// graphNode draws one box at p with its counts in words and in data-
// attributes.
func graphNode(b *strings.Builder, wf string, n apitype.GraphNode, p graphPos) {
	cls := "node " + n.Kind
	if n.Blocked > 0 {
		cls += " blocked"
	}
	href := nodeHref(wf, n)
	if href != "" {
		fmt.Fprintf(b, `<a href="%s">`, esc(href))
	}
	fmt.Fprintf(b, `<g class="%s" data-node="%s" data-pending="%d" data-reserved="%d" data-blocked="%d" data-done="%d"%s transform="translate(%d,%d)">`,
		cls, esc(n.ID), n.Pending, n.Reserved, n.Blocked, n.DoneToday, intakeAttrs(n.Intake), p.x, p.y)
	lines := nodeLines(n)
	fmt.Fprintf(b, `<title>%s %s: %s</title><rect width="%d" height="%d" rx="6"/>`, esc(kindLabel[n.Kind]), esc(n.Name), esc(strings.Join(lines, "; ")), nodeW, nodeH)
	fmt.Fprintf(b, `<text x="8" y="15"><tspan class="muted">%s</tspan> <tspan font-weight="600">%s</tspan></text>`, esc(kindLabel[n.Kind]), esc(cut(n.Name, 26)))
	room := 3 // lines under the name; the BLOCKED flag takes the last
	if n.Blocked > 0 {
		room = 2
	}
	for i, l := range lines[:min(len(lines), room)] {
		fmt.Fprintf(b, `<text x="8" y="%d">%s</text>`, 33+18*i, esc(cut(l, 32)))
	}
	if n.Blocked > 0 {
		fmt.Fprintf(b, `<text x="8" y="%d" class="flag">⚠ BLOCKED: open its card</text>`, nodeH-6)
	}
	b.WriteString(`</g>`)
	if href != "" {
		b.WriteString(`</a>`)
	}
}

// nodeLines are a node's counts in words, most telling first: a webhook's
// deliveries and the event API's posts today, a connector's writes, the
// others' events.
func nodeLines(n apitype.GraphNode) []string {
	var lines []string
	switch {
	case n.Intake != nil && n.Kind == "api":
		return []string{fmt.Sprintf("%d posted today", n.Intake.Received)}
	case n.Intake != nil:
		x := n.Intake
		last := "never"
		if x.LastReceived != "" {
			last = hourMinute(x.LastReceived)
		}
		lines = []string{fmt.Sprintf("%d received today · %d held", x.Received, x.Held), fmt.Sprintf("%d refused · %d failed today", x.Refused, x.Failed), "last received " + last}
	case n.Kind == "connector":
		l := fmt.Sprintf("%d in flight", n.Pending)
		if len(n.Targets) > 0 {
			l += " · " + n.Targets[0]
		}
		lines = append(lines, l)
	default:
		lines = append(lines, fmt.Sprintf("%d pending · %d reserved", n.Pending, n.Reserved))
	}
	if n.Kind != "webhook" || n.DoneToday > 0 {
		lines = append(lines, fmt.Sprintf("%d done today", n.DoneToday))
	}
	if len(n.Targets) > 1 {
		lines = append(lines, "to "+strings.Join(n.Targets, ", "))
	}
	return lines
}

// intakeAttrs are a webhook's or the event API's counts as data- attributes.
func intakeAttrs(x *apitype.GraphIntake) string {
	if x == nil {
		return ""
	}
	return fmt.Sprintf(` data-received="%d" data-held="%d" data-refused="%d" data-failed="%d" data-last="%s"`, x.Received, x.Held, x.Refused, x.Failed, esc(x.LastReceived))
}

// hourMinute shows an RFC 3339 time as "Nov 28 10:42" (UTC).
func hourMinute(rfc string) string {
	t, err := time.Parse(time.RFC3339Nano, rfc)
	if err != nil {
		return rfc
	}
	return t.UTC().Format("Jan 2 15:04")
}

// series of the activity chart: what each row counts.
var activitySeries = []struct {
	key, label, unit string
	of               func(apitype.ActivityHour) int
}{
	{"inputs", "inputs registered", "", func(h apitype.ActivityHour) int { return h.Inputs }},
	{"writes", "writes applied", "", func(h apitype.ActivityHour) int { return h.Writes }},
	{"failures", "failures", "", func(h apitype.ActivityHour) int { return h.Failures }},
	{"blocked", "time blocked", " min", func(h apitype.ActivityHour) int { return h.BlockedMinutes }},
}

// activitySVG draws what a workflow did per hour: one row of bars per
// series (inputs, writes, failures, minutes blocked), each hour a bar,
// each row scaled to its own most and labelled with its total. small
// draws the list page's one: the rows only, no labels.
func activitySVG(a apitype.Activity, small bool) template.HTML {
	n := max(len(a.Hours), 1)
	labelW, rowH, gap, plotW := 170, 34, 8, 720
	if small {
		labelW, rowH, gap, plotW = 0, 9, 2, 192
	}
	bw := float64(plotW) / float64(n)
	axisH := 16
	if small {
		axisH = 0
	}
	w, h := labelW+plotW, len(activitySeries)*(rowH+gap)+axisH
	var b strings.Builder
	cls := "activity"
	if small {
		cls += " small"
	}
	fmt.Fprintf(&b, `<svg class="glance %s" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s: activity per hour from %s to %s">`, cls, w, h, w, h, esc(a.Workflow), esc(a.From), esc(a.To))
	for i, s := range activitySeries {
		y0 := i * (rowH + gap)
		most, total := 0, 0
		for _, hr := range a.Hours {
			most, total = max(most, s.of(hr)), total+s.of(hr)
		}
		fmt.Fprintf(&b, `<g class="series" data-series="%s" data-total="%d">`, s.key, total)
		if !small {
			fmt.Fprintf(&b, `<text x="0" y="%d">%s</text><text x="0" y="%d" class="muted">%d%s in all</text>`, y0+13, s.label, y0+28, total, s.unit)
		}
		fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, labelW, y0+rowH, labelW+plotW, y0+rowH)
		for j, hr := range a.Hours {
			v := s.of(hr)
			if v == 0 {
				continue
			}
			bh := max(1, v*rowH/max(most, 1))
			fmt.Fprintf(&b, `<rect class="bar-%s" data-hour="%s" data-n="%d" x="%.1f" y="%d" width="%.1f" height="%d"><title>%s: %d%s %s</title></rect>`,
				s.key, esc(hr.Start), v, float64(labelW)+float64(j)*bw, y0+rowH-bh, max(bw-1, 1), bh, esc(hourLabel(hr.Start)), v, s.unit, s.label)
		}
		b.WriteString(`</g>`)
	}
	if !small && len(a.Hours) > 0 {
		y := len(activitySeries)*(rowH+gap) + 12
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="muted">%s</text>`, labelW, y, esc(hourLabel(a.Hours[0].Start)))
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="muted" text-anchor="end">%s</text>`, labelW+plotW, y, esc(hourLabel(a.Hours[len(a.Hours)-1].Start)))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func hourLabel(rfc string) string {
	t, err := time.Parse(time.RFC3339Nano, rfc)
	if err != nil {
		return rfc
	}
	return t.UTC().Format("Jan 2 15:00")
}

// timelineSVG draws a run's trace on one time axis: its phases as bands,
// each call (reconcile probes included) and write as a bar with its
// duration and outcome, an error where it stopped.
func timelineSVG(trace []apitype.TraceLine) template.HTML {
	if len(trace) == 0 {
		return ""
	}
	tl := timeline{labelW: 300, plotW: 560, rowH: 20}
	var rows []apitype.TraceLine
	for i, e := range trace {
		if i == 0 || e.At < tl.t0 {
			tl.t0 = e.At
		}
		tl.t1 = max(tl.t1, e.At+e.Duration)
		switch e.Kind {
		case "call", "mutation", "error":
			rows = append(rows, e)
		}
	}
	span := max(tl.t1-tl.t0, 1)
	w, h := tl.labelW+tl.plotW+10, (len(rows)+1)*tl.rowH+30
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="glance timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="the run's timeline: %d ms">`, w, h, w, h, span)
	tl.phases(&b, trace)
	for i, e := range rows {
		tl.step(&b, e, (i+1)*tl.rowH)
	}
	y := (len(rows)+1)*tl.rowH + 16
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/><text x="%d" y="%d" class="muted">0 ms</text><text x="%d" y="%d" class="muted" text-anchor="end">%d ms</text>`,
		tl.labelW, y-12, tl.labelW+tl.plotW, y-12, tl.labelW, y+8, tl.labelW+tl.plotW, y+8, span)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// timeline is a run's time axis: from t0 to t1 (ms) over plotW pixels,
// right of labelW, one row of rowH a step.
type timeline struct {
	t0, t1              int64
	labelW, plotW, rowH int
}

func (tl timeline) x(ms int64) float64 {
	return float64(tl.labelW) + float64(ms-tl.t0)*float64(tl.plotW)/float64(max(tl.t1-tl.t0, 1))
}

// phases draws a band from the first entry of each phase to the first of
// the next (the phase an entry names, or a phase change's text).
func (tl timeline) phases(b *strings.Builder, trace []apitype.TraceLine) {
	type band struct {
		name string
		at   int64
	}
	var phases []band
	for _, e := range trace {
		name := e.Phase
		if name == "" && e.Kind == "phase" {
			name = e.Text
		}
		if name != "" && (len(phases) == 0 || phases[len(phases)-1].name != name) {
			phases = append(phases, band{name, e.At})
		}
	}
	b.WriteString(`<text x="0" y="14" font-weight="600">phases</text>`)
	for i, p := range phases {
		end := tl.t1
		if i+1 < len(phases) {
			end = phases[i+1].at
		}
		// Its name where the band has room for it; always in its title.
		bw, label := max(tl.x(end)-tl.x(p.at), 2), ""
		if n := int(bw / 7); n >= 3 {
			label = fmt.Sprintf(`<text x="%.1f" y="14">%s</text>`, tl.x(p.at)+3, esc(cut(p.name, n)))
		}
		fmt.Fprintf(b, `<g class="phase-band" data-phase="%s" data-ms="%d"><rect class="phase" x="%.1f" y="2" width="%.1f" height="%d"/>%s<title>%s: %d ms</title></g>`,
			esc(p.name), end-p.at, tl.x(p.at), bw, tl.rowH-4, label, esc(p.name), end-p.at)
	}
}

// step draws one call, write or error at row y: its label, its bar (red
// when it failed, amber for a reconcile probe) and its duration.
func (tl timeline) step(b *strings.Builder, e apitype.TraceLine, y int) {
	what := e.Method
	if e.Kind == "error" {
		what = "stopped: " + e.Text
	}
	cls := "call"
	switch {
	case e.Kind == "error" || failedOutcome(e.Outcome):
		cls += " failed"
	case strings.HasSuffix(e.Method, ".reconcile"):
		cls += " reconcile"
	}
	label := fmt.Sprintf("%s %s", e.Phase, what)
	if e.Outcome != "" {
		label += " → " + e.Outcome
	}
	fmt.Fprintf(b, `<g class="step" data-kind="%s" data-method="%s" data-ms="%d" data-outcome="%s">`, esc(e.Kind), esc(e.Method), e.Duration, esc(e.Outcome))
	fmt.Fprintf(b, `<text x="0" y="%d">%s</text>`, y+14, esc(cut(label, 44)))
	fmt.Fprintf(b, `<rect class="%s" x="%.1f" y="%d" width="%.1f" height="%d"><title>%s: %d ms</title></rect>`, cls, tl.x(e.At), y+3, max(tl.x(e.At+e.Duration)-tl.x(e.At), 3), tl.rowH-6, esc(label), e.Duration)
	if e.Duration > 0 {
		// After the bar, or inside its end when the bar reaches the edge.
		if end := tl.x(e.At + e.Duration); end+50 < float64(tl.labelW+tl.plotW) {
			fmt.Fprintf(b, `<text x="%.1f" y="%d" class="muted">%d ms</text>`, end+4, y+14, e.Duration)
		} else {
			fmt.Fprintf(b, `<text x="%.1f" y="%d" class="inbar" text-anchor="end">%d ms</text>`, end-4, y+14, e.Duration)
		}
	}
	b.WriteString(`</g>`)
}

// failedOutcome says a call's outcome is not a success: a write failed or
// uncertain, a probe that found nothing, an error ("failed: …").
func failedOutcome(o string) bool {
	for _, bad := range []string{"failed", "uncertain", "indeterminate", "unknown", "error"} {
		if o == bad || strings.HasPrefix(o, bad+":") {
			return true
		}
	}
	return false
}
