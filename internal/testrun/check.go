package testrun

import (
	"fmt"
	"sort"
	"strings"

	"github.com/keep-run/keep/internal/apitype"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// check compares what a case expects with what keep did. A read the
// test declares no answer for fails the case alone: what follows it did
// not run as written.
func check(c *Case, got observed) []Failure {
	if len(got.unmatched) > 0 {
		var out []Failure
		seen := map[string]bool{}
		for _, u := range got.unmatched {
			if !seen[u] {
				seen[u] = true
				out = append(out, Failure{Assertion: "answers", Line: c.lineOf("answers"), Message: u})
			}
		}
		return out
	}
	var out []Failure
	out = append(out, checkBlocked(c, got.cards)...)
	if c.Expect.Writes != nil {
		out = append(out, checkWrites(c, *c.Expect.Writes, got.writes)...)
	}
	if c.Expect.Inputs != nil {
		var have []titled
		for _, in := range got.inputs {
			have = append(have, titled{in.Title, string(in.Status)})
		}
		out = append(out, checkTitled(c, "inputs", "input", *c.Expect.Inputs, have)...)
	}
	if c.Expect.Items != nil {
		var have []titled
		for _, it := range got.items {
			if it.Kind != kt.KindTask {
				continue
			}
			have = append(have, titled{it.Title, string(it.Status)})
		}
		out = append(out, checkTitled(c, "items", "item", *c.Expect.Items, have)...)
	}
	if c.Expect.Runs != nil {
		out = append(out, checkRuns(c, got.runs)...)
	}
	return out
}

// cardText is what a person is told and asked on a blocked run's card.
func cardText(cd apitype.Card) string {
	parts := []string{}
	if cd.Title != "" {
		parts = append(parts, cd.Title)
	}
	parts = append(parts, cd.Handler+": "+cd.Status+": "+cd.Reason)
	if cd.Mutation != nil {
		parts = append(parts, "the write: "+cd.Mutation.Tool+"."+cd.Mutation.Method+" "+cd.Mutation.Target)
	}
	parts = append(parts, cd.Notes...)
	if len(cd.Actions) > 0 {
		parts = append(parts, "a person can: "+strings.Join(cd.Actions, ", "))
	}
	return strings.Join(parts, " | ")
}

func checkBlocked(c *Case, cards []apitype.Card) []Failure {
	line := c.lineOf("expect.blocked")
	want := c.Expect.Blocked
	var texts []string
	for _, cd := range cards {
		texts = append(texts, cardText(cd))
	}
	if want == nil {
		var out []Failure
		for _, t := range texts {
			out = append(out, Failure{Assertion: "expect.blocked", Line: c.lineOf("expect"),
				Message: "a run is blocked, and the case expects none to be (write expect.blocked: [\"text of its card\"] if it should)", Expected: "nothing blocked", Got: t})
		}
		return out
	}
	var out []Failure
	if len(want) != len(texts) {
		out = append(out, Failure{Assertion: "expect.blocked", Line: line, Message: fmt.Sprintf("expected %s, got %d", kt.Count(len(want), "blocked run"), len(texts)),
			Expected: quoteAll(want), Got: orNone(texts)})
		return out
	}
	used := make([]bool, len(texts))
	for _, w := range want {
		found := false
		for i, t := range texts {
			if !used[i] && strings.Contains(t, w) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			out = append(out, Failure{Assertion: "expect.blocked", Line: line, Message: fmt.Sprintf("no blocked run's card says %q", w), Expected: fmt.Sprintf("a card containing %q", w), Got: orNone(texts)})
		}
	}
	return out
}

func checkWrites(c *Case, want []WriteExp, got []write) []Failure {
	line := c.lineOf("expect.writes")
	var out []Failure
	if len(want) != len(got) {
		out = append(out, Failure{Assertion: "expect.writes", Line: line,
			Message:  fmt.Sprintf("expected %s, got %d (a write keep sent twice shows twice)", kt.Count(len(want), "write"), len(got)),
			Expected: writesText(want), Got: gotWritesText(got)})
		return out
	}
	for i, w := range want {
		g := got[i]
		var diffs []string
		if w.Tool != g.Tool {
			diffs = append(diffs, fmt.Sprintf("tool %s, not %s", g.Tool, w.Tool))
		}
		if w.Target != nil && *w.Target != g.Target {
			diffs = append(diffs, fmt.Sprintf("target %q, not %q", g.Target, *w.Target))
		}
		keys := make([]string, 0, len(w.Payload))
		for k := range w.Payload {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			gv, ok := g.Payload[k]
			if !ok {
				diffs = append(diffs, fmt.Sprintf("payload.%s missing (its payload has %s)", k, keysText(g.Payload)))
			} else if !sameJSON(w.Payload[k], gv) {
				diffs = append(diffs, fmt.Sprintf("payload.%s is %s, not %s", k, jsonText(gv), jsonText(w.Payload[k])))
			}
		}
		if len(diffs) > 0 {
			out = append(out, Failure{Assertion: fmt.Sprintf("expect.writes[%d]", i), Line: line, Message: strings.Join(diffs, "; "),
				Expected: writesText(want[i : i+1]), Got: gotWritesText(got[i : i+1])})
		}
	}
	return out
}

type titled struct{ title, status string }

func checkTitled(c *Case, part, noun string, want []StatusExp, have []titled) []Failure {
	line := c.lineOf("expect." + part)
	var haveText []string
	for _, h := range have {
		haveText = append(haveText, fmt.Sprintf("%q %s", h.title, h.status))
	}
	var wantText []string
	for _, w := range want {
		wantText = append(wantText, strings.TrimSpace(fmt.Sprintf("%q %s", w.Title, w.Status)))
	}
	var out []Failure
	if len(want) != len(have) {
		return []Failure{{Assertion: "expect." + part, Line: line, Message: fmt.Sprintf("expected %s, got %d", kt.Count(len(want), noun), len(have)),
			Expected: orNone(wantText), Got: orNone(haveText)}}
	}
	used := make([]bool, len(have))
	for i, w := range want {
		at := -1
		for j, h := range have {
			if !used[j] && h.title == w.Title {
				at = j
				break
			}
		}
		a := fmt.Sprintf("expect.%s[%d]", part, i)
		if at < 0 {
			out = append(out, Failure{Assertion: a, Line: line, Message: fmt.Sprintf("no %s has the title %q", noun, w.Title), Expected: wantText[i], Got: orNone(haveText)})
			continue
		}
		used[at] = true
		if w.Status != "" && have[at].status != w.Status {
			out = append(out, Failure{Assertion: a, Line: line, Message: fmt.Sprintf("%s %q is %s, not %s", noun, w.Title, have[at].status, w.Status), Expected: w.Status, Got: have[at].status})
		}
	}
	return out
}

func checkRuns(c *Case, runs []apitype.Run) []Failure {
	line := c.lineOf("expect.runs")
	count := map[string]int{}
	for _, r := range runs {
		count[r.Status]++
	}
	keys := make([]string, 0, len(c.Expect.Runs))
	for k := range c.Expect.Runs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []Failure
	for _, k := range keys {
		if count[k] != c.Expect.Runs[k] {
			out = append(out, Failure{Assertion: "expect.runs." + k, Line: line, Message: fmt.Sprintf("expected %s %s, got %d", kt.Count(c.Expect.Runs[k], "run"), k, count[k]),
				Expected: fmt.Sprint(c.Expect.Runs[k]), Got: runsText(count)})
		}
	}
	return out
}

func runsText(count map[string]int) string {
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, count[k]))
	}
	return orNone(parts)
}

func writesText(ws []WriteExp) string {
	var parts []string
	for _, w := range ws {
		s := w.Tool
		if w.Target != nil {
			s += " " + *w.Target
		}
		if w.Payload != nil {
			s += " " + jsonText(w.Payload)
		}
		parts = append(parts, s)
	}
	return orNone(parts)
}

func gotWritesText(ws []write) string {
	var parts []string
	for _, w := range ws {
		parts = append(parts, w.Tool+" "+w.Target+" "+jsonText(w.Payload))
	}
	return orNone(parts)
}

func keysText(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return "nothing"
	}
	return strings.Join(keys, ", ")
}

func quoteAll(ss []string) string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%q", s))
	}
	return orNone(out)
}

func orNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, "; ")
}
