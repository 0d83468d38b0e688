package script

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/schedule"
)

// Connectors is what validation knows of the connectors.
type Connectors struct {
	Tools   map[string][]string // each connector's method names
	Sources map[string][]string // each input source's types
	// Writes reports whether a call with these literal arguments writes
	// (connector.Registry.Writes); nil: no call is taken for a write.
	Writes func(tool, method string, args map[string]any) bool
}

// Validate checks a compiled script's declaration against the rules of
// SPEC §2, and the connectors it calls. known maps each connector name to
// its method names. Errors come first, then warnings; each names the
// handler, topic and line where it can. Check is every check.
func Validate(p *Program, known map[string][]string) []kt.Problem {
	return validate(p, Connectors{Tools: known}, false)
}

// Check is every static check of a script: its declaration (Validate), the
// connectors and sources it reaches as the analysis reads them, and what
// the analysis cannot follow. Errors come first.
func Check(p *Program, c Connectors) []kt.Problem {
	return validate(p, c, true)
}

func validate(p *Program, c Connectors, full bool) []kt.Problem {
	v := &validation{p: p, d: p.Decl, writers: map[string][]string{}, readers: map[string][]string{}}
	v.an, v.anErr = p.Analysis()
	if v.anErr != nil {
		v.out = append(v.out, kt.Problem{Severity: "error", Message: "keep cannot read the script: " + v.anErr.Error()})
		return v.out
	}
	if v.d.Missing {
		v.add("error", "", "", "the script declares no workflow: it must run `export default Keep.workflow({ name, topics, producers, consumers })`")
		return v.out
	}
	v.workflow()
	v.producers()
	v.consumers()
	v.tasks()
	v.webhooks()
	v.topics()
	v.connectors(c.Tools)
	v.approvals(c.Tools)
	if full {
		v.followed()
		v.unstableIdentities()
		v.out = append(v.out, sourceProblems(v.an, c.Sources)...)
	}
	if c.Writes != nil {
		v.oneWrite(c.Writes)
		v.webhookWrites(c.Writes)
	}
	v.literalCredentials()
	v.maskCredentials()
	sort.SliceStable(v.out, func(i, j int) bool { return v.out[i].Severity == "error" && v.out[j].Severity != "error" })
	return v.out
}

// validation collects the problems of one script, and which handlers write
// and read each topic.
type validation struct {
	p                *Program
	d                Declaration
	an               *Analysis
	anErr            error
	out              []kt.Problem
	writers, readers map[string][]string
}

func (v *validation) add(sev, handler, topic, msg string) {
	v.out = append(v.out, kt.Problem{Severity: sev, Handler: handler, Topic: topic, Line: v.an.LineOf(handler, topic), Message: msg})
}

// followed makes an error of everything the analysis could not follow,
// and of every handler whose function it did not find: what it reads is
// then all the script can do.
func (v *validation) followed() {
	for _, r := range v.an.Refused {
		v.out = append(v.out, kt.Problem{Severity: "error", Handler: strings.Join(r.Handlers, ", "), Line: r.Line, Message: r.Text})
	}
	if v.an.DefaultExports > 1 {
		v.out = append(v.out, kt.Problem{Severity: "error", Message: fmt.Sprintf("the script has %d `export default` statements; it exports one workflow", v.an.DefaultExports)})
	}
	var declared []string
	for n, h := range v.d.Producers {
		if h.Handler {
			declared = append(declared, "producers."+n+".handler")
		}
	}
	for n, h := range v.d.Consumers {
		for phase, ok := range map[string]bool{"prepare": h.Prepare, "mutate": h.Mutate, "next": h.Next} {
			if ok {
				declared = append(declared, "consumers."+n+"."+phase)
			}
		}
	}
	for n, h := range v.d.Tasks {
		if h.Run {
			declared = append(declared, "tasks."+n+".run")
		}
	}
	for n, h := range v.d.Webhooks {
		if h.Handler {
			declared = append(declared, "webhooks."+n+".handler")
		}
	}
	sort.Strings(declared)
	for _, h := range declared {
		if !contains(v.an.Handlers, h) {
			parts := strings.Split(h, ".")
			v.out = append(v.out, kt.Problem{Severity: "error", Handler: h, Line: v.an.LineOf(parts[0]+"."+parts[1], ""),
				Message: fmt.Sprintf("keep cannot find the function of %s in the script's text, so it cannot see what it does: write it in Keep.workflow({ ... }) (async %s(ctx, ...) { ... }), or as a function the script declares by name", h, parts[2])})
		}
	}
}

