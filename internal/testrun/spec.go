package testrun

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
)

// File is a test file, read and checked.
type File struct {
	// Path is the test file; Workflow the script it tests, resolved
	// against the test file's folder.
	Path, Workflow string
	Cases          []Case
}

// Case is one named case of a test file.
type Case struct {
	Name    string
	Line    int
	Answers map[string][]Answer // by "tool.method"
	Faults  map[string][]Fault  // by "tool.method"
	// Events are posted through keep's event API before the workflow
	// runs (topics declared { from: "api" }), in order.
	Events []EventIn
	// Deliveries are requests to the workflow's webhooks, signed as its
	// verify says and delivered as keep serve does, after Events.
	Deliveries []Delivery
	// Decisions are a person's, taken in order on the blocked run whose
	// card says their text, each once the workflow is idle.
	Decisions []Decision
	Expect    Expect
	// lines are where the case's parts are written ("expect.writes").
	lines map[string]int
	file  string
}

// lineOf is where part ("expect.writes", "answers") of the case is
// written, else the case's own line.
func (c *Case) lineOf(part string) int {
	if l := c.lines[part]; l > 0 {
		return l
	}
	return c.Line
}

// EventIn is an event a case posts to a topic open to the event API, as
// keep publish does.
type EventIn struct {
	Topic, ID, Title string
	Payload          json.RawMessage
	line             int
}

// Decision is what a person decides on a blocked run: an action its
// card offers (skip, try-again, didnt-happen, approve, reprocess).
type Decision struct {
	Card, Action string
	line         int
}

// decisionActions are the actions a case may take on a card.
var decisionActions = names([]kt.Action{kt.ActSkip, kt.ActTryAgain, kt.ActDidntHappen, kt.ActApprove, kt.ActReprocess})

// Delivery is one request a case sends to a webhook.
type Delivery struct {
	Webhook string
	Headers map[string]string
	Query   map[string]string
	Body    []byte
	line    int
}

// Answer is what a fake connector answers a call whose arguments match
// Args (every key given equal; nil matches any call).
type Answer struct {
	Args   map[string]any
	Answer any
	path   []string
}

// Fault is a failure a fake connector answers the next Times calls whose
// arguments match Args with, instead of doing them.
type Fault struct {
	Args map[string]any
	// Kind is package fault's kind (kt.FaultStatus429); Name what the test
	// wrote ("429", "timeoutAfterApply").
	Kind, Name string
	Times      int
	// RetryAfter is a 429's Retry-After, in seconds.
	RetryAfter int
	path       []string
}

// Expect is what a case asserts; a nil list is not checked, except
// Blocked: a case that does not say what blocks expects nothing to.
type Expect struct {
	Writes  *[]WriteExp
	Inputs  *[]StatusExp
	Items   *[]StatusExp
	Runs    map[string]int
	Blocked []string
}

// WriteExp is one write a case expects, in the order they were applied.
type WriteExp struct {
	Tool    string
	Target  *string
	Payload map[string]any
}

// StatusExp is an input or item a case expects: by title, with a status.
type StatusExp struct {
	Title, Status string
}

// FaultNames maps what a test writes to keeptype's fault kinds: the names
// a script author reads in docs/scripts.md.
var FaultNames = map[string]string{
	"timeoutAfterApply": kt.FaultTimeoutAfterApply,
	"dropAfterApply":    kt.FaultDropAfterApply,
	"500AfterApply":     kt.FaultStatus500After,
	"timeout":           kt.FaultTimeout,
	"drop":              kt.FaultDrop,
	"429":               kt.FaultStatus429,
	"500":               kt.FaultStatus500,
	"503":               kt.FaultStatus503,
	"401":               kt.FaultStatus401,
	"403":               kt.FaultStatus403,
}

// Faults lists the names FaultNames knows, sorted: keep.d.ts types a
// test's fault as one of them.
func Faults() []string { return slices.Sorted(maps.Keys(FaultNames)) }

// Invalid is a test file keep cannot run: where, and what to fix.
type Invalid struct {
	File string
	Line int
	Path string
	Msg  string
}

func (e *Invalid) Error() string {
	if e.File == "" {
		return e.Msg
	}
	where := e.File
	if e.Line > 0 {
		where += ":" + strconv.Itoa(e.Line)
	}
	if e.Path != "" {
		where += ": " + e.Path
	}
	return where + ": " + e.Msg
}

// reader reads a test file's object, each mistake reported at its line.
type reader struct {
	file  string
	lines script.TestLines
	reg   *connector.Registry
}

