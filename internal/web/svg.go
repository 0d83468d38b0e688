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

var kindLabel = map[string]string{"producer": "producer", "webhook": "webhook", "api": "", "task": "task", "topic": "topic", "consumer": "consumer", "connector": "connector"}

// graphSVG draws a workflow: its nodes in columns by role (what brings work
// in, topics, consumers and tasks, connectors), arrows between them, each
// node with its live counts; a blocked node is outlined in red, says
// BLOCKED in words and links to its card.
func graphSVG(g apitype.Graph) template.HTML {
	type pos struct{ x, y int }
	at := map[string]pos{}
	rows := [4]int{}
	for _, n := range g.Nodes {
		c := min(max(n.Column, 0), 3)
		at[n.ID] = pos{graphPad + c*(nodeW+colGap), graphPad + rows[c]*(nodeH+rowGap)}
		rows[c]++
	}
	most := max(rows[0], rows[1], rows[2], rows[3], 1)
	w, h := 2*graphPad+4*nodeW+3*colGap, 2*graphPad+most*(nodeH+rowGap)-rowGap
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="glance graph" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s drawn: %d nodes">`, w, h, w, h, esc(g.Workflow), len(g.Nodes))
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#8a949e"/></marker></defs>`)
	for _, e := range g.Edges {
		f, ok1 := at[e.From]
		t, ok2 := at[e.To]
		if !ok1 || !ok2 {
			continue
		}
		x1, y1, x2, y2 := f.x+nodeW, f.y+nodeH/2, t.x, t.y+nodeH/2
		if t.x < f.x { // back to an earlier column (a consumer publishing)
			x1, x2 = f.x, t.x+nodeW
		}
		mx := (x1 + x2) / 2
		fmt.Fprintf(&b, `<path class="edge" data-from="%s" data-to="%s" d="M%d,%d C%d,%d %d,%d %d,%d" marker-end="url(#arrow)"/>`, esc(e.From), esc(e.To), x1, y1, mx, y1, mx, y2, x2, y2)
	}
	for _, n := range g.Nodes {
		p := at[n.ID]
		cls := "node " + n.Kind
		if n.Blocked > 0 {
			cls += " blocked"
		}
		href := ""
		switch {
		case n.BlockedRun != "":
			href = "/w/" + url.PathEscape(g.Workflow) + "#card-" + url.PathEscape(n.BlockedRun)
		case n.Kind == "topic":
			href = "/w/" + url.PathEscape(g.Workflow) + "/topics?topic=" + url.QueryEscape(n.Name)
		case n.Kind == "webhook":
			href = "/w/" + url.PathEscape(g.Workflow) + "/webhooks"
		}
		if href != "" {
			fmt.Fprintf(&b, `<a href="%s">`, esc(href))
		}
		fmt.Fprintf(&b, `<g class="%s" data-node="%s" data-pending="%d" data-reserved="%d" data-blocked="%d" data-done="%d" transform="translate(%d,%d)">`, cls, esc(n.ID), n.Pending, n.Reserved, n.Blocked, n.DoneToday, p.x, p.y)
		tip := fmt.Sprintf("%s %s: %d pending, %d reserved, %d blocked, %d done today", kindLabel[n.Kind], n.Name, n.Pending, n.Reserved, n.Blocked, n.DoneToday)
		if len(n.Targets) > 0 {
			tip += "; to " + strings.Join(n.Targets, ", ")
		}
		fmt.Fprintf(&b, `<title>%s</title><rect width="%d" height="%d" rx="6"/>`, esc(strings.TrimSpace(tip)), nodeW, nodeH)
		fmt.Fprintf(&b, `<text x="8" y="15">`)
		if l := kindLabel[n.Kind]; l != "" {
			fmt.Fprintf(&b, `<tspan class="muted">%s</tspan> `, esc(l))
		}
		fmt.Fprintf(&b, `<tspan font-weight="600">%s</tspan></text>`, esc(cut(n.Name, 26)))
		line2 := fmt.Sprintf("%d pending · %d reserved", n.Pending, n.Reserved)
		if n.Kind == "connector" {
			line2 = fmt.Sprintf("%d in flight", n.Pending)
			if len(n.Targets) > 0 {
				line2 += " · " + n.Targets[0]
			}
		}
		fmt.Fprintf(&b, `<text x="8" y="33">%s</text>`, esc(cut(line2, 32)))
		fmt.Fprintf(&b, `<text x="8" y="51">%d done today</text>`, n.DoneToday)
		if n.Blocked > 0 {
			fmt.Fprintf(&b, `<text x="8" y="72" class="flag">⚠ BLOCKED: open its card</text>`)
		}
		b.WriteString(`</g>`)
		if href != "" {
			b.WriteString(`</a>`)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
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
	var rows []apitype.TraceLine
	var t0, t1 int64
	for i, e := range trace {
		if i == 0 || e.At < t0 {
			t0 = e.At
		}
		t1 = max(t1, e.At+e.Duration)
		switch e.Kind {
		case "call", "mutation", "error":
			rows = append(rows, e)
		}
	}
	if len(trace) == 0 {
		return ""
	}
	span := max(t1-t0, 1)
	labelW, plotW, rowH := 300, 560, 20
	x := func(ms int64) float64 { return float64(labelW) + float64(ms-t0)*float64(plotW)/float64(span) }
	h := (len(rows)+1)*rowH + 30
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="glance timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="the run's timeline: %d ms">`, labelW+plotW+10, h, labelW+plotW+10, h, span)
	// The phases: a band from the first entry of each phase to the first
	// of the next (the phase an entry names, or a phase change's text).
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
		end := t1
		if i+1 < len(phases) {
			end = phases[i+1].at
		}
		// Its name where the band has room for it; always in its title.
		bw, label := max(x(end)-x(p.at), 2), ""
		if n := int(bw / 7); n >= 3 {
			label = fmt.Sprintf(`<text x="%.1f" y="14">%s</text>`, x(p.at)+3, esc(cut(p.name, n)))
		}
		fmt.Fprintf(&b, `<g class="phase-band" data-phase="%s" data-ms="%d"><rect class="phase" x="%.1f" y="2" width="%.1f" height="%d"/>%s<title>%s: %d ms</title></g>`,
			esc(p.name), end-p.at, x(p.at), bw, rowH-4, label, esc(p.name), end-p.at)
	}
	for i, e := range rows {
		y := (i + 1) * rowH
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
		fmt.Fprintf(&b, `<g class="step" data-kind="%s" data-method="%s" data-ms="%d" data-outcome="%s">`, esc(e.Kind), esc(e.Method), e.Duration, esc(e.Outcome))
		fmt.Fprintf(&b, `<text x="0" y="%d">%s</text>`, y+14, esc(cut(label, 44)))
		fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%d" width="%.1f" height="%d"><title>%s: %d ms</title></rect>`, cls, x(e.At), y+3, max(x(e.At+e.Duration)-x(e.At), 3), rowH-6, esc(label), e.Duration)
		if e.Duration > 0 {
			// After the bar, or inside its end when the bar reaches the edge.
			if end := x(e.At + e.Duration); end+50 < float64(labelW+plotW) {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="muted">%d ms</text>`, end+4, y+14, e.Duration)
			} else {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="inbar" text-anchor="end">%d ms</text>`, end-4, y+14, e.Duration)
			}
		}
		b.WriteString(`</g>`)
	}
	y := (len(rows)+1)*rowH + 16
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/><text x="%d" y="%d" class="muted">0 ms</text><text x="%d" y="%d" class="muted" text-anchor="end">%d ms</text>`,
		labelW, y-12, labelW+plotW, y-12, labelW, y+8, labelW+plotW, y+8, span)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
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