// maskCredentials masks, in every message, the credentials the script
// writes literally (FindCredentials) and what else has a credential's form
// (redact.String): a message quotes the script's text ("can write twice:
// ctx.http.request({ headers: { Authorization: "Bearer …" } })"), and
// keep validate, deploy, the API, the Planner and the Maintainer all print
// or send these messages (issue 42).
func (v *validation) maskCredentials() {
	creds := FindCredentials(v.p.Source)
	for i := range v.out {
		v.out[i].Message = creds.Hide(v.out[i].Message)
	}
}

// unstableIdentities: an item id, a messageId, an input id or a subkey
// built from the time or chance (Date.now(), new Date(), Math.random(),
// crypto.randomUUID(), performance.now(), ctx.now(), ctx.random()) —
// in any part, or in any name or helper it is built from, as the analysis
// follows them (Expr.Unstable) — is new at every run: keep would take the
// same data for new work and do it again (issue 42). The time and chance
// elsewhere (a title, a log line, a date read from the data) are fine. An
// input of the system source (a schedule tick, a random draw) is the one
// whose id may be the time or chance: it is not from the outside.
func (v *validation) unstableIdentities() {
	check := func(what string, e *Expr, handlers []string) {
		if e == nil || len(e.Unstable) == 0 {
			return
		}
		v.out = append(v.out, kt.Problem{Severity: "error", Handler: strings.Join(handlers, ", "), Line: e.Line,
			Message: fmt.Sprintf("%s %s is built from the time or chance (%s): it is new at every run, so keep would take the same data for new work and do it again — build it from the data's own id (e.g. `order:${o.id}`, or a date the data carries: new Date(o.createdAt))",
				what, e.Text, strings.Join(e.Unstable, ", "))})
	}
	for _, it := range v.an.Items {
		check("the item id", &it, it.Handlers)
	}
	for _, in := range v.an.Inputs {
		if in.Source != "system" {
			check("the input id", in.ID, in.Handlers)
		}
	}
	for _, p := range v.an.Publishes {
		check("the messageId", p.MessageID, p.Handlers)
	}
	for _, c := range v.an.Calls {
		check("the subkey", c.Subkey, c.Handlers)
	}
}

// oneWrite: a mutate makes one write; two write calls where the second
// can run after the first are an error naming both (issue 24).
func (v *validation) oneWrite(writes func(tool, method string, args map[string]any) bool) {
	isWrite := func(c Call) bool { return writes(c.Tool, c.Method, c.Args) }
	for _, w := range v.an.WritePairs(isWrite) {
		if !strings.HasSuffix(w.Handler, ".mutate") {
			continue
		}
		v.out = append(v.out, kt.Problem{Severity: "error", Handler: w.Handler, Line: w.Second.Line,
			Message: fmt.Sprintf("%s can write twice: %s (line %d) and then %s (line %d); a mutate makes one write, its run's only side effect — publish an event from next and write the second thing in the consumer of that topic", w.Handler, w.First.Text, w.First.Line, w.Second.Text, w.Second.Line)})
	}
}