func (r *reader) bad(path []string, format string, args ...any) *Invalid {
	return &Invalid{File: r.file, Line: r.lines.Of(path...), Path: pathText(path), Msg: fmt.Sprintf(format, args...)}
}

// pathText writes a member's path as a script author would:
// cases["one order"].expect.writes[0].
func pathText(path []string) string {
	var b strings.Builder
	for _, p := range path {
		switch {
		case isIndex(p):
			b.WriteString("[" + p + "]")
		case isIdent(p):
			if b.Len() > 0 {
				b.WriteString(".")
			}
			b.WriteString(p)
		default:
			b.WriteString("[" + strconv.Quote(p) + "]")
		}
	}
	return b.String()
}

func isIndex(s string) bool { _, err := strconv.Atoi(s); return err == nil && s != "" && s[0] != '-' }

func isIdent(s string) bool {
	for i, c := range s {
		if !(c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// object reads an object's members in the order written, refusing a
// member not in known.
func (r *reader) object(path []string, raw json.RawMessage, known ...string) ([]string, map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, r.bad(path, "must be an object { ... }, not %s", kindOf(raw))
	}
	var order []string
	out := map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, r.bad(path, "%v", err)
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, r.bad(append(path, k), "%v", err)
		}
		if known != nil && !contains(known, k) {
			return nil, nil, r.bad(append(path, k), "is not something a test says; write one of: %s", strings.Join(known, ", "))
		}
		if _, dup := out[k]; !dup {
			order = append(order, k)
		}
		out[k] = v
	}
	return order, out, nil
}

func (r *reader) list(path []string, raw json.RawMessage) ([]json.RawMessage, error) {
	var out []json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil || bytes.HasPrefix(bytes.TrimSpace(raw), []byte("null")) {
		return nil, r.bad(path, "must be a list [ ... ], not %s", kindOf(raw))
	}
	return out, nil
}

func (r *reader) str(path []string, raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", r.bad(path, "must be a string, not %s", kindOf(raw))
	}
	return s, nil
}

func (r *reader) args(path []string, raw json.RawMessage) (map[string]any, error) {
	if raw == nil {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, r.bad(path, "must be an object of the call's arguments, like { path: \"a.txt\" }, not %s", kindOf(raw))
	}
	return m, nil
}

func kindOf(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return "nothing"
	}
	switch t[0] {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string (" + string(t) + ")"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number (" + string(t) + ")"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Read reads a test file: its object, evaluated in the sandbox, checked
// member by member against the connectors of reg (what the workflow may
// call).
func Read(file, source string, reg *connector.Registry) (*File, error) {
	raw, err := script.ReadTest(file, source)
	if err != nil {
		return nil, &Invalid{Msg: err.Error()}
	}
	r := &reader{file: file, lines: script.LinesOfTest(source), reg: reg}
	_, top, err := r.object(nil, raw, "workflow", "cases")
	if err != nil {
		return nil, err
	}
	f := &File{Path: file}
	if top["workflow"] == nil {
		return nil, r.bad(nil, "names no workflow: write workflow: \"./workflow.js\" (the script, beside the test file)")
	}
	if f.Workflow, err = r.str([]string{"workflow"}, top["workflow"]); err != nil {
		return nil, err
	}
	if top["cases"] == nil {
		return nil, r.bad(nil, "has no cases: write cases: { \"what it checks\": { answers, faults, expect } }")
	}
	names, cases, err := r.object([]string{"cases"}, top["cases"])
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, r.bad([]string{"cases"}, "is empty: write at least one case")
	}
	for _, n := range names {
		c, err := r.kase(n, cases[n])
		if err != nil {
			return nil, err
		}
		f.Cases = append(f.Cases, c)
	}
	return f, nil
}

