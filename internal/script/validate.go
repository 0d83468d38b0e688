package script

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/keep-run/keep/internal/schedule"
)

// Problem is one finding of static validation.
type Problem struct {
	Severity string // "error" or "warning"
	Handler  string // e.g. "consumers.processEmail"
	Topic    string
	Line     int
	Message  string
}

func (p Problem) String() string {
	loc := ""
	if p.Line > 0 {
		loc = fmt.Sprintf("line %d: ", p.Line)
	}
	who := ""
	if p.Handler != "" {
		who = p.Handler + ": "
	}
	return fmt.Sprintf("%s: %s%s%s", p.Severity, loc, who, p.Message)
}

// Validate checks a compiled script against the rules of SPEC §2. known
// maps each connector name to its method names. Errors come first, then
// warnings; each names the handler, topic and line where it can.
func Validate(p *Program, known map[string][]string) []Problem {
	v := &validation{p: p, d: p.Decl, writers: map[string][]string{}, readers: map[string][]string{}}
	if v.d.Missing {
		v.add("error", "", "", "the script declares no workflow: it must run `export default Keep.workflow({ name, topics, producers, consumers })`")
		return v.out
	}
	v.workflow()
	v.producers()
	v.consumers()
	v.tasks()
	v.topics()
	v.connectors(known)
	sort.SliceStable(v.out, func(i, j int) bool { return v.out[i].Severity == "error" && v.out[j].Severity != "error" })
	return v.out
}

// validation collects the problems of one script, and which handlers write
// and read each topic.
type validation struct {
	p                *Program
	d                Declaration
	out              []Problem
	writers, readers map[string][]string
}

func (v *validation) add(sev, handler, topic, msg string) {
	v.out = append(v.out, Problem{Severity: sev, Handler: handler, Topic: topic, Line: v.p.lineOf(handler, topic), Message: msg})
}

// workflow checks the declaration as a whole: its shape, name, handlers.
func (v *validation) workflow() {
	d := v.d
	for _, e := range d.ShapeErrors {
		v.add("error", "", "", e)
	}
	name := d.WorkflowName()
	if name == "" {
		v.add("error", "", "", "the workflow has no name: add name: \"my-workflow\" to Keep.workflow({...})")
	} else if !validName.MatchString(name) {
		v.add("error", "", "", fmt.Sprintf("workflow name %q may use only letters, digits, '.', '_' and '-' (at most 100)", name))
	}
	if len(d.Producers)+len(d.Consumers)+len(d.Tasks) == 0 {
		v.add("error", "", "", "the workflow has no handler: declare at least one producer, consumer or task")
	}
}

func (v *validation) producers() {
	for _, n := range sortedKeys(v.d.Producers) {
		h := v.d.Producers[n]
		who := "producers." + n
		if !h.Handler {
			v.add("error", who, "", "the producer has no handler function: add handler: async (ctx, state) => { ... }")
		}
		if _, err := schedule.Parse(h.Schedule); err != nil {
			v.add("error", who, "", err.Error())
		}
		if len(h.Publishes) == 0 {
			v.add("error", who, "", "the producer must declare a non-empty publishes: [\"topic\"]")
		}
		for _, t := range h.Publishes {
			v.writers[t] = append(v.writers[t], who)
		}
	}
}

func (v *validation) consumers() {
	for _, n := range sortedKeys(v.d.Consumers) {
		h := v.d.Consumers[n]
		who := "consumers." + n
		if len(h.Subscribe) == 0 {
			v.add("error", who, "", "the consumer must declare a non-empty subscribe: [\"topic\"]")
		}
		if !h.Prepare {
			v.add("error", who, "", "the consumer has no prepare function: add async prepare(ctx, state) { ... }")
		}
		if len(h.Publishes) > 0 && !h.Next {
			v.add("error", who, "", "the consumer declares publishes but has no next function to publish from: add async next(ctx, prepared, mutationResult) { ... } or remove publishes")
		}
		if h.Schedule != nil {
			v.add("error", who, "", "a consumer has no schedule: it runs when its subscribed topics have events")
		}
		for _, t := range h.Publishes {
			v.writers[t] = append(v.writers[t], who)
		}
		for _, t := range h.Subscribe {
			v.readers[t] = append(v.readers[t], who)
		}
	}
}

func (v *validation) tasks() {
	for _, n := range sortedKeys(v.d.Tasks) {
		h := v.d.Tasks[n]
		who := "tasks." + n
		if !h.Run {
			v.add("error", who, "", "the task has no run function: add async run(ctx, state) { ... }")
		}
		if _, err := schedule.Parse(h.Schedule); err != nil {
			v.add("error", who, "", err.Error())
		}
	}
}