// webhookWrites: a webhook's handler only reads, registers and publishes;
// a write there would fail every delivery (the host refuses it), so it is
// an error here, at its line.
func (v *validation) webhookWrites(writes func(tool, method string, args map[string]any) bool) {
	for _, n := range sortedKeys(v.d.Webhooks) {
		who := "webhooks." + n + ".handler"
		for _, c := range v.an.CallsIn(who) {
			if writes(c.Tool, c.Method, c.Args) {
				v.out = append(v.out, kt.Problem{Severity: "error", Handler: who, Line: c.Line,
					Message: fmt.Sprintf("%s writes (%s): a webhook's handler only reads, registers inputs and publishes, and every delivery would fail here — publish an event and write in the consumer of its topic", who, c.Text)})
			}
		}
	}
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
	} else if p := NameProblem(name); p != "" {
		v.add("error", "", "", p)
	}
	if len(d.Producers)+len(d.Consumers)+len(d.Tasks)+len(d.Webhooks) == 0 {
		v.add("error", "", "", "the workflow has no handler: declare at least one producer, consumer, task or webhook")
	}
}

// approvals checks requireApproval's shape as the engine reads it
// (engine.needsApproval: true, or tool and tool.method names): any other
// value, or a name of nothing, would ask no person at all, silently.
func (v *validation) approvals(known map[string][]string) {
	switch ra := v.d.RequireApproval.(type) {
	case nil, bool:
	case []any:
		for _, x := range ra {
			name, ok := x.(string)
			if !ok {
				v.add("error", "", "", fmt.Sprintf("requireApproval: %v is not a name; write tool or tool.method names, e.g. requireApproval: [\"http.request\", \"gmail\"]", x))
				continue
			}
			tool, method, hasMethod := strings.Cut(name, ".")
			methods, isTool := known[tool]
			switch {
			case known == nil:
			case !isTool:
				v.add("error", "", "", fmt.Sprintf("requireApproval: %q names no connector (available: %s); no call would wait for a person", name, strings.Join(sortedKeys(known), ", ")))
			case hasMethod && !contains(methods, method):
				v.add("error", "", "", fmt.Sprintf("requireApproval: connector %q has no method %q (it has: %s); no call would wait for a person", tool, method, strings.Join(methods, ", ")))
			}
		}
	default:
		v.add("error", "", "", fmt.Sprintf("requireApproval must be true, or an array of tool or tool.method names (e.g. [\"http.request\"]), not %s: keep would ask no person", describeValue(ra)))
	}
}