func (r *reader) kase(name string, raw json.RawMessage) (Case, error) {
	path := []string{"cases", name}
	c := Case{Name: name, Line: r.lines.Of(path...), Answers: map[string][]Answer{}, Faults: map[string][]Fault{}, lines: map[string]int{}, file: r.file}
	for _, part := range []string{"answers", "faults", "expect"} {
		c.lines[part] = r.lines.Of(append(path, part)...)
	}
	for _, part := range []string{"writes", "inputs", "items", "runs", "blocked"} {
		c.lines["expect."+part] = r.lines.Of(append(path, "expect", part)...)
	}
	_, m, err := r.object(path, raw, "answers", "faults", "events", "webhooks", "decide", "expect")
	if err != nil {
		return c, err
	}
	if m["answers"] != nil {
		if err := r.table(append(path, "answers"), m["answers"], func(p []string, method string, e map[string]json.RawMessage) error {
			a := Answer{path: p}
			var err error
			if a.Args, err = r.args(append(p, "args"), e["args"]); err != nil {
				return err
			}
			if e["answer"] == nil {
				return r.bad(p, "has no answer: write answer: the value %s returns (what the real service would)", method)
			}
			if err := json.Unmarshal(e["answer"], &a.Answer); err != nil {
				return r.bad(append(p, "answer"), "%v", err)
			}
			c.Answers[method] = append(c.Answers[method], a)
			return nil
		}, "args", "answer"); err != nil {
			return c, err
		}
	}
	if m["faults"] != nil {
		if err := r.table(append(path, "faults"), m["faults"], func(p []string, method string, e map[string]json.RawMessage) error {
			f, err := r.fault(p, method, e)
			if err != nil {
				return err
			}
			c.Faults[method] = append(c.Faults[method], f)
			return nil
		}, "args", "fault", "times", "retryAfter"); err != nil {
			return c, err
		}
	}
	if m["events"] != nil {
		if c.Events, err = r.events(append(path, "events"), m["events"]); err != nil {
			return c, err
		}
	}
	if m["webhooks"] != nil {
		if c.Deliveries, err = r.deliveries(append(path, "webhooks"), m["webhooks"]); err != nil {
			return c, err
		}
	}
	if m["decide"] != nil {
		if c.Decisions, err = r.decisions(append(path, "decide"), m["decide"]); err != nil {
			return c, err
		}
	}
	if m["expect"] == nil {
		return c, r.bad(path, "expects nothing: write expect: { writes, inputs, items, runs, blocked }")
	}
	c.Expect, err = r.expect(append(path, "expect"), m["expect"])
	return c, err
}