// topics checks SPEC §2's topic rules: declared, one writer, one consumer.
func (v *validation) topics() {
	declared := map[string]bool{}
	for _, t := range v.d.Topics {
		declared[t] = true
	}
	all := map[string]bool{}
	for t := range v.writers {
		all[t] = true
	}
	for t := range v.readers {
		all[t] = true
	}
	for _, t := range sortedKeys(all) {
		if !declared[t] {
			who := strings.Join(append(append([]string{}, v.writers[t]...), v.readers[t]...), ", ")
			v.add("error", firstOf(v.writers[t], v.readers[t]), t, fmt.Sprintf("topic %q is used by %s but not declared: add %q: {} to topics", t, who, t))
		}
	}
	for _, t := range v.d.Topics {
		switch w := v.writers[t]; {
		case len(w) == 0:
			v.add("error", "", t, fmt.Sprintf("topic %q has no writer: a producer's publishes or a consumer's publishes must name it", t))
		case len(w) > 1:
			v.add("error", w[1], t, fmt.Sprintf("topic %q has %d writers (%s); in v1 each topic has exactly one", t, len(w), strings.Join(w, ", ")))
		}
		switch r := v.readers[t]; {
		case len(r) == 0:
			v.add("warning", "", t, fmt.Sprintf("topic %q has no consumer: its events will stay pending", t))
		case len(r) > 1:
			v.add("error", r[1], t, fmt.Sprintf("topic %q has %d consumers (%s); in v1 each topic has at most one", t, len(r), strings.Join(r, ", ")))
		}
	}
}

// connectors checks the connectors the script reaches through ctx.<name>.<method>.
func (v *validation) connectors(known map[string][]string) {
	src := v.p.Source
	for _, m := range toolUse.FindAllStringSubmatchIndex(src, -1) {
		tool, method := src[m[2]:m[3]], src[m[4]:m[5]]
		if builtinCtx[tool] {
			continue
		}
		line := strings.Count(src[:m[0]], "\n") + 1
		methods, ok := known[tool]
		if !ok {
			v.out = append(v.out, Problem{Severity: "error", Line: line, Message: fmt.Sprintf("ctx.%s: there is no connector named %q (available: %s)", tool, tool, strings.Join(sortedKeys(known), ", "))})
			continue
		}
		if !contains(methods, method) {
			v.out = append(v.out, Problem{Severity: "error", Line: line, Message: fmt.Sprintf("ctx.%s.%s: connector %q has no method %q (it has: %s)", tool, method, tool, method, strings.Join(methods, ", "))})
		}
	}
}

// ValidateAll is Validate and ValidateSources, errors first.
func ValidateAll(p *Program, tools, sources map[string][]string) []Problem {
	out := append(Validate(p, tools), ValidateSources(p, sources)...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Severity == "error" && out[j].Severity != "error" })
	return out
}

// ValidateSources checks the literal sources and types of registerInput
// calls against the sources the connectors declare (ch 06a: scripts cannot
// invent sources), so a `source: "gmail"` without a gmail connector fails at
// validation instead of at the first run. sources maps each source to its
// types. Computed sources cannot be checked here; the host checks them at
// run time.
func ValidateSources(p *Program, sources map[string][]string) []Problem {
	var out []Problem
	for _, m := range registerCall.FindAllStringSubmatchIndex(p.Source, -1) {
		body := p.Source[m[2]:m[3]]
		line := strings.Count(p.Source[:m[0]], "\n") + 1
		src := literalField(body, "source")
		if src == "" {
			continue
		}
		types, ok := sources[src]
		if !ok {
			out = append(out, Problem{Severity: "error", Line: line, Message: fmt.Sprintf("registerInput: unknown source %q (known: %s); a source is the connector the input comes from", src, strings.Join(sortedKeys(sources), ", "))})
			continue
		}
		if typ := literalField(body, "type"); typ != "" && !contains(types, typ) {
			out = append(out, Problem{Severity: "error", Line: line, Message: fmt.Sprintf("registerInput: source %q has no type %q (it has: %s)", src, typ, strings.Join(types, ", "))})
		}
	}
	return out
}

// literalField returns the value of `name: "literal"` in an object literal's text.
func literalField(body, name string) string {
	re := regexp.MustCompile(`(?:^|[,{\s])` + name + `\s*:\s*(?:"([^"\\$]*)"|'([^'\\]*)'|` + "`" + `([^` + "`" + `$\\]*)` + "`" + `)`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1] + m[2] + m[3]
}

// HasErrors reports whether any problem is an error.
func HasErrors(ps []Problem) bool {
	for _, p := range ps {
		if p.Severity == "error" {
			return true
		}
	}
	return false
}

var (
	validName    = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	registerCall = regexp.MustCompile(`\bregisterInput\s*\(\s*\{([^}]*)\}`)
	toolUse      = regexp.MustCompile(`\bctx\s*\.\s*([A-Za-z_$][\w$]*)\s*\.\s*([A-Za-z_$][\w$]*)`)
	builtinCtx   = map[string]bool{"item": true, "log": true, "now": true, "random": true, "peek": true, "getByIds": true, "registerInput": true, "publish": true, "withItem": true}
)

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func firstOf(lists ...[]string) string {
	for _, l := range lists {
		if len(l) > 0 {
			return l[0]
		}
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// lineOf finds the line where a handler (e.g. "consumers.processEmail") or,
// failing that, a topic is written in the source. 0 when it cannot tell.
func (p *Program) lineOf(handler, topic string) int {
	find := func(pat string) int {
		re, err := regexp.Compile(pat)
		if err != nil {
			return 0
		}
		loc := re.FindStringIndex(p.Source)
		if loc == nil {
			return 0
		}
		return strings.Count(p.Source[:loc[0]], "\n") + 1
	}
	if handler != "" {
		parts := strings.SplitN(handler, ".", 2)
		if len(parts) == 2 {
			if l := find(`["']?\b` + regexp.QuoteMeta(parts[1]) + `\b["']?\s*[:(]`); l > 0 {
				return l
			}
		}
	}
	if topic != "" {
		return find(`["']` + regexp.QuoteMeta(topic) + `["']`)
	}
	return 0
}