// describeValue names a declaration's value for an error.
func describeValue(x any) string {
	switch x.(type) {
	case map[string]any:
		return "an object"
	case string:
		return fmt.Sprintf("the string %q", x)
	case float64:
		return "a number"
	}
	return fmt.Sprintf("%v", x)
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

// webhooks checks each webhook's declaration (WebhookDecl.Parse, which the
// engine reads too): its name, handler, publishes, verify and dedupe.
func (v *validation) webhooks() {
	for _, n := range sortedKeys(v.d.Webhooks) {
		who := "webhooks." + n
		_, problems := v.d.Webhooks[n].Parse(n)
		for _, p := range problems {
			v.add("error", who, "", p)
		}
		for _, t := range v.d.Webhooks[n].Publishes {
			v.writers[t] = append(v.writers[t], who)
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
		w := v.writers[t]
		from, set := v.d.TopicFrom[t]
		switch {
		case set && from != FromAPI:
			v.add("error", "", t, fmt.Sprintf("topic %q: from: %q is not a source keep knows; the one value is \"api\" (events posted through keep's API: POST …/topics/%s/events or keep publish); remove from for a topic a handler publishes", t, from, t))
		case set && strings.Contains(t, ":"):
			v.add("error", "", t, fmt.Sprintf("topic %q is open to the event API and has a \":\" in its name: the inputs it makes are keyed api:TOPIC:ID, so two different events could share a key; rename the topic (e.g. with a \".\")", t))
			w = append([]string{"the event API (from: \"api\")"}, w...)
		case set:
			// The event API is the topic's writer.
			w = append([]string{"the event API (from: \"api\")"}, w...)
		}
		switch {
		case set && from != FromAPI: // said above
		case len(w) == 0:
			v.add("error", "", t, fmt.Sprintf("topic %q has no writer: a producer's, a consumer's or a webhook's publishes must name it, or declare it %q: { from: \"api\" } for events posted through keep's API", t, t))
		case len(w) > 1:
			v.add("error", w[1], t, fmt.Sprintf("topic %q has %d writers (%s); in v1 each topic has exactly one", t, len(w), strings.Join(w, ", ")))
		}
		switch r := v.readers[t]; {
		case len(r) == 0:
			v.add("warning", "", t, fmt.Sprintf("topic %q has no consumer: its events end the chain there (they wait, and their inputs count as done, until a version reads them)", t))
		case len(r) > 1:
			v.add("error", r[1], t, fmt.Sprintf("topic %q has %d consumers (%s); in v1 each topic has at most one", t, len(r), strings.Join(r, ", ")))
		}
	}
}

// connectors checks the connectors the script reaches through ctx.<name>.<method>.
func (v *validation) connectors(known map[string][]string) {
	for _, c := range v.an.Calls {
		tool, method, line := c.Tool, c.Method, c.Line
		methods, ok := known[tool]
		if !ok {
			v.out = append(v.out, kt.Problem{Severity: "error", Line: line, Message: fmt.Sprintf("ctx.%s: there is no connector named %q (available: %s)", tool, tool, strings.Join(sortedKeys(known), ", "))})
			continue
		}
		if !contains(methods, method) {
			v.out = append(v.out, kt.Problem{Severity: "error", Line: line, Message: fmt.Sprintf("ctx.%s.%s: connector %q has no method %q (it has: %s)", tool, method, tool, method, strings.Join(methods, ", "))})
		}
	}
}

// ValidateAll is Check without knowing which calls write.
func ValidateAll(p *Program, tools, sources map[string][]string) []kt.Problem {
	return Check(p, Connectors{Tools: tools, Sources: sources})
}

// ValidateSources checks the literal sources and types of registerInput
// calls against the sources the connectors declare (ch 06a: scripts cannot
// invent sources), so a `source: "gmail"` without a gmail connector fails at
// validation instead of at the first run. sources maps each source to its
// types. Computed sources cannot be checked here; the host checks them at
// run time.
func ValidateSources(p *Program, sources map[string][]string) []kt.Problem {
	an, err := p.Analysis()
	if err != nil {
		return nil // Validate says why
	}
	return sourceProblems(an, sources)
}

func sourceProblems(an *Analysis, sources map[string][]string) []kt.Problem {
	var out []kt.Problem
	for _, in := range an.Inputs {
		line, src, typ := in.Line, in.Source, in.Type
		if src == "" {
			continue
		}
		types, ok := sources[src]
		if !ok {
			out = append(out, kt.Problem{Severity: "error", Line: line, Message: fmt.Sprintf("registerInput: unknown source %q (known: %s); a source is the connector the input comes from", src, strings.Join(sortedKeys(sources), ", "))})
			continue
		}
		if typ != "" && !contains(types, typ) {
			out = append(out, kt.Problem{Severity: "error", Line: line, Message: fmt.Sprintf("registerInput: source %q has no type %q (it has: %s)", src, typ, strings.Join(types, ", "))})
		}
	}
	return out
}

var validName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)

// NameProblem says what is wrong with a workflow's name, declared or
// given with the deploy ("" nothing): it names the workflow in paths.
func NameProblem(name string) string {
	if validName.MatchString(name) && strings.Trim(name, ".") != "" {
		return ""
	}
	return fmt.Sprintf("workflow name %q may use only letters, digits, '.', '_' and '-' (at most 100), and not only dots (a path's . and ..)", name)
}

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