// table reads { "tool.method": [ { ... }, ... ] }, each method one the
// workflow's connectors have.
func (r *reader) table(path []string, raw json.RawMessage, each func(p []string, method string, e map[string]json.RawMessage) error, known ...string) error {
	methods, m, err := r.object(path, raw)
	if err != nil {
		return err
	}
	for _, method := range methods {
		p := append(append([]string(nil), path...), method)
		if err := r.method(p, method); err != nil {
			return err
		}
		list, err := r.list(p, m[method])
		if err != nil {
			return err
		}
		for i, raw := range list {
			ep := append(append([]string(nil), p...), strconv.Itoa(i))
			_, e, err := r.object(ep, raw, known...)
			if err != nil {
				return err
			}
			if err := each(ep, method, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// method checks that "tool.method" is a method of a connector keep has.
func (r *reader) method(path []string, name string) error {
	tool, method, ok := strings.Cut(name, ".")
	if !ok {
		return r.bad(path, "name a connector's method as tool.method, like \"gmail.search\"")
	}
	if _, err := r.reg.Method(tool, method); err != nil {
		tools := r.reg.Tools()
		var known []string
		for _, m := range tools[tool] {
			known = append(known, tool+"."+m)
		}
		if len(known) == 0 {
			for t := range tools {
				known = append(known, t)
			}
			sort.Strings(known)
			return r.bad(path, "%v; keep's connectors are: %s", err, strings.Join(known, ", "))
		}
		return r.bad(path, "%v; %s has: %s", err, tool, strings.Join(known, ", "))
	}
	return nil
}

func (r *reader) fault(p []string, method string, e map[string]json.RawMessage) (Fault, error) {
	f := Fault{path: p, Times: 1, RetryAfter: 1}
	var err error
	if f.Args, err = r.args(append(p, "args"), e["args"]); err != nil {
		return f, err
	}
	names := make([]string, 0, len(FaultNames))
	for n := range FaultNames {
		names = append(names, n)
	}
	sort.Strings(names)
	if e["fault"] == nil {
		return f, r.bad(p, "names no fault: write fault: one of %s", strings.Join(names, ", "))
	}
	if f.Name, err = r.str(append(p, "fault"), e["fault"]); err != nil {
		return f, err
	}
	var ok bool
	if f.Kind, ok = FaultNames[f.Name]; !ok {
		return f, r.bad(append(p, "fault"), "%q is no fault keep test knows; write one of %s", f.Name, strings.Join(names, ", "))
	}
	tool, name, _ := strings.Cut(method, ".")
	if m, _ := r.reg.Method(tool, name); m != nil && m.KindOf == nil && m.Kind != connector.KindMutate && connector.FaultClasses[f.Kind].Applied {
		return f, r.bad(append(p, "fault"), "%s is a fault of a write (it applies the write first), and %s reads: write timeout, 429, 503 or another fault", f.Name, method)
	}
	for _, n := range []struct {
		key string
		to  *int
		min int
	}{{"times", &f.Times, 1}, {"retryAfter", &f.RetryAfter, 0}} {
		if e[n.key] == nil {
			continue
		}
		if err := json.Unmarshal(e[n.key], n.to); err != nil || *n.to < n.min {
			return f, r.bad(append(p, n.key), "must be a whole number of at least %d, not %s", n.min, kindOf(e[n.key]))
		}
	}
	if e["retryAfter"] != nil && f.Kind != kt.FaultStatus429 {
		return f, r.bad(append(p, "retryAfter"), "is a 429's Retry-After; this fault is %s", f.Name)
	}
	return f, nil
}

// events reads { "topic": [{ id, title, payload? }] }.
func (r *reader) events(path []string, raw json.RawMessage) ([]EventIn, error) {
	topics, m, err := r.object(path, raw)
	if err != nil {
		return nil, err
	}
	var out []EventIn
	for _, topic := range topics {
		p := append(append([]string(nil), path...), topic)
		list, err := r.list(p, m[topic])
		if err != nil {
			return nil, err
		}
		for i, raw := range list {
			ep := append(append([]string(nil), p...), strconv.Itoa(i))
			_, e, err := r.object(ep, raw, "id", "title", "payload")
			if err != nil {
				return nil, err
			}
			ev := EventIn{Topic: topic, Payload: e["payload"], line: r.lines.Of(ep...)}
			for _, f := range []struct {
				key string
				to  *string
			}{{"id", &ev.ID}, {"title", &ev.Title}} {
				if e[f.key] == nil {
					return nil, r.bad(ep, "has no %s: an event posted to keep's API has an id (the sender's) and a title", f.key)
				}
				if *f.to, err = r.str(append(ep, f.key), e[f.key]); err != nil {
					return nil, err
				}
			}
			out = append(out, ev)
		}
	}
	return out, nil
}

// decisions reads [{ card, action }].
func (r *reader) decisions(path []string, raw json.RawMessage) ([]Decision, error) {
	list, err := r.list(path, raw)
	if err != nil {
		return nil, err
	}
	var out []Decision
	for i, raw := range list {
		p := append(append([]string(nil), path...), strconv.Itoa(i))
		_, e, err := r.object(p, raw, "card", "action")
		if err != nil {
			return nil, err
		}
		d := Decision{line: r.lines.Of(p...)}
		if e["card"] == nil || e["action"] == nil {
			return nil, r.bad(p, "write { card: \"text on the blocked run's card\", action: \"skip\" } (actions: %s)", strings.Join(decisionActions, ", "))
		}
		if d.Card, err = r.str(append(p, "card"), e["card"]); err != nil {
			return nil, err
		}
		if d.Action, err = r.str(append(p, "action"), e["action"]); err != nil {
			return nil, err
		}
		if !contains(decisionActions, d.Action) {
			return nil, r.bad(append(p, "action"), "%q is no action on a blocked run; write one of %s", d.Action, strings.Join(decisionActions, ", "))
		}
		out = append(out, d)
	}
	return out, nil
}

// deliveries reads { "NAME": [{ headers?, query?, json? | body? }] }.
func (r *reader) deliveries(path []string, raw json.RawMessage) ([]Delivery, error) {
	names, m, err := r.object(path, raw)
	if err != nil {
		return nil, err
	}
	var out []Delivery
	for _, name := range names {
		p := append(append([]string(nil), path...), name)
		list, err := r.list(p, m[name])
		if err != nil {
			return nil, err
		}
		for i, raw := range list {
			dp := append(append([]string(nil), p...), strconv.Itoa(i))
			_, e, err := r.object(dp, raw, "headers", "query", "json", "body")
			if err != nil {
				return nil, err
			}
			d := Delivery{Webhook: name, line: r.lines.Of(dp...)}
			for _, f := range []struct {
				key string
				to  *map[string]string
			}{{"headers", &d.Headers}, {"query", &d.Query}} {
				if e[f.key] != nil && json.Unmarshal(e[f.key], f.to) != nil {
					return nil, r.bad(append(dp, f.key), "must be an object of strings, like { \"x-github-event\": \"push\" }, not %s", kindOf(e[f.key]))
				}
			}
			switch {
			case e["json"] != nil && e["body"] != nil:
				return nil, r.bad(dp, "has both json and body: a request has one body")
			case e["json"] != nil:
				d.Body = []byte(e["json"])
			case e["body"] != nil:
				s, err := r.str(append(dp, "body"), e["body"])
				if err != nil {
					return nil, err
				}
				d.Body = []byte(s)
			}
			out = append(out, d)
		}
	}
	return out, nil
}

func (r *reader) expect(path []string, raw json.RawMessage) (Expect, error) {
	x := Expect{}
	_, m, err := r.object(path, raw, "writes", "inputs", "items", "runs", "blocked")
	if err != nil {
		return x, err
	}
	at := func(part string) []string { return append(append([]string(nil), path...), part) }
	if m["writes"] != nil {
		if x.Writes, err = r.writes(at("writes"), m["writes"]); err != nil {
			return x, err
		}
	}
	if m["inputs"] != nil {
		if x.Inputs, err = r.titled(at("inputs"), m["inputs"]); err != nil {
			return x, err
		}
	}
	if m["items"] != nil {
		if x.Items, err = r.titled(at("items"), m["items"]); err != nil {
			return x, err
		}
	}
	if m["runs"] != nil {
		if x.Runs, err = r.runs(at("runs"), m["runs"]); err != nil {
			return x, err
		}
	}
	if m["blocked"] != nil {
		list, err := r.list(at("blocked"), m["blocked"])
		if err != nil {
			return x, err
		}
		x.Blocked = []string{}
		for i, raw := range list {
			s, err := r.str(append(at("blocked"), strconv.Itoa(i)), raw)
			if err != nil {
				return x, err
			}
			x.Blocked = append(x.Blocked, s)
		}
	}
	return x, nil
}

// writes reads expect.writes: [{ tool, target?, payload? }].
func (r *reader) writes(path []string, raw json.RawMessage) (*[]WriteExp, error) {
	list, err := r.list(path, raw)
	if err != nil {
		return nil, err
	}
	ws := []WriteExp{}
	for i, raw := range list {
		p := append(append([]string(nil), path...), strconv.Itoa(i))
		_, e, err := r.object(p, raw, "tool", "target", "payload")
		if err != nil {
			return nil, err
		}
		var w WriteExp
		if e["tool"] == nil {
			return nil, r.bad(p, "names no tool: write tool: \"files.write\" (the connector's method)")
		}
		if w.Tool, err = r.str(append(p, "tool"), e["tool"]); err != nil {
			return nil, err
		}
		if err := r.method(append(p, "tool"), w.Tool); err != nil {
			return nil, err
		}
		if e["target"] != nil {
			t, err := r.str(append(p, "target"), e["target"])
			if err != nil {
				return nil, err
			}
			w.Target = &t
		}
		if w.Payload, err = r.args(append(p, "payload"), e["payload"]); err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	return &ws, nil
}

// titled reads expect.inputs or expect.items: [{ title, status? }].
func (r *reader) titled(path []string, raw json.RawMessage) (*[]StatusExp, error) {
	list, err := r.list(path, raw)
	if err != nil {
		return nil, err
	}
	ss := []StatusExp{}
	for i, raw := range list {
		p := append(append([]string(nil), path...), strconv.Itoa(i))
		_, e, err := r.object(p, raw, "title", "status")
		if err != nil {
			return nil, err
		}
		var s StatusExp
		if e["title"] == nil {
			return nil, r.bad(p, "names no title: write title: the title the script gives it")
		}
		if s.Title, err = r.str(append(p, "title"), e["title"]); err != nil {
			return nil, err
		}
		if e["status"] != nil {
			if s.Status, err = r.str(append(p, "status"), e["status"]); err != nil {
				return nil, err
			}
			if !contains(itemStatuses, s.Status) {
				return nil, r.bad(append(p, "status"), "%q is no status; write one of %s", s.Status, strings.Join(itemStatuses, ", "))
			}
		}
		ss = append(ss, s)
	}
	return &ss, nil
}

// runs reads expect.runs: { "committed": 2 }.
func (r *reader) runs(path []string, raw json.RawMessage) (map[string]int, error) {
	names, rm, err := r.object(path, raw)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, n := range names {
		p := append(append([]string(nil), path...), n)
		if !contains(runStatuses, n) {
			return nil, r.bad(p, "%q is no run status; write one of %s", n, strings.Join(runStatuses, ", "))
		}
		var v int
		if err := json.Unmarshal(rm[n], &v); err != nil || v < 0 {
			return nil, r.bad(p, "must be how many runs end so (a whole number), not %s", kindOf(rm[n]))
		}
		out[n] = v
	}
	return out, nil
}

// itemStatuses and runStatuses are what a case may name.
var itemStatuses, runStatuses = names(kt.ItemStatuses), names(kt.RunStatuses)

func names[S ~string](ss []S) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// faultKinds are the kinds of fault keep knows (keeptype's).
func faultKinds() map[string]string { return kt.FaultKinds }
