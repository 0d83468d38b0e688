package script

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/tdewolff/parse/v2"
	"github.com/tdewolff/parse/v2/js"
)

// Analyze is keep's one reading of a script: it parses the source into a
// syntax tree (github.com/tdewolff/parse/v2/js) and follows ctx from every
// handler through aliases, destructuring and the script's own functions.
// Validation, grants, Google scopes, the Maintainer and the Planner all
// read a script through it, so comments and strings never count, and a
// call written one way cannot be read another.
//
// The reading is sound only for scripts it can follow: every way of
// reaching ctx that it cannot (computed access, ctx handed to code it does
// not see) is listed in Refused, and Validate makes each an error. The
// engine's check at every call stays the last line.
//
// This file is what the analysis finds (Analysis) and its passes (run);
// each of its other jobs is a file of its own (analyze_*.go), opening with
// what it holds (docs/design.md, "Rooms of the script package (issue 41)").

// Analysis is what Analyze found in a script.
type Analysis struct {
	// Handlers are the handler functions found in the workflow's
	// declaration, e.g. "consumers.mailer.mutate", "producers.poll.handler",
	// "tasks.sync.run".
	Handlers []string
	// Calls are the connector calls on ctx (ctx.TOOL.METHOD(...)), in the
	// order they are written.
	Calls []Call
	// Inputs are the ctx.registerInput calls.
	Inputs []Input
	// Publishes are the ctx.publish calls.
	Publishes []Publish
	// Items are the ids given to ctx.withItem (its first argument).
	Items []Expr
	// Unstable are the places the script reads the time or chance:
	// Date.now, new Date(), Date(), Math.random, crypto, performance,
	// ctx.now, ctx.random.
	Unstable []Site
	// Refused lists what the analysis cannot follow; validate makes each
	// an error, with how to write it instead.
	Refused []Site
	// DefaultExports is how many top-level `export default` statements the
	// script has.
	DefaultExports int
	// Secrets are the secrets the script names: every {secret:NAME}
	// written whole in a string or a template's text, wherever it is
	// (issue 38: each is a grant; a repair may name none the version in
	// place does not). Sorted, once each.
	Secrets []string
	// SecretsComputed says some string or template's text starts a
	// {secret: whose name is not written whole in it ("{secret:" + name +
	// "}"): the name is known only at run time, where the call's check
	// refuses a secret not granted.
	SecretsComputed bool
	sequences       []callPair
	// handlerLine is where each handler ("consumers.c") is declared;
	// stringLine where each string first appears.
	handlerLine, stringLine map[string]int
}

// LineOf is the line where a handler ("consumers.c") is declared or,
// failing that, where a topic is first written; 0 when neither is found.
func (a *Analysis) LineOf(handler, topic string) int {
	if l := a.handlerLine[handler]; l > 0 {
		return l
	}
	return a.stringLine[topic]
}

// Site is a place in the script.
type Site struct {
	Line int
	// Handlers are the handlers from which this place can be reached
	// ("consumers.c.mutate"); empty for code no handler reaches.
	Handlers []string
	// Text is the place's source, normalized (the syntax tree printed:
	// whitespace and comments do not count); for a refusal, the message.
	Text string
}

// Expr is an expression that builds an identity: an item id, a messageId,
// an input id, a subkey.
type Expr struct {
	Site
	// Deps are the definitions of the variables it reads, followed back to
	// the handler's parameters, normalized ("f <- files2", "files2 =
	// files.map(...)"): an id written the same way over a list mapped
	// differently is a different id.
	Deps []string
	// Unstable names the time or chance it depends on, in any part or
	// definition ("Date.now()"); empty when it has none.
	Unstable []string
	// Prefix is the constant text the value starts with ("email:" of
	// `email:${f.id}`, or of "email:" + f.id, through consts); "" when it
	// starts with something computed.
	Prefix string
}

// Key is the expression with what it depends on, in one comparable string.
func (e Expr) Key() string {
	if len(e.Deps) == 0 {
		return e.Text
	}
	return e.Text + " where " + strings.Join(e.Deps, "; ")
}

// Call is one connector call on ctx.
type Call struct {
	Site
	Tool, Method string
	// Args are the literal fields of the argument object ({ method: "GET" }
	// gives "method": "GET"), directly or through a const; fields written
	// as expressions are in Prefixes instead.
	Args map[string]any
	// Prefixes are the fields written as expressions, each with the
	// constant text its value starts with ("https://api.example.com/" of
	// API + "/x" where const API = "https://api.example.com/"; "" when it
	// starts with something computed).
	Prefixes map[string]string
	// Open: the argument is not one object literal whose fields all have
	// names (a variable, a spread, a computed key): Args and Prefixes may
	// miss fields the call gets.
	Open bool
	// Subkey is the subkey field of the argument, when there is one.
	Subkey *Expr
	// Deps are the definitions the call's arguments read (a URL kept in a
	// const), normalized.
	Deps []string
}

// Input is one ctx.registerInput call.
type Input struct {
	Site
	// Source and Type are the literal source and type; "" when written as
	// an expression (then the host checks them at run time).
	Source, Type string
	ID           *Expr
	// HasTitle: the argument has a title field (or may have: a spread).
	HasTitle bool
}

// Publish is one ctx.publish call.
type Publish struct {
	Site
	// Topics are the literal topics; nil when written as an expression.
	Topics    []string
	MessageID *Expr
}

// Uses lists what a script calls that needs a grant, sorted and once
// each: "tool.method" for each connector call and "source:NAME" for each
// registerInput whose source is a literal.
func (a *Analysis) Uses() []string {
	set := map[string]bool{}
	for _, c := range a.Calls {
		set[c.Tool+"."+c.Method] = true
	}
	for _, in := range a.Inputs {
		if in.Source != "" {
			set["source:"+in.Source] = true
		}
	}
	return sortedKeys(set)
}

// Identities lists every expression that builds an identity, labelled
// ("withItem: `email:${f.name}` where ..."), sorted: two versions whose
// lists are equal build the same ids from the same data.
func (a *Analysis) Identities() []string {
	var out []string
	for _, e := range a.Items {
		out = append(out, "withItem: "+e.Key())
	}
	for _, in := range a.Inputs {
		if in.ID != nil {
			out = append(out, "registerInput id: "+in.ID.Key())
		}
	}
	for _, p := range a.Publishes {
		if p.MessageID != nil {
			out = append(out, "messageId: "+p.MessageID.Key())
		}
	}
	for _, c := range a.Calls {
		if c.Subkey != nil {
			out = append(out, "subkey: "+c.Subkey.Key())
		}
	}
	sort.Strings(out)
	return out
}

// IdentityExprs is every identity expression of the script.
func (a *Analysis) IdentityExprs() []Expr {
	var out []Expr
	out = append(out, a.Items...)
	for _, in := range a.Inputs {
		if in.ID != nil {
			out = append(out, *in.ID)
		}
	}
	for _, p := range a.Publishes {
		if p.MessageID != nil {
			out = append(out, *p.MessageID)
		}
	}
	for _, c := range a.Calls {
		if c.Subkey != nil {
			out = append(out, *c.Subkey)
		}
	}
	return out
}

// CallsIn returns the connector calls reachable from a handler
// ("consumers.c.mutate").
func (a *Analysis) CallsIn(handler string) []Call {
	var out []Call
	for _, c := range a.Calls {
		if contains(c.Handlers, handler) {
			out = append(out, c)
		}
	}
	return out
}

// AnalysisError is a script the analysis cannot parse.
type AnalysisError struct {
	Line, Column int
	Message      string
}

func (e *AnalysisError) Error() string {
	return fmt.Sprintf("line %d:%d: %s", e.Line, e.Column, e.Message)
}

type analysisOnce struct {
	once sync.Once
	a    *Analysis
	err  error
}

// Analysis is Analyze of the program's source, read once; callers share
// it and must not change it.
func (p *Program) Analysis() (*Analysis, error) {
	if p.analysis == nil {
		return Analyze(p.Source)
	}
	p.analysis.once.Do(func() { p.analysis.a, p.analysis.err = Analyze(p.Source) })
	return p.analysis.a, p.analysis.err
}

// Analyze reads a script; an error is a script that does not parse.
func Analyze(source string) (*Analysis, error) {
	buf := make([]byte, len(source), len(source)+1)
	copy(buf, source)
	in := parse.NewInputBytes(buf)
	tree, err := js.Parse(in, js.Options{})
	if err != nil {
		if pe, ok := err.(*parse.Error); ok {
			return nil, &AnalysisError{Line: pe.Line, Column: pe.Column, Message: pe.Message}
		}
		return nil, &AnalysisError{Message: err.Error()}
	}
	a := newAnalyzer(buf, tree)
	a.run()
	return a.out, nil
}

func (a *analyzer) run() {
	// Bindings first (which names hold which functions), then the
	// handlers, then ctx followed until nothing new is learnt.
	a.stmts(a.tree.List)
	a.handlers()
	a.secrets()
	for i := 0; i < 50; i++ {
		a.grew = false
		a.stmts(a.tree.List)
		if !a.grew {
			break
		}
	}
	a.report = true
	a.stmts(a.tree.List)
	for _, u := range a.unresolved {
		a.refuse(u.at, u.msg)
	}
	a.attribute()
}
