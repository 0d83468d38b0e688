package script

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/tdewolff/parse/v2"
	"github.com/tdewolff/parse/v2/js"

	kt "github.com/keep-run/keep/internal/keeptype"
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

// WritePairs returns, for each handler, the pairs of connector calls that
// isWrite says write, where the second may run after the first in one
// invocation (no return or throw between them; a loop or a callback runs
// its body again).
func (a *Analysis) WritePairs(isWrite func(Call) bool) []WritePair {
	var out []WritePair
	seen := map[string]bool{}
	for _, p := range a.sequences {
		first, second := a.Calls[p.first], a.Calls[p.second]
		if !isWrite(first) || !isWrite(second) {
			continue
		}
		k := fmt.Sprintf("%s %d %d", p.handler, p.first, p.second)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, WritePair{Handler: p.handler, First: first, Second: second})
	}
	return out
}

// WritePair is two write calls of one handler that may both run.
type WritePair struct {
	Handler       string
	First, Second Call
}

type callPair struct {
	handler       string
	first, second int
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

// ---------------------------------------------------------------------
// Values: what an expression may hold, as far as ctx is concerned.

type vkind uint8

const (
	vOther   vkind = iota // data, or anything that is not ctx
	vCtx                  // ctx itself
	vTool                 // ctx.TOOL
	vMethod               // ctx.TOOL.METHOD
	vBuiltin              // ctx.publish, ctx.withItem, ...
	vFunc                 // a function of the script
)

type val struct {
	kind       vkind
	tool, name string
	fn         js.INode
}

type vset map[val]bool

var other = vset{{kind: vOther}: true}

func one(v val) vset { return vset{v: true} }

func union(sets ...vset) vset {
	out := vset{}
	for _, s := range sets {
		for v := range s {
			out[v] = true
		}
	}
	return out
}

// capability reports whether a set holds something of ctx that must not
// leave the analysis's sight.
func (s vset) capability() bool {
	for v := range s {
		switch v.kind {
		case vCtx, vTool, vMethod:
			return true
		case vBuiltin:
			if !harmlessBuiltin[v.name] {
				return true
			}
		}
	}
	return false
}

// unknown reports whether a callee may be something the script does not define.
func (s vset) unknown() bool {
	if len(s) == 0 {
		return true
	}
	for v := range s {
		if v.kind == vOther {
			return true
		}
	}
	return false
}

// ctx's own members; every other name on ctx is a connector.
var ctxBuiltins = map[string]bool{"item": true, "log": true, "now": true, "random": true, "peek": true, "getByIds": true, "registerInput": true, "publish": true, "withItem": true}

// harmlessBuiltin: ctx members that may go anywhere (data, or a log).
var harmlessBuiltin = map[string]bool{"item": true, "log": true, "now": true, "random": true}

// IsCtxBuiltin reports whether ctx.NAME is keep's own (no connector).
func IsCtxBuiltin(name string) bool { return ctxBuiltins[name] }

// ---------------------------------------------------------------------

type fnInfo struct {
	params  []vset       // what each parameter may hold, from every call
	defs    [][]js.INode // the argument expressions bound to each parameter
	refs    map[js.INode]bool
	roots   []string // handlers this function is
	reached map[string]bool
}

type analyzer struct {
	buf    []byte
	tree   *js.AST
	out    *Analysis
	vals   map[*js.Var]vset
	defs   map[*js.Var][]js.INode
	funcs  map[js.INode]*fnInfo
	stack  []js.INode // enclosing functions
	stmtAt []js.INode // enclosing simple statements, for positions
	report bool
	grew   bool

	refused  map[string]bool
	exprMemo map[js.INode]string

	// The enclosing function of each recorded site, by index.
	callFn, inputFn, publishFn, itemFn, unstableFn, refusedFn []js.INode
	callNode                                                  []js.INode
	unresolved                                                []unresolvedAt
	// localCalls are the script's own functions a call may run;
	// callbacks the functions it hands to code the script does not
	// define (map, forEach, then, withItem), which may run them any
	// number of times.
	localCalls, callbacks map[js.INode][]js.INode
	// changed are the variables whose object is written to after it is
	// made (x.y = ..., or x handed to code the script does not define).
	changed map[*js.Var]bool
	// Memos of the last pass: the arguments each parameter was given, the
	// time and chance each node reads.
	paramIndex   map[*js.Var][]js.INode
	unstableMemo map[js.INode][]string
}

func newAnalyzer(buf []byte, tree *js.AST) *analyzer {
	return &analyzer{buf: buf, tree: tree, localCalls: map[js.INode][]js.INode{}, changed: map[*js.Var]bool{}, unstableMemo: map[js.INode][]string{}, callbacks: map[js.INode][]js.INode{}, out: &Analysis{handlerLine: map[string]int{}, stringLine: map[string]int{}}, vals: map[*js.Var]vset{}, defs: map[*js.Var][]js.INode{},
		funcs: map[js.INode]*fnInfo{}, refused: map[string]bool{}, exprMemo: map[js.INode]string{}}
}

func (a *analyzer) run() {
	// Bindings first (which names hold which functions), then the
	// handlers, then ctx followed until nothing new is learnt.
	a.stmts(a.tree.List)
	a.handlers()
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

func (a *analyzer) fn(n js.INode) *fnInfo {
	f := a.funcs[n]
	if f == nil {
		f = &fnInfo{refs: map[js.INode]bool{}, reached: map[string]bool{}}
		a.funcs[n] = f
	}
	return f
}

func varOf(v *js.Var) *js.Var {
	for v != nil && v.Link != nil {
		v = v.Link
	}
	return v
}

func (a *analyzer) addVal(v *js.Var, s vset, def js.INode) {
	v = varOf(v)
	if v == nil {
		return
	}
	cur := a.vals[v]
	if cur == nil {
		cur = vset{}
		a.vals[v] = cur
	}
	for x := range s {
		if !cur[x] {
			cur[x] = true
			a.grew = true
		}
	}
	if def != nil && !a.report {
		for _, d := range a.defs[v] {
			if d == def {
				return
			}
		}
		a.defs[v] = append(a.defs[v], def)
	}
}

func (a *analyzer) setParam(fn js.INode, i int, s vset, def js.INode) {
	f := a.fn(fn)
	for len(f.params) <= i {
		f.params = append(f.params, vset{})
		f.defs = append(f.defs, nil)
	}
	for x := range s {
		if !f.params[i][x] {
			f.params[i][x] = true
			a.grew = true
		}
	}
	if def != nil {
		for _, d := range f.defs[i] {
			if d == def {
				return
			}
		}
		f.defs[i] = append(f.defs[i], def)
	}
}

// ---------------------------------------------------------------------
// Positions: the parser keeps no offsets, but every token it keeps is a
// slice of the buffer it read, so a token's offset is where it points.

func (a *analyzer) offsetOf(b []byte) int { return offsetIn(a.buf, b) }

type posFinder struct {
	a        *analyzer
	lit, vr  int
	checkVar bool
}

func (p *posFinder) Enter(n js.INode) js.IVisitor {
	switch n := n.(type) {
	case *js.LiteralExpr:
		if n != nil {
			p.min(&p.lit, n.Data)
		}
	case js.LiteralExpr:
		p.min(&p.lit, n.Data)
	case *js.TemplateExpr:
		if n != nil {
			for _, part := range n.List {
				p.min(&p.lit, part.Value)
			}
			p.min(&p.lit, n.Tail)
		}
	case *js.Var:
		if n != nil {
			p.min(&p.vr, n.Data)
		}
	}
	return p
}

func (p *posFinder) Exit(js.INode) {}

func (p *posFinder) min(at *int, b []byte) {
	if o := p.a.offsetOf(b); o >= 0 && (*at < 0 || o < *at) {
		*at = o
	}
}

// line is the line of a node's first token that can be placed; 0 when none.
func (a *analyzer) line(n js.INode) int {
	if n == nil {
		return 0
	}
	p := &posFinder{a: a, lit: -1, vr: -1}
	js.Walk(p, n)
	off := p.lit
	if off < 0 && len(a.stmtAt) > 0 {
		// A bare name points where it was declared; the statement it is
		// used in is closer.
		q := &posFinder{a: a, lit: -1, vr: -1}
		js.Walk(q, a.stmtAt[len(a.stmtAt)-1])
		off = q.lit
	}
	if off < 0 {
		off = p.vr
	}
	if off < 0 {
		return 0
	}
	return strings.Count(string(a.buf[:off]), "\n") + 1
}

// text is a node's source, normalized: the tree printed back.
func (a *analyzer) text(n js.INode) string {
	if n == nil {
		return ""
	}
	if t, ok := a.exprMemo[n]; ok {
		return t
	}
	var b strings.Builder
	n.JS(&b)
	t := strings.Join(strings.Fields(b.String()), " ")
	a.exprMemo[n] = t
	return t
}

// ---------------------------------------------------------------------
// Recording (the last pass only).

func (a *analyzer) cur() js.INode {
	if len(a.stack) == 0 {
		return nil
	}
	return a.stack[len(a.stack)-1]
}

func (a *analyzer) site(n js.INode, text string) Site {
	return Site{Line: a.line(n), Text: text}
}

func (a *analyzer) refuse(n js.INode, msg string) {
	if !a.report {
		return
	}
	s := a.site(n, msg)
	k := fmt.Sprintf("%d %s", s.Line, msg)
	if a.refused[k] {
		return
	}
	a.refused[k] = true
	a.out.Refused = append(a.out.Refused, s)
	a.refusedFn = append(a.refusedFn, a.cur())
}

func (a *analyzer) escape(s vset, n js.INode, where string) {
	if !a.report || !s.capability() {
		return
	}
	a.refuse(n, fmt.Sprintf("%s %s, where keep can no longer see what is called on it: use ctx only as ctx.TOOL.METHOD(...) (for example ctx.http.request({ ... })), or pass ctx itself, as an argument of its own, to a function the script declares", a.text(n), where))
}

// attribute fills in the handlers of every site, once every function
// knows which handlers reach it.
func (a *analyzer) attribute() {
	// A function reaches what it references (calls, callbacks, nested functions).
	for fn, f := range a.funcs {
		for _, h := range f.roots {
			a.reach(fn, h)
		}
	}
	set := func(s *Site, fn js.INode) {
		if fn == nil {
			return
		}
		if f := a.funcs[fn]; f != nil {
			s.Handlers = sortedKeys(f.reached)
		}
	}
	for i := range a.out.Calls {
		set(&a.out.Calls[i].Site, a.callFn[i])
		if a.out.Calls[i].Subkey != nil {
			a.out.Calls[i].Subkey.Handlers = a.out.Calls[i].Handlers
		}
	}
	for i := range a.out.Inputs {
		set(&a.out.Inputs[i].Site, a.inputFn[i])
		if a.out.Inputs[i].ID != nil {
			a.out.Inputs[i].ID.Handlers = a.out.Inputs[i].Handlers
		}
	}
	for i := range a.out.Publishes {
		set(&a.out.Publishes[i].Site, a.publishFn[i])
		if a.out.Publishes[i].MessageID != nil {
			a.out.Publishes[i].MessageID.Handlers = a.out.Publishes[i].Handlers
		}
	}
	for i := range a.out.Items {
		set(&a.out.Items[i].Site, a.itemFn[i])
	}
	for i := range a.out.Unstable {
		set(&a.out.Unstable[i], a.unstableFn[i])
	}
	for i := range a.out.Refused {
		set(&a.out.Refused[i], a.refusedFn[i])
	}
	a.sequence()
}

func (a *analyzer) reach(fn js.INode, h string) {
	f := a.fn(fn)
	if f.reached[h] {
		return
	}
	f.reached[h] = true
	for r := range f.refs {
		a.reach(r, h)
	}
}

// ---------------------------------------------------------------------
// Statements.

func (a *analyzer) stmts(list []js.IStmt) {
	for _, s := range list {
		a.stmt(s)
	}
}

// forIn reads for (k in x): it gives names only.
func (a *analyzer) forIn(n *js.ForInStmt) {
	// for (k in ctx) gives names only: the object is read (what it is
	// matters to nothing here), and a name then used on ctx is computed
	// access, which a.expr refuses where it happens.
	a.expr(n.Value)
	a.forBinding(n.Init, n.Value)
	a.stmt(n.Body)
}

// tryStmt reads try, catch (its binding holds nothing known) and finally.
func (a *analyzer) tryStmt(n *js.TryStmt) {
	if n.Body != nil {
		a.stmts(n.Body.List)
	}
	if n.Binding != nil {
		a.bind(n.Binding, other, nil, n.Binding)
	}
	if n.Catch != nil {
		a.stmts(n.Catch.List)
	}
	if n.Finally != nil {
		a.stmts(n.Finally.List)
	}
}

// export reads an export: the default one is the workflow.
func (a *analyzer) export(n *js.ExportStmt) {
	if n.Default {
		if a.report {
			a.out.DefaultExports++
		}
		a.expr(n.Decl)
	} else if n.Decl != nil {
		if st, ok := n.Decl.(js.IStmt); ok {
			a.stmt(st)
		} else {
			a.expr(n.Decl)
		}
	}
}

// forOf reads for (x of src): what src holds escapes to x.
func (a *analyzer) forOf(n *js.ForOfStmt) {
	src := a.expr(n.Value)
	a.escape(src, n.Value, "is iterated over")
	a.forBinding(n.Init, n.Value)
	a.stmt(n.Body)
}

func (a *analyzer) stmt(s js.IStmt) {
	if a.report && s != nil {
		switch s.(type) {
		case *js.ExprStmt, *js.VarDecl, *js.ReturnStmt, *js.ThrowStmt:
			a.stmtAt = append(a.stmtAt, s)
			defer func() { a.stmtAt = a.stmtAt[:len(a.stmtAt)-1] }()
		}
	}
	switch n := s.(type) {
	case nil:
	case *js.BlockStmt:
		a.stmts(n.List)
	case *js.ExprStmt:
		a.expr(n.Value)
	case *js.VarDecl:
		a.varDecl(n)
	case *js.IfStmt:
		a.expr(n.Cond)
		a.stmt(n.Body)
		a.stmt(n.Else)
	case *js.DoWhileStmt:
		a.stmt(n.Body)
		a.expr(n.Cond)
	case *js.WhileStmt:
		a.expr(n.Cond)
		a.stmt(n.Body)
	case *js.ForStmt:
		if n.Init != nil {
			a.expr(n.Init)
		}
		a.expr(n.Cond)
		a.expr(n.Post)
		a.stmt(n.Body)
	case *js.ForInStmt:
		a.forIn(n)
	case *js.ForOfStmt:
		a.forOf(n)
	case *js.SwitchStmt:
		a.expr(n.Init)
		for i := range n.List {
			a.expr(n.List[i].Cond)
			a.stmts(n.List[i].List)
		}
	case *js.ReturnStmt:
		if n.Value != nil {
			v := a.expr(n.Value)
			a.escape(v, n.Value, "is returned")
		}
	case *js.WithStmt:
		v := a.expr(n.Cond)
		a.escape(v, n.Cond, "is used in a with statement")
		a.stmt(n.Body)
	case *js.LabelledStmt:
		a.stmt(n.Value)
	case *js.ThrowStmt:
		v := a.expr(n.Value)
		a.escape(v, n.Value, "is thrown")
	case *js.TryStmt:
		a.tryStmt(n)
	case *js.FuncDecl:
		a.function(n)
		if n.Name != nil {
			a.addVal(n.Name, one(val{kind: vFunc, fn: n}), n)
		}
	case *js.ClassDecl:
		a.class(n)
		if n.Name != nil {
			a.addVal(n.Name, other, n)
		}
	case *js.ExportStmt:
		a.export(n)
	case *js.ImportStmt:
		if a.report {
			a.refuse(n, "a script imports nothing: everything it reaches comes through ctx")
		}
	default:
		// EmptyStmt, BranchStmt, DebuggerStmt, DirectivePrologueStmt, Comment.
	}
}

func (a *analyzer) forBinding(init js.INode, src js.IExpr) {
	switch b := init.(type) {
	case *js.VarDecl:
		for i := range b.List {
			a.bind(b.List[i].Binding, other, src, b)
		}
	case js.IExpr:
		a.assignTo(b, other, src)
	}
}

func (a *analyzer) varDecl(n *js.VarDecl) {
	for i := range n.List {
		el := &n.List[i]
		var v vset
		var def js.INode
		if el.Default != nil {
			v = a.expr(el.Default)
			def = el.Default
		}
		if el.Binding != nil && def != nil {
			a.bind(el.Binding, v, def, n)
		} else if el.Binding != nil {
			a.bind(el.Binding, vset{}, nil, n)
		}
	}
}

// bind gives a binding pattern the values s, whose source is def.
func (a *analyzer) bind(b js.IBinding, s vset, def js.INode, at js.INode) {
	switch p := b.(type) {
	case nil:
	case *js.Var:
		a.addVal(p, s, def)
	case *js.BindingObject:
		for _, item := range p.List {
			var sub vset
			if item.Key != nil && item.Key.IsComputed() {
				k := a.expr(item.Key.Computed)
				_ = k
				if name, ok := staticName(item.Key.Computed); ok {
					sub = a.member(s, name, item.Key.Computed)
				} else {
					if s.capability() {
						a.refuse(item.Key.Computed, fmt.Sprintf("[%s] takes a member of ctx whose name is computed, which keep cannot follow: name it, as in const { http } = ctx", a.text(item.Key.Computed)))
					}
					sub = other
				}
			} else if item.Key != nil {
				sub = a.member(s, string(item.Key.Literal.Data), nil)
			} else {
				sub = other
			}
			if item.Value.Default != nil {
				sub = union(sub, a.expr(item.Value.Default))
			}
			a.bind(item.Value.Binding, sub, def, at)
		}
		if p.Rest != nil {
			rest := vset{}
			for v := range s {
				if v.kind == vCtx || v.kind == vTool {
					rest[v] = true
				} else {
					rest[val{kind: vOther}] = true
				}
			}
			a.addVal(p.Rest, rest, def)
		}
	case *js.BindingArray:
		if s.capability() {
			a.refuse(at, "ctx cannot be destructured as an array: name its members, as in const { http } = ctx")
		}
		for _, el := range p.List {
			sub := other
			if el.Default != nil {
				sub = union(sub, a.expr(el.Default))
			}
			a.bind(el.Binding, sub, def, at)
		}
		if p.Rest != nil {
			a.bind(p.Rest, other, def, at)
		}
	}
}

// assignTo is `target = s` for an assignment expression's target.
func (a *analyzer) assignTo(t js.IExpr, s vset, def js.INode) {
	switch x := t.(type) {
	case *js.Var:
		a.addVal(x, s, def)
	case *js.GroupExpr:
		a.assignTo(x.X, s, def)
	case *js.DotExpr, *js.IndexExpr:
		a.expr(t)
		a.markChanged(t)
		a.escape(s, def, "is stored in an object's property")
	case *js.ObjectExpr, *js.ArrayExpr:
		if s.capability() {
			a.refuse(t, "ctx cannot be taken apart by a destructuring assignment: declare the names, as in const { http } = ctx")
		}
		// Every name in the pattern now holds data from def.
		js.Walk(&varCollector{fn: func(v *js.Var) { a.addVal(v, other, def) }}, t)
		a.patternDefaults(t)
	default:
		a.expr(t)
	}
}

// patternDefaults walks the default values and computed keys of an
// assignment pattern, which run.
func (a *analyzer) patternDefaults(t js.IExpr) {
	switch x := t.(type) {
	case *js.ObjectExpr:
		for _, p := range x.List {
			if p.Name != nil && p.Name.IsComputed() {
				a.expr(p.Name.Computed)
			}
			if p.Init != nil {
				a.expr(p.Init)
			}
			if _, ok := p.Value.(*js.Var); !ok {
				a.patternDefaults(p.Value)
			}
		}
	case *js.ArrayExpr:
		for _, e := range x.List {
			a.patternDefaults(e.Value)
		}
	case *js.BinaryExpr:
		if x.Op == js.EqToken {
			a.expr(x.Y)
			a.patternDefaults(x.X)
		}
	case *js.DotExpr, *js.IndexExpr:
		a.expr(t)
	}
}

type varCollector struct{ fn func(*js.Var) }

func (c *varCollector) Enter(n js.INode) js.IVisitor {
	if v, ok := n.(*js.Var); ok && v != nil {
		c.fn(v)
	}
	switch n.(type) {
	case *js.ArrowFunc, *js.FuncDecl, *js.MethodDecl, *js.ClassDecl:
		return nil
	}
	return c
}
func (c *varCollector) Exit(js.INode) {}

// ---------------------------------------------------------------------
// Functions.

func (a *analyzer) function(n js.INode) {
	var params *js.Params
	var body *js.BlockStmt
	switch f := n.(type) {
	case *js.FuncDecl:
		params, body = &f.Params, &f.Body
	case *js.ArrowFunc:
		params, body = &f.Params, &f.Body
	case *js.MethodDecl:
		params, body = &f.Params, &f.Body
	default:
		return
	}
	if parent := a.cur(); parent != nil {
		a.fn(parent).refs[n] = true
	}
	info := a.fn(n)
	a.stack = append(a.stack, n)
	defer func() { a.stack = a.stack[:len(a.stack)-1] }()
	for i := range params.List {
		s := vset{}
		var defs []js.INode
		if i < len(info.params) {
			s = union(info.params[i])
			defs = info.defs[i]
		}
		if len(s) == 0 {
			s = union(other)
		}
		if d := params.List[i].Default; d != nil {
			s = union(s, a.expr(d))
		}
		if len(defs) == 0 {
			a.bind(params.List[i].Binding, s, nil, n)
		}
		for _, d := range defs {
			a.bind(params.List[i].Binding, s, d, n)
		}
	}
	if params.Rest != nil {
		a.bind(params.Rest, other, nil, n)
	}
	a.stmts(body.List)
}

func (a *analyzer) class(n *js.ClassDecl) {
	if n.Extends != nil {
		v := a.expr(n.Extends)
		a.escape(v, n.Extends, "is extended by a class")
	}
	for _, el := range n.List {
		switch {
		case el.StaticBlock != nil:
			a.stmts(el.StaticBlock.List)
		case el.Method != nil:
			a.function(el.Method)
		default:
			if el.Name.IsComputed() {
				a.expr(el.Name.Computed)
			}
			if el.Init != nil {
				v := a.expr(el.Init)
				a.escape(v, el.Init, "is kept in a class field")
			}
		}
	}
}

// ---------------------------------------------------------------------
// Expressions.

// dotName is the name after the dot of x.name ("" for a private #name).
func dotName(d *js.DotExpr) string {
	switch y := d.Y.(type) {
	case js.LiteralExpr:
		return string(y.Data)
	case *js.LiteralExpr:
		return string(y.Data)
	}
	return ""
}

// staticName is the name of a computed key written as a string literal.
func staticName(e js.IExpr) (string, bool) {
	switch x := e.(type) {
	case *js.GroupExpr:
		return staticName(x.X)
	case *js.LiteralExpr:
		if x.TokenType == js.StringToken {
			s, ok := unquote(x.Data)
			return s, ok
		}
	case *js.TemplateExpr:
		if x.Tag == nil && len(x.List) == 0 {
			s, ok := unquote(x.Tail)
			return s, ok
		}
	}
	return "", false
}

// unquote reads a JavaScript string or no-substitution template literal,
// with the escapes that matter for names.
func unquote(b []byte) (string, bool) {
	if len(b) < 2 {
		return "", false
	}
	body := string(b[1 : len(b)-1])
	if !strings.Contains(body, `\`) {
		return body, true
	}
	q := `"` + strings.ReplaceAll(strings.ReplaceAll(body, `"`, `\"`), `\'`, `'`) + `"`
	s, err := strconv.Unquote(q)
	return s, err == nil
}

// member is what NAME of a value holds.
func (a *analyzer) member(s vset, name string, at js.INode) vset {
	out := vset{}
	for v := range s {
		switch v.kind {
		case vCtx:
			if ctxBuiltins[name] {
				out[val{kind: vBuiltin, name: name}] = true
			} else {
				out[val{kind: vTool, tool: name}] = true
			}
		case vTool:
			out[val{kind: vMethod, tool: v.tool, name: name}] = true
		case vMethod, vBuiltin:
			if name == "call" || name == "apply" || name == "bind" {
				out[val{kind: v.kind, tool: v.tool, name: v.name, fn: callVia(name)}] = true
			} else {
				out[val{kind: vOther}] = true
			}
		default:
			out[val{kind: vOther}] = true
		}
	}
	if len(out) == 0 {
		out[val{kind: vOther}] = true
	}
	return out
}

// callVia marks a method reached through .call or .apply (its arguments
// start later, or come in an array); .bind gives the method itself.
var (
	viaCall  = &js.LiteralExpr{Data: []byte("call")}
	viaApply = &js.LiteralExpr{Data: []byte("apply")}
)

func callVia(name string) js.INode {
	switch name {
	case "call":
		return viaCall
	case "apply":
		return viaApply
	}
	return nil // bind: the method itself
}

// variable is a name's values: a global that keep refuses or takes for
// time or chance says so; a function value read is a reference of the
// function reading it.
func (a *analyzer) variable(n *js.Var) vset {
	v := varOf(n)
	if v.Decl == js.NoDecl {
		switch string(v.Data) {
		case "eval":
			a.refuse(n, "eval is not allowed: keep reads what a script does from its text, and code in a string cannot be read")
		case "arguments":
			a.refuse(n, "arguments is not allowed: name a function's parameters, so keep can see where ctx goes")
		case "crypto", "performance":
			a.unstable(n, string(v.Data))
		default:
			a.absentGlobal(n, string(v.Data))
		}
		return other
	}
	if s := a.vals[v]; len(s) > 0 {
		if parent := a.cur(); parent != nil {
			for x := range s {
				if x.kind == vFunc {
					a.fn(parent).refs[x.fn] = true
				}
			}
		}
		return s
	}
	return other
}

// template reads a template literal; a tagged one is a call of its tag.
func (a *analyzer) template(n *js.TemplateExpr) vset {
	if n.Tag != nil {
		callee := a.expr(n.Tag)
		var args []vset
		for _, p := range n.List {
			args = append(args, a.expr(p.Expr))
		}
		a.callValues(n, callee, nil, args, nil)
		return other
	}
	for _, p := range n.List {
		a.expr(p.Expr)
	}
	return other
}

// index reads x[y]: a member by a static name, else a computed access,
// refused on ctx.
func (a *analyzer) index(n *js.IndexExpr) vset {
	base := a.expr(n.X)
	a.expr(n.Y)
	if name, ok := staticName(n.Y); ok {
		a.timeOrChance(n, n.X, name)
		a.onGlobalObject(n, n.X, name)
		return a.member(base, name, n)
	}
	if base.capability() {
		a.refuse(n, fmt.Sprintf("%s reaches ctx by a computed name, which keep cannot follow: write the name, as in ctx.http.request({ ... })", a.text(n)))
	}
	return other
}

// newExpr reads new X(args): new Date() is the time; what goes to an
// unknown constructor escapes.
func (a *analyzer) newExpr(n *js.NewExpr) vset {
	callee := a.expr(n.X)
	if v, ok := n.X.(*js.Var); ok && varOf(v).Decl == js.NoDecl && string(varOf(v).Data) == "Date" && (n.Args == nil || len(n.Args.List) == 0) {
		a.unstable(n, "new Date()")
	}
	if n.Args != nil {
		for _, arg := range n.Args.List {
			v := a.expr(arg.Value)
			if callee.unknown() {
				a.escape(v, arg.Value, "is passed to new "+a.text(n.X))
			}
		}
	}
	return other
}

func (a *analyzer) expr(e js.IExpr) vset {
	switch n := e.(type) {
	case nil:
		return other
	case *js.Var:
		return a.variable(n)
	case *js.LiteralExpr:
		return other
	case *js.GroupExpr:
		return a.expr(n.X)
	case *js.CommaExpr:
		var last vset
		for _, x := range n.List {
			last = a.expr(x)
		}
		return last
	case *js.CondExpr:
		a.expr(n.Cond)
		return union(a.expr(n.X), a.expr(n.Y))
	case *js.ArrayExpr:
		for _, el := range n.List {
			if el.Value != nil {
				v := a.expr(el.Value)
				a.escape(v, el.Value, "is put in an array")
			}
		}
		return other
	case *js.ObjectExpr:
		a.object(n)
		return other
	case *js.TemplateExpr:
		return a.template(n)
	case *js.DotExpr:
		base := a.expr(n.X)
		name := dotName(n)
		a.timeOrChance(n, n.X, name)
		a.onGlobalObject(n, n.X, name)
		return a.member(base, name, n)
	case *js.IndexExpr:
		return a.index(n)
	case *js.NewExpr:
		return a.newExpr(n)
	case *js.CallExpr:
		return a.call(n)
	case *js.UnaryExpr:
		if x, ok := n.X.(*js.Var); ok && n.Op == js.TypeofToken && varOf(x).Decl == js.NoDecl {
			// typeof fetch asks whether it exists: it does not use it.
			return other
		}
		v := a.expr(n.X)
		switch n.Op {
		case js.AwaitToken:
			return v
		case js.PreIncrToken, js.PreDecrToken, js.PostIncrToken, js.PostDecrToken:
			a.assignTo(n.X, other, n)
		}
		return other
	case *js.BinaryExpr:
		return a.binary(n)
	case *js.YieldExpr:
		if n.X != nil {
			v := a.expr(n.X)
			a.escape(v, n.X, "is yielded")
		}
		return other
	case *js.ArrowFunc:
		a.function(n)
		return one(val{kind: vFunc, fn: n})
	case *js.FuncDecl:
		a.function(n)
		if n.Name != nil {
			a.addVal(n.Name, one(val{kind: vFunc, fn: n}), n)
		}
		return one(val{kind: vFunc, fn: n})
	case *js.ClassDecl:
		a.class(n)
		return other
	case *js.MethodDecl:
		a.function(n)
		return one(val{kind: vFunc, fn: n})
	}
	return other
}

func (a *analyzer) binary(n *js.BinaryExpr) vset {
	switch n.Op {
	case js.EqToken:
		v := a.expr(n.Y)
		a.assignTo(n.X, v, n.Y)
		return v
	case js.OrEqToken, js.AndEqToken, js.NullishEqToken:
		v := a.expr(n.Y)
		old := a.expr(n.X)
		a.assignTo(n.X, union(v, old), n.Y)
		return union(v, old)
	case js.OrToken, js.AndToken, js.NullishToken:
		return union(a.expr(n.X), a.expr(n.Y))
	}
	if n.Op >= js.EqToken && isAssignOp(n.Op) {
		a.expr(n.Y)
		a.assignTo(n.X, other, n.Y)
		return other
	}
	a.expr(n.X)
	a.expr(n.Y)
	return other
}

func isAssignOp(op js.TokenType) bool {
	switch op {
	case js.AddEqToken, js.SubEqToken, js.MulEqToken, js.DivEqToken, js.ModEqToken, js.ExpEqToken,
		js.LtLtEqToken, js.GtGtEqToken, js.GtGtGtEqToken, js.BitAndEqToken, js.BitOrEqToken, js.BitXorEqToken:
		return true
	}
	return false
}

func (a *analyzer) object(n *js.ObjectExpr) {
	for _, p := range n.List {
		if p.Name != nil && p.Name.IsComputed() {
			a.expr(p.Name.Computed)
		}
		v := a.expr(p.Value)
		if p.Init != nil {
			a.expr(p.Init)
		}
		if _, method := p.Value.(*js.MethodDecl); method {
			continue
		}
		if p.Spread {
			a.escape(v, p.Value, "is spread into an object")
		} else {
			a.escape(v, p.Value, "is put in an object")
		}
	}
}

// ---------------------------------------------------------------------
// Calls.

func (a *analyzer) call(n *js.CallExpr) vset {
	callee := a.expr(n.X)
	args := make([]vset, len(n.Args.List))
	exprs := make([]js.IExpr, len(n.Args.List))
	for i, arg := range n.Args.List {
		args[i] = a.expr(arg.Value)
		exprs[i] = arg.Value
		if arg.Rest {
			a.escape(args[i], arg.Value, "is spread into a call's arguments")
		}
	}
	if d, ok := n.X.(*js.DotExpr); ok {
		if v, ok := d.X.(*js.Var); ok && varOf(v).Decl == js.NoDecl && string(varOf(v).Data) == "Date" {
			_ = d
		}
	}
	if v, ok := n.X.(*js.Var); ok && varOf(v).Decl == js.NoDecl && string(varOf(v).Data) == "Date" {
		a.unstable(n, "Date()")
	}
	a.callValues(n, callee, exprs, args, n)
	return other
}

// callValues handles a call of callee with args (exprs are the argument
// expressions, nil for a tagged template).
func (a *analyzer) callValues(n js.INode, callee vset, exprs []js.IExpr, args []vset, call *js.CallExpr) {
	for v := range callee {
		switch v.kind {
		case vMethod:
			a.connectorCall(n, v, exprs)
		case vBuiltin:
			a.builtinCall(n, v, exprs, args)
		case vFunc:
			if _, ok := v.fn.(*js.ClassDecl); ok {
				continue
			}
			if a.report && v.fn != nil {
				a.localCalls[n] = appendOnce(a.localCalls[n], v.fn)
			}
			if parent := a.cur(); parent != nil {
				a.fn(parent).refs[v.fn] = true
			}
			for i := range args {
				var def js.INode
				if exprs != nil {
					def = exprs[i]
				}
				a.setParam(v.fn, i, args[i], def)
				if args[i].capability() && !paramAt(v.fn, i) {
					a.escape(args[i], def, "is passed where the function has no parameter of its own for it")
				}
			}
		}
	}
	if callee.unknown() || calleeBuiltin(callee) {
		for i := range args {
			for v := range args[i] {
				if v.kind == vFunc && a.report {
					a.callbacks[n] = appendOnce(a.callbacks[n], v.fn)
				}
			}
		}
	}
	if callee.unknown() && !isKeepCall(call) {
		for _, e := range exprs {
			if v, ok := e.(*js.Var); ok {
				a.changed[varOf(v)] = true
			}
		}
	}
	if callee.unknown() {
		for i := range args {
			var at js.INode = n
			if exprs != nil {
				at = exprs[i]
			}
			what := "this call"
			if call != nil {
				what = a.text(call.X)
			}
			a.escape(args[i], at, "is passed to "+what)
			// A callback given to a function keep does not see runs when that
			// function decides: it is referenced here, and reached from here.
		}
	}
}

// markChanged notes the variable an assignment's target object is.
func (a *analyzer) markChanged(t js.IExpr) {
	for {
		switch x := t.(type) {
		case *js.DotExpr:
			t = x.X
			continue
		case *js.IndexExpr:
			t = x.X
			continue
		case *js.GroupExpr:
			t = x.X
			continue
		case *js.Var:
			a.changed[varOf(x)] = true
		}
		return
	}
}

func isKeepCall(c *js.CallExpr) bool {
	if c == nil {
		return false
	}
	d, ok := c.X.(*js.DotExpr)
	if !ok {
		return false
	}
	v, ok := d.X.(*js.Var)
	return ok && varOf(v).Decl == js.NoDecl && string(varOf(v).Data) == "Keep"
}

func appendOnce(list []js.INode, n js.INode) []js.INode {
	for _, x := range list {
		if x == n {
			return list
		}
	}
	return append(list, n)
}

func calleeBuiltin(s vset) bool {
	for v := range s {
		if v.kind == vBuiltin {
			return true
		}
	}
	return false
}

// paramAt reports whether a function has a plain parameter at i (not a rest).
func paramAt(fn js.INode, i int) bool {
	switch f := fn.(type) {
	case *js.FuncDecl:
		return i < len(f.Params.List)
	case *js.ArrowFunc:
		return i < len(f.Params.List)
	case *js.MethodDecl:
		return i < len(f.Params.List)
	}
	return false
}

func argOf(exprs []js.IExpr, i int) js.IExpr {
	if i < len(exprs) {
		return exprs[i]
	}
	return nil
}

func (a *analyzer) connectorCall(n js.INode, v val, exprs []js.IExpr) {
	if !a.report {
		return
	}
	argAt := 0
	if v.fn == viaCall {
		argAt = 1
	}
	c := Call{Site: a.site(n, a.text(n)), Tool: v.tool, Method: v.name, Args: map[string]any{}, Prefixes: map[string]string{}, Open: true}
	if v.fn != viaApply {
		if obj := a.objectOf(argOf(exprs, argAt)); obj != nil {
			c.Open = false
			for _, p := range obj.List {
				name, ok := propName(p)
				if !ok {
					c.Open = true
					continue
				}
				// The last field of a name is the one the call gets.
				delete(c.Args, name)
				delete(c.Prefixes, name)
				if lit, ok := literalValue(a.resolve(p.Value)); ok {
					c.Args[name] = lit
				} else {
					c.Prefixes[name] = a.prefix(p.Value, 0)
				}
				if name == "subkey" {
					e := a.identity(p.Value)
					c.Subkey = &e
				}
			}
		}
	}
	var deps []string
	for _, e := range exprs {
		deps = append(deps, a.deps(e)...)
	}
	c.Deps = dedupe(deps)
	a.out.Calls = append(a.out.Calls, c)
	a.callFn = append(a.callFn, a.cur())
	a.callNode = append(a.callNode, n)
}

// registerInput reads a registerInput call's argument: its source, type,
// id (an identity expression) and whether it has a title (an argument
// keep cannot read is taken to have one: the host checks at run time).
func (a *analyzer) registerInput(n js.INode, arg js.IExpr) {
	in := Input{Site: a.site(n, a.text(n))}
	obj := a.objectOf(arg)
	if obj == nil {
		in.HasTitle = true // not known: the host checks at run time
	} else {
		for _, p := range obj.List {
			if p.Spread {
				in.HasTitle = true
				continue
			}
			name, ok := propName(p)
			if !ok {
				continue
			}
			switch name {
			case "source":
				in.Source, _ = literalString(p.Value)
			case "type":
				in.Type, _ = literalString(p.Value)
			case "id":
				e := a.identity(p.Value)
				in.ID = &e
			case "title":
				in.HasTitle = true
			}
		}
	}
	if in.ID == nil && obj == nil && arg != nil {
		e := a.identity(arg)
		in.ID = &e
	}
	a.out.Inputs = append(a.out.Inputs, in)
	a.inputFn = append(a.inputFn, a.cur())
}

func (a *analyzer) builtinCall(n js.INode, v val, exprs []js.IExpr, args []vset) {
	at := 0
	if v.fn == viaCall {
		at = 1
	}
	switch v.name {
	case "withItem":
		if at+2 < len(args) {
			for f := range args[at+2] {
				if f.kind == vFunc {
					a.setParam(f.fn, 0, one(val{kind: vCtx}), nil)
					if parent := a.cur(); parent != nil {
						a.fn(parent).refs[f.fn] = true
					}
				}
			}
		}
		if a.report {
			if id := argOf(exprs, at); id != nil {
				a.out.Items = append(a.out.Items, a.identity(id))
				a.itemFn = append(a.itemFn, a.cur())
			}
		}
	case "registerInput":
		if a.report {
			a.registerInput(n, argOf(exprs, at))
		}
	case "publish":
		if !a.report {
			return
		}
		p := Publish{Site: a.site(n, a.text(n))}
		p.Topics = a.topics(argOf(exprs, at))
		if ev := argOf(exprs, at+1); ev != nil {
			if obj := a.objectOf(ev); obj != nil {
				for _, prop := range obj.List {
					if name, ok := propName(prop); ok && name == "messageId" {
						e := a.identity(prop.Value)
						p.MessageID = &e
					}
				}
			} else {
				e := a.identity(ev)
				p.MessageID = &e
			}
		}
		a.out.Publishes = append(a.out.Publishes, p)
		a.publishFn = append(a.publishFn, a.cur())
	}
}

// topics reads publish's first argument: a topic or a list of them.
func (a *analyzer) topics(e js.IExpr) []string {
	if s, ok := literalString(e); ok {
		return []string{s}
	}
	if arr, ok := a.resolve(e).(*js.ArrayExpr); ok {
		var out []string
		for _, el := range arr.List {
			s, ok := literalString(el.Value)
			if !ok || el.Spread {
				return nil
			}
			out = append(out, s)
		}
		return out
	}
	return nil
}

// resolve follows a const name to the one expression it was given.
func (a *analyzer) resolve(e js.IExpr) js.IExpr {
	for i := 0; i < 10; i++ {
		switch x := e.(type) {
		case *js.GroupExpr:
			e = x.X
			continue
		case *js.Var:
			v := varOf(x)
			if v.Decl != js.LexicalDecl || len(a.defs[v]) != 1 {
				return e
			}
			d, ok := a.defs[v][0].(js.IExpr)
			if !ok {
				return e
			}
			e = d
			continue
		}
		return e
	}
	return e
}

// objectOf is the object literal an argument is, directly or through a
// const; nil otherwise.
func (a *analyzer) objectOf(e js.IExpr) *js.ObjectExpr {
	if e == nil {
		return nil
	}
	o, _ := a.resolve(e).(*js.ObjectExpr)
	return o
}

func propName(p js.Property) (string, bool) {
	if m, ok := p.Value.(*js.MethodDecl); ok && p.Name == nil && !p.Spread {
		if m.Name.Private != nil || m.Get || m.Set {
			return "", false
		}
		return nameOf(&m.Name.PropertyName)
	}
	if p.Spread || p.Name == nil {
		if v, ok := p.Value.(*js.Var); ok && !p.Spread {
			return string(v.Data), true
		}
		return "", false
	}
	return nameOf(p.Name)
}

func nameOf(n *js.PropertyName) (string, bool) {
	if n.IsComputed() {
		return staticName(n.Computed)
	}
	d := n.Literal.Data
	if n.Literal.TokenType == js.StringToken {
		return unquote(d)
	}
	return string(d), true
}

func literalString(e js.IExpr) (string, bool) {
	switch x := e.(type) {
	case *js.GroupExpr:
		return literalString(x.X)
	case *js.LiteralExpr:
		if x.TokenType == js.StringToken {
			return unquote(x.Data)
		}
	case *js.TemplateExpr:
		if x.Tag == nil && len(x.List) == 0 {
			return unquote(x.Tail)
		}
	}
	return "", false
}

func literalValue(e js.IExpr) (any, bool) {
	if s, ok := literalString(e); ok {
		return s, true
	}
	if l, ok := e.(*js.LiteralExpr); ok {
		switch l.TokenType {
		case js.TrueToken:
			return true, true
		case js.FalseToken:
			return false, true
		case js.DecimalToken:
			if f, err := strconv.ParseFloat(strings.ReplaceAll(string(l.Data), "_", ""), 64); err == nil {
				return f, true
			}
		}
	}
	return nil, false
}

// ---------------------------------------------------------------------
// Globals the sandbox does not have (issue 42).

// absentGlobals are the globals of Node and of browsers that keep's
// sandbox does not have, each with what a script writes instead: a model
// (or a person) used to them writes fetch(...) and the run would fail on
// its first call with "fetch is not defined" (TestAbsentGlobalsAreAbsent
// checks each is absent in the sandbox).
var absentGlobals = map[string]string{
	"fetch":          "call HTTP through keep: await ctx.http.request({ method: \"GET\", url }) (it returns { status, headers, body, json }; a write is keep's one write of the run, in mutate)",
	"XMLHttpRequest": "call HTTP through keep: await ctx.http.request({ method, url, headers, json })",
	"WebSocket":      "keep runs a handler to its end and has no sockets: poll with ctx.http.request({ method: \"GET\", url }) from a producer on a schedule, or receive pushes with a webhook (webhooks: { NAME: { handler } })",
	"EventSource":    "keep runs a handler to its end and has no streams: poll with ctx.http.request({ method: \"GET\", url }) from a producer on a schedule, or receive pushes with a webhook",
	"require":        "a script is one file and imports nothing: the connectors are on ctx (ctx.http.request, ctx.files.read, ctx.sql.query …); write helpers in the script itself",
	"module":         "a script is one file: export the workflow with export default Keep.workflow({ ... })",
	"exports":        "a script is one file: export the workflow with export default Keep.workflow({ ... })",
	"process":        "there is no process or environment: keep a credential in keep (printf %s \"$VALUE\" | keep secret set NAME) and write {secret:NAME} where it goes in a connector call (\"Authorization\": \"Bearer {secret:NAME}\"); settings go in the script",
	"__dirname":      "there is no file system path: read and write files with ctx.files.read({ path }) and ctx.files.write({ path, content }), relative to the workflow's files root",
	"__filename":     "there is no file system path: read and write files with ctx.files.read({ path }) and ctx.files.write({ path, content }), relative to the workflow's files root",
	"setTimeout":     "keep has no timers: a handler runs to its end — run later with a producer's or a task's schedule (schedule: { interval: \"5m\" }), and for a retry throw: keep runs the item again with backoff",
	"setInterval":    "keep has no timers: a handler runs to its end — repeat with a producer's or a task's schedule (schedule: { interval: \"5m\" })",
	"setImmediate":   "keep has no timers: await the work directly (await ctx.http.request({ ... }))",
	"clearTimeout":   "keep has no timers: a handler runs to its end — run later with a producer's or a task's schedule",
	"clearInterval":  "keep has no timers: a handler runs to its end — repeat with a producer's or a task's schedule",
	"clearImmediate": "keep has no timers: await the work directly",
	"Buffer":         "there is no Buffer: work on strings; bytes travel as { base64: \"…\" } in a connector call's argument",
	"window":         "there is no window: the script's globals are JavaScript's own, and the outside is reached through ctx (ctx.http.request({ ... }))",
	"document":       "there is no document: the script's globals are JavaScript's own, and the outside is reached through ctx (ctx.http.request({ ... }))",
	"localStorage":   "there is no localStorage: a handler's state is its return value (a producer's handler(ctx, state) gets what it returned last run)",
	"global":         "there is no global: the script's globals are JavaScript's own, and the outside is reached through ctx (ctx.http.request({ ... }))",
}

// absentGlobal refuses a name the sandbox does not have.
func (a *analyzer) absentGlobal(n js.INode, name string) {
	if instead, ok := absentGlobals[name]; ok {
		a.refuse(n, fmt.Sprintf("%s does not exist in keep's sandbox (the run would fail with \"%s is not defined\"): %s", name, name, instead))
	}
}

// onGlobalObject refuses globalThis.NAME (or through a const holding
// globalThis) for a NAME the sandbox does not have.
func (a *analyzer) onGlobalObject(n js.INode, base js.IExpr, name string) {
	if v, ok := a.resolve(base).(*js.Var); ok && varOf(v).Decl == js.NoDecl && string(varOf(v).Data) == "globalThis" {
		a.absentGlobal(n, name)
	}
}

// ---------------------------------------------------------------------
// Time and chance.

func (a *analyzer) unstable(n js.INode, what string) {
	if !a.report {
		return
	}
	a.out.Unstable = append(a.out.Unstable, a.site(n, what))
	a.unstableFn = append(a.unstableFn, a.cur())
}

// timeOrChance notes base.name when it reads the time or chance.
func (a *analyzer) timeOrChance(n js.INode, base js.IExpr, name string) {
	if what := unstableMember(base, name, a); what != "" {
		a.unstable(n, what)
	}
}

func unstableMember(base js.IExpr, name string, a *analyzer) string {
	if v, ok := base.(*js.Var); ok && varOf(v).Decl == js.NoDecl {
		switch g := string(varOf(v).Data); {
		case g == "Date" && name == "now":
			return "Date.now"
		case g == "Math" && name == "random":
			return "Math.random"
		}
	}
	if name == "now" || name == "random" {
		for v := range a.valsOf(base) {
			if v.kind == vCtx {
				return "ctx." + name
			}
		}
	}
	return ""
}

func (a *analyzer) valsOf(e js.IExpr) vset {
	if v, ok := e.(*js.Var); ok {
		return a.vals[varOf(v)]
	}
	if g, ok := e.(*js.GroupExpr); ok {
		return a.valsOf(g.X)
	}
	return nil
}

// unstableIn names the time and chance a node reads, anywhere inside it.
func (a *analyzer) unstableIn(n js.INode) []string {
	u := &unstableFinder{a: a}
	js.Walk(u, n)
	return u.found
}

type unstableFinder struct {
	a     *analyzer
	found []string
}

func (u *unstableFinder) Enter(n js.INode) js.IVisitor {
	switch x := n.(type) {
	case *js.DotExpr:
		if x != nil {
			if w := unstableMember(x.X, dotName(x), u.a); w != "" {
				u.found = append(u.found, w)
			}
		}
	case *js.IndexExpr:
		if x != nil {
			if name, ok := staticName(x.Y); ok {
				if w := unstableMember(x.X, name, u.a); w != "" {
					u.found = append(u.found, w)
				}
			}
		}
	case *js.NewExpr:
		if x != nil {
			if v, ok := x.X.(*js.Var); ok && varOf(v).Decl == js.NoDecl && string(varOf(v).Data) == "Date" && (x.Args == nil || len(x.Args.List) == 0) {
				u.found = append(u.found, "new Date()")
			}
		}
	case *js.CallExpr:
		if x != nil && u.a.connectorCallee(x.X) {
			// What a connector call returns is the outside's data: a
			// list asked for since Date.now() - 3600000 holds ids of
			// its own. (The call's own subkey is an identity of its own.)
			return nil
		}
		if x != nil {
			if v, ok := x.X.(*js.Var); ok && varOf(v).Decl == js.NoDecl && string(varOf(v).Data) == "Date" {
				u.found = append(u.found, "Date()")
			}
		}
	case *js.Var:
		if x != nil {
			if v := varOf(x); v.Decl == js.NoDecl && (string(v.Data) == "crypto" || string(v.Data) == "performance") {
				u.found = append(u.found, string(v.Data))
			}
			for v := range u.a.vals[varOf(x)] {
				if v.kind == vBuiltin && (v.name == "now" || v.name == "random") {
					u.found = append(u.found, "ctx."+v.name)
				}
			}
		}
	}
	return u
}

func (u *unstableFinder) Exit(js.INode) {}

// connectorCallee reports whether a callee is ctx.TOOL.METHOD, directly or
// through names holding ctx, a tool or a method.
func (a *analyzer) connectorCallee(e js.IExpr) bool {
	for v := range a.staticVals(e) {
		if v.kind == vMethod {
			return true
		}
	}
	return false
}

// staticVals is what a name or a chain of names on it holds, as the
// analysis learnt (nothing is recorded).
func (a *analyzer) staticVals(e js.IExpr) vset {
	switch x := e.(type) {
	case *js.Var:
		return a.vals[varOf(x)]
	case *js.GroupExpr:
		return a.staticVals(x.X)
	case *js.DotExpr:
		if base := a.staticVals(x.X); len(base) > 0 {
			return a.member(base, dotName(x), x)
		}
	}
	return nil
}

// ---------------------------------------------------------------------
// Identities and what they depend on.

func (a *analyzer) identity(e js.IExpr) Expr {
	x := Expr{Site: a.site(e, a.text(e))}
	nodes := a.slice(e)
	for _, n := range nodes {
		if u, ok := a.unstableMemo[n]; ok {
			x.Unstable = append(x.Unstable, u...)
			continue
		}
		u := a.unstableIn(n)
		a.unstableMemo[n] = u
		x.Unstable = append(x.Unstable, u...)
	}
	x.Unstable = dedupe(x.Unstable)
	x.Deps = a.deps(e)
	x.Prefix = a.prefix(e, 0)
	return x
}

// prefix is the constant text an expression's value starts with.
func (a *analyzer) prefix(e js.IExpr, depth int) string {
	if depth > 10 {
		return ""
	}
	if s, ok := literalString(e); ok {
		return s
	}
	switch x := a.resolve(e).(type) {
	case *js.TemplateExpr:
		if x.Tag != nil {
			return ""
		}
		if len(x.List) == 0 {
			s, _ := unquote(x.Tail)
			return s
		}
		// The head is "`text${"; the expression inside may add more.
		head := string(x.List[0].Value)
		head = strings.TrimSuffix(strings.TrimPrefix(head, "`"), "${")
		if strings.Contains(head, `\`) {
			return ""
		}
		return head + a.prefix(x.List[0].Expr, depth+1)
	case *js.BinaryExpr:
		if x.Op == js.AddToken {
			l := a.prefix(x.X, depth+1)
			if s, ok := literalString(a.resolve(x.X)); ok && s == l {
				return l + a.prefix(x.Y, depth+1)
			}
			return l
		}
	case *js.LiteralExpr:
		if s, ok := literalString(x); ok {
			return s
		}
	}
	return ""
}

// deps are the definitions an expression reads, normalized, sorted.
func (a *analyzer) deps(e js.INode) []string {
	var out []string
	seen := map[*js.Var]bool{}
	var visit func(n js.INode, depth int)
	visit = func(n js.INode, depth int) {
		if depth > 12 || len(out) > 64 {
			return
		}
		js.Walk(&varCollector{fn: func(v *js.Var) {
			v = varOf(v)
			if seen[v] || v.Decl == js.NoDecl {
				return
			}
			seen[v] = true
			for _, d := range a.defs[v] {
				out = append(out, string(v.Data)+" <- "+a.text(d))
				visit(d, depth+1)
			}
			if p := a.paramDefs(v); len(p) > 0 {
				for _, d := range p {
					out = append(out, string(v.Data)+" <- "+a.text(d))
					visit(d, depth+1)
				}
			}
		}}, n)
		// Functions called inside count whole: their bodies build the value.
		if _, isFn := n.(*js.ArrowFunc); !isFn {
			js.Walk(&fnBodyVisitor{fn: func(f js.INode) { visit(f, depth+1) }}, n)
		}
	}
	visit(e, 0)
	return dedupe(out)
}

// fnBodyVisitor calls fn with each function literal inside a node.
type fnBodyVisitor struct{ fn func(js.INode) }

func (f *fnBodyVisitor) Enter(n js.INode) js.IVisitor {
	switch x := n.(type) {
	case *js.ArrowFunc:
		if x != nil {
			js.Walk(&stmtWalker{f: f}, &x.Body)
		}
		return nil
	case *js.FuncDecl:
		if x != nil {
			js.Walk(&stmtWalker{f: f}, &x.Body)
		}
		return nil
	}
	return f
}
func (f *fnBodyVisitor) Exit(js.INode) {}

type stmtWalker struct{ f *fnBodyVisitor }

func (s *stmtWalker) Enter(n js.INode) js.IVisitor {
	if _, ok := n.(*js.BlockStmt); ok {
		s.f.fn(n)
		return nil
	}
	return s
}
func (s *stmtWalker) Exit(js.INode) {}

// paramDefs are the arguments a function parameter was given.
func (a *analyzer) paramDefs(v *js.Var) []js.INode {
	if a.paramIndex == nil {
		a.paramIndex = map[*js.Var][]js.INode{}
		for fn, f := range a.funcs {
			var params *js.Params
			switch x := fn.(type) {
			case *js.FuncDecl:
				params = &x.Params
			case *js.ArrowFunc:
				params = &x.Params
			case *js.MethodDecl:
				params = &x.Params
			}
			if params == nil {
				continue
			}
			for i, p := range params.List {
				if pv, ok := p.Binding.(*js.Var); ok && i < len(f.defs) {
					pv = varOf(pv)
					a.paramIndex[pv] = append(a.paramIndex[pv], f.defs[i]...)
				}
			}
		}
	}
	return a.paramIndex[v]
}

// slice is an expression and every definition it reads.
func (a *analyzer) slice(e js.IExpr) []js.INode {
	out := []js.INode{e}
	seen := map[*js.Var]bool{}
	for i := 0; i < len(out) && i < 64; i++ {
		js.Walk(&varCollector{fn: func(v *js.Var) {
			v = varOf(v)
			if seen[v] || v.Decl == js.NoDecl {
				return
			}
			seen[v] = true
			out = append(out, a.defs[v]...)
			out = append(out, a.paramDefs(v)...)
		}}, out[i])
		js.Walk(&fnBodyVisitor{fn: func(f js.INode) { out = append(out, f) }}, out[i])
	}
	return out
}

func dedupe(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	set := map[string]bool{}
	for _, x := range s {
		set[x] = true
	}
	return sortedKeys(set)
}

// ---------------------------------------------------------------------
// Handlers: read from the object given to Keep.workflow (exported, or
// passed to the call), through consts and Keep.consumer/producer/task.

var phases = map[string][]string{"producers": {"handler"}, "consumers": {"prepare", "mutate", "next"}, "tasks": {"run"}, "webhooks": {"handler"}}

func (a *analyzer) handlers() {
	var defs []js.IExpr
	js.Walk(&workflowFinder{a: a, found: func(e js.IExpr) { defs = append(defs, e) }}, a.tree)
	for _, st := range a.tree.List {
		if ex, ok := st.(*js.ExportStmt); ok && ex.Default && ex.Decl != nil {
			if _, isCall := keepCall(ex.Decl, "workflow"); !isCall {
				defs = append(defs, ex.Decl)
			}
		}
	}
	for _, d := range defs {
		obj := a.declObject(d)
		if obj == nil {
			a.unresolved = append(a.unresolved, unresolvedAt{d, "the workflow's declaration is not an object literal keep can read: write export default Keep.workflow({ name, topics, producers, consumers, tasks })"})
			continue
		}
		a.eachProp(obj, func(group string, p js.Property) {
			kinds, ok := phases[group]
			if !ok {
				return
			}
			gobj := a.declObject(p.Value)
			if gobj == nil {
				a.unresolved = append(a.unresolved, unresolvedAt{p.Value, fmt.Sprintf("%s is not an object literal keep can read: write %s: { name: { ... } } in the declaration", group, group)})
				return
			}
			a.eachProp(gobj, func(name string, hp js.Property) {
				if l := a.propLine(hp); l > 0 && a.out.handlerLine[group+"."+name] == 0 {
					a.out.handlerLine[group+"."+name] = l
				}
				hv := hp.Value
				if arg, ok := keepCall(hv, ""); ok {
					hv = arg
				}
				hobj := a.declObject(hv)
				if hobj == nil {
					a.unresolved = append(a.unresolved, unresolvedAt{hp.Value, fmt.Sprintf("%s.%s is not an object literal keep can read: write it in the declaration, as %s: Keep.%s({ ... })", group, name, name, strings.TrimSuffix(group, "s"))})
					return
				}
				a.eachProp(hobj, func(phase string, pp js.Property) {
					if !contains(kinds, phase) {
						return
					}
					who := group + "." + name + "." + phase
					fns := a.funcsOf(pp.Value)
					if len(fns) == 0 {
						a.unresolved = append(a.unresolved, unresolvedAt{pp.Value, fmt.Sprintf("keep cannot find the function of %s: write it in the declaration (async %s(ctx, ...) { ... }) or name a function the script declares", who, phase)})
						return
					}
					if !contains(a.out.Handlers, who) {
						a.out.Handlers = append(a.out.Handlers, who)
					}
					for _, fn := range fns {
						f := a.fn(fn)
						if !contains(f.roots, who) {
							f.roots = append(f.roots, who)
						}
						a.setParam(fn, 0, one(val{kind: vCtx}), nil)
					}
				})
			})
		})
	}
	sort.Strings(a.out.Handlers)
	js.Walk(&stringLines{a: a}, a.tree)
	sl := &secretLines{}
	js.Walk(sl, a.tree)
	a.out.Secrets, a.out.SecretsComputed = sortedKeys(sl.names), sl.computed
}

// secretLines collects the {secret:NAME}s of every string literal and
// every template's text (kt.SecretsIn reads them as the call's fill does).
type secretLines struct {
	names    map[string]bool
	computed bool
}

func (s *secretLines) add(text string, ok bool) {
	if !ok {
		// A string whose escapes do not read is judged by its text.
		s.computed = s.computed || strings.Contains(text, "secret")
	}
	names, partial := kt.SecretsIn(text)
	if s.names == nil {
		s.names = map[string]bool{}
	}
	for _, n := range names {
		s.names[n] = true
	}
	s.computed = s.computed || partial
}

func (s *secretLines) Enter(n js.INode) js.IVisitor {
	switch x := n.(type) {
	case *js.LiteralExpr:
		if x.TokenType == js.StringToken {
			s.add(unquoteOK(x.Data))
		}
	case *js.TemplateExpr:
		// Each piece of text between substitutions: "`a${", "}b${", "}c`".
		for _, p := range x.List {
			s.add(templateRead(p.Value))
		}
		s.add(templateRead(x.Tail))
	}
	return s
}

func (s *secretLines) Exit(js.INode) {}

// unquoteOK is unquote, with the raw text when its escapes do not read.
func unquoteOK(b []byte) (string, bool) {
	if t, ok := unquote(b); ok {
		return t, true
	}
	return string(b), false
}

// templateRead is the text of a template's piece (templateText), its
// escapes read.
func templateRead(b []byte) (string, bool) {
	t := templateText(b)
	if !strings.Contains(t, `\`) {
		return t, true
	}
	return unquoteOK([]byte("`" + strings.ReplaceAll(t, "\\`", "`") + "`"))
}

// propLine is the line of a property's name.
func (a *analyzer) propLine(p js.Property) int {
	if p.Name != nil {
		return a.line(&p.Name.Literal)
	}
	if m, ok := p.Value.(*js.MethodDecl); ok {
		return a.line(&m.Name.Literal)
	}
	return a.line(p.Value)
}

type stringLines struct{ a *analyzer }

func (s *stringLines) Enter(n js.INode) js.IVisitor {
	var l *js.LiteralExpr
	switch x := n.(type) {
	case *js.LiteralExpr:
		l = x
	case *js.PropertyName:
		if x != nil {
			l = &x.Literal
		}
	}
	if l != nil && len(l.Data) > 0 {
		str := string(l.Data)
		if l.TokenType == js.StringToken {
			str, _ = unquote(l.Data)
		}
		if _, ok := s.a.out.stringLine[str]; !ok {
			s.a.out.stringLine[str] = s.a.line(l)
		}
	}
	return s
}
func (s *stringLines) Exit(js.INode) {}

// declObject is objectOf for the declaration: an object reached through a
// name that is changed after it is written is not read (it would not be
// what runs).
func (a *analyzer) declObject(e js.IExpr) *js.ObjectExpr {
	for x := e; ; {
		g, ok := x.(*js.GroupExpr)
		if !ok {
			break
		}
		x = g.X
		e = x
	}
	if v, ok := e.(*js.Var); ok && a.changed[varOf(v)] {
		a.unresolved = append(a.unresolved, unresolvedAt{e, fmt.Sprintf("%s is changed after it is written, and keep reads the workflow's declaration as it is written: put everything in it where it is declared", string(varOf(v).Data))})
		return &js.ObjectExpr{}
	}
	return a.objectOf(e)
}

type unresolvedAt struct {
	at  js.INode
	msg string
}

// eachProp calls fn for every named property of an object literal, and of
// the object literals it spreads; what it cannot read is noted.
func (a *analyzer) eachProp(obj *js.ObjectExpr, fn func(name string, p js.Property)) {
	a.eachPropDepth(obj, fn, 0)
}

func (a *analyzer) eachPropDepth(obj *js.ObjectExpr, fn func(name string, p js.Property), depth int) {
	for _, p := range obj.List {
		if p.Spread {
			inner := a.declObject(p.Value)
			if inner == nil || depth > 8 {
				a.unresolved = append(a.unresolved, unresolvedAt{p.Value, fmt.Sprintf("...%s spreads an object keep cannot read into the declaration: write its members in the declaration", a.text(p.Value))})
				continue
			}
			a.eachPropDepth(inner, fn, depth+1)
			continue
		}
		name, ok := propName(p)
		if !ok {
			a.unresolved = append(a.unresolved, unresolvedAt{p.Value, "a member of the declaration has a computed name keep cannot read: write the name"})
			continue
		}
		fn(name, p)
	}
}

// funcsOf are the functions an expression may be.
func (a *analyzer) funcsOf(e js.IExpr) []js.INode {
	switch x := e.(type) {
	case *js.ArrowFunc, *js.FuncDecl, *js.MethodDecl:
		return []js.INode{x}
	case *js.GroupExpr:
		return a.funcsOf(x.X)
	case *js.CondExpr:
		l, r := a.funcsOf(x.X), a.funcsOf(x.Y)
		if len(l) == 0 || len(r) == 0 {
			return nil
		}
		return append(l, r...)
	case *js.Var:
		var out []js.INode
		for v := range a.vals[varOf(x)] {
			if v.kind != vFunc {
				return nil
			}
			out = append(out, v.fn)
		}
		return out
	}
	return nil
}

// keepCall reports whether e is Keep.NAME(arg) (any of consumer, producer,
// task when name is ""), and returns arg.
func keepCall(e js.IExpr, name string) (js.IExpr, bool) {
	c, ok := e.(*js.CallExpr)
	if !ok {
		return nil, false
	}
	d, ok := c.X.(*js.DotExpr)
	if !ok {
		return nil, false
	}
	v, ok := d.X.(*js.Var)
	if !ok || varOf(v).Decl != js.NoDecl || string(varOf(v).Data) != "Keep" {
		return nil, false
	}
	m := dotName(d)
	if name == "" && m != "consumer" && m != "producer" && m != "task" || name != "" && m != name {
		return nil, false
	}
	if len(c.Args.List) == 0 {
		return &js.LiteralExpr{}, true
	}
	return c.Args.List[0].Value, true
}

type workflowFinder struct {
	a     *analyzer
	found func(js.IExpr)
}

func (w *workflowFinder) Enter(n js.INode) js.IVisitor {
	if c, ok := n.(*js.CallExpr); ok && c != nil {
		if arg, ok := keepCall(c, "workflow"); ok {
			w.found(arg)
		}
	}
	return w
}
func (w *workflowFinder) Exit(js.INode) {}

// ---------------------------------------------------------------------
// Sequences: which connector calls may run after which, in one
// invocation of a handler. A return or throw ends a path; a loop, and a
// callback handed to a function the script does not define, run their
// body again; a call of the script's own function runs its body there.

type iset map[int]bool

func join(sets ...iset) iset {
	var out iset
	for _, s := range sets {
		if s == nil {
			continue
		}
		if out == nil {
			out = iset{}
		}
		for k := range s {
			out[k] = true
		}
	}
	return out
}

type seqWalker struct {
	a       *analyzer
	handler string
	calls   map[js.INode][]int
	returns []iset
	breaks  []iset
	conts   []iset
	throws  []iset
	inFn    map[js.INode]bool
	depth   int
	pairs   map[[2]int]bool
	budget  int
	steps   int
}

func (a *analyzer) sequence() {
	calls := map[js.INode][]int{}
	for i, n := range a.callNode {
		calls[n] = append(calls[n], i)
	}
	for _, h := range a.out.Handlers {
		w := &seqWalker{a: a, handler: h, calls: calls, inFn: map[js.INode]bool{}, pairs: map[[2]int]bool{}, budget: 20000}
		for fn, f := range a.funcs {
			if contains(f.roots, h) {
				w.inline(fn, iset{})
			}
		}
		var ps [][2]int
		for p := range w.pairs {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i][0] < ps[j][0] || ps[i][0] == ps[j][0] && ps[i][1] < ps[j][1] })
		for _, p := range ps {
			a.out.sequences = append(a.out.sequences, callPair{handler: h, first: p[0], second: p[1]})
		}
	}
}

func (w *seqWalker) inline(fn js.INode, p iset) iset {
	var body *js.BlockStmt
	switch f := fn.(type) {
	case *js.FuncDecl:
		body = &f.Body
	case *js.ArrowFunc:
		body = &f.Body
	case *js.MethodDecl:
		body = &f.Body
	}
	if body == nil || w.inFn[fn] || w.depth > 16 || w.budget <= 0 {
		return p
	}
	w.budget--
	w.inFn[fn] = true
	w.depth++
	w.returns = append(w.returns, nil)
	end := w.stmts(body.List, p)
	rets := w.returns[len(w.returns)-1]
	w.returns = w.returns[:len(w.returns)-1]
	w.depth--
	delete(w.inFn, fn)
	if out := join(end, rets); out != nil {
		return out
	}
	return p
}

func top(stack []iset) int { return len(stack) - 1 }

func (w *seqWalker) stmts(list []js.IStmt, p iset) iset {
	for _, s := range list {
		if p == nil {
			return nil
		}
		p = w.stmt(s, p)
	}
	return p
}

func (w *seqWalker) loop(body js.IStmt, p iset) iset {
	w.breaks = append(w.breaks, nil)
	w.conts = append(w.conts, nil)
	first := w.stmt(body, p)
	again := w.stmt(body, join(p, first, w.conts[top(w.conts)]))
	out := join(p, first, again, w.conts[top(w.conts)], w.breaks[top(w.breaks)])
	w.breaks = w.breaks[:top(w.breaks)]
	w.conts = w.conts[:top(w.conts)]
	return out
}

// ifStmt: the body, the else, or either; a literal condition picks one.
func (w *seqWalker) ifStmt(n *js.IfStmt, p iset) iset {
	p = w.expr(n.Cond, p)
	if l, ok := n.Cond.(*js.LiteralExpr); ok && (l.TokenType == js.FalseToken || l.TokenType == js.TrueToken) {
		if l.TokenType == js.TrueToken {
			return w.stmt(n.Body, p)
		}
		return w.stmt(n.Else, p) // if (false): the body never runs
	}
	t := w.stmt(n.Body, p)
	if n.Else == nil {
		return join(t, p)
	}
	return join(t, w.stmt(n.Else, p))
}

// switchStmt: each case falls through to the next; a break leaves.
func (w *seqWalker) switchStmt(n *js.SwitchStmt, p iset) iset {
	p = w.expr(n.Init, p)
	w.breaks = append(w.breaks, nil)
	var cur iset
	for _, c := range n.List {
		entry := join(w.expr(c.Cond, p), cur)
		cur = w.stmts(c.List, entry)
	}
	out := join(cur, w.breaks[top(w.breaks)], p)
	w.breaks = w.breaks[:top(w.breaks)]
	return out
}

// branch: a break or continue ends the path here, joining its loop's exit
// or next turn; a labelled one is not followed.
func (w *seqWalker) branch(n *js.BranchStmt, p iset) iset {
	if n.Label != nil {
		return nil
	}
	if n.Type == js.BreakToken && len(w.breaks) > 0 {
		w.breaks[top(w.breaks)] = join(w.breaks[top(w.breaks)], p)
	} else if n.Type == js.ContinueToken && len(w.conts) > 0 {
		w.conts[top(w.conts)] = join(w.conts[top(w.conts)], p)
	}
	return nil
}

// tryStmt: catch starts from anywhere the body could have thrown;
// finally runs after either.
func (w *seqWalker) tryStmt(n *js.TryStmt, p iset) iset {
	w.throws = append(w.throws, nil)
	var t iset
	if n.Body != nil {
		t = w.stmts(n.Body.List, p)
	}
	thrown := w.throws[top(w.throws)]
	w.throws = w.throws[:top(w.throws)]
	out := t
	if n.Catch != nil {
		out = join(t, w.stmts(n.Catch.List, join(p, t, thrown)))
	}
	if n.Finally != nil {
		return w.stmts(n.Finally.List, join(out, p))
	}
	return out
}

func (w *seqWalker) stmt(s js.IStmt, p iset) iset {
	// Loops walked twice inside loops are exponential in their depth; a
	// script nested that deep gets no verdict past the budget (the run-time
	// check still stands).
	if w.steps++; w.steps > 200000 {
		return p
	}
	switch n := s.(type) {
	case nil:
		return p
	case *js.BlockStmt:
		return w.stmts(n.List, p)
	case *js.ExprStmt:
		return w.expr(n.Value, p)
	case *js.VarDecl:
		for _, el := range n.List {
			p = w.expr(el.Default, p)
		}
		return p
	case *js.IfStmt:
		return w.ifStmt(n, p)
	case *js.WhileStmt:
		return w.loop(n.Body, w.expr(n.Cond, p))
	case *js.DoWhileStmt:
		return w.loop(n.Body, w.expr(n.Cond, p))
	case *js.ForStmt:
		if n.Init != nil {
			p = w.expr(n.Init, p)
		}
		return w.loop(n.Body, w.expr(n.Cond, p))
	case *js.ForInStmt:
		return w.loop(n.Body, w.expr(n.Value, p))
	case *js.ForOfStmt:
		return w.loop(n.Body, w.expr(n.Value, p))
	case *js.SwitchStmt:
		return w.switchStmt(n, p)
	case *js.ReturnStmt:
		p = w.expr(n.Value, p)
		if len(w.returns) > 0 {
			w.returns[top(w.returns)] = join(w.returns[top(w.returns)], p)
		}
		return nil
	case *js.ThrowStmt:
		p = w.expr(n.Value, p)
		if len(w.throws) > 0 {
			w.throws[top(w.throws)] = join(w.throws[top(w.throws)], p)
		}
		return nil
	case *js.BranchStmt:
		return w.branch(n, p)
	case *js.LabelledStmt:
		return w.stmt(n.Value, p)
	case *js.WithStmt:
		return w.stmt(n.Body, w.expr(n.Cond, p))
	case *js.TryStmt:
		return w.tryStmt(n, p)
	case *js.ExportStmt:
		if n.Default {
			return w.expr(n.Decl, p)
		}
		return p
	}
	return p
}

func (w *seqWalker) exprs(p iset, es ...js.IExpr) iset {
	for _, e := range es {
		p = w.expr(e, p)
	}
	return p
}

func (w *seqWalker) expr(e js.IExpr, p iset) iset {
	if p == nil {
		return nil
	}
	switch n := e.(type) {
	case nil:
		return p
	case *js.GroupExpr:
		return w.expr(n.X, p)
	case *js.CommaExpr:
		return w.exprs(p, n.List...)
	case *js.CondExpr:
		p = w.expr(n.Cond, p)
		return join(w.expr(n.X, p), w.expr(n.Y, p))
	case *js.BinaryExpr:
		switch n.Op {
		case js.AndToken, js.OrToken, js.NullishToken, js.AndEqToken, js.OrEqToken, js.NullishEqToken:
			p = w.expr(n.X, p)
			return join(p, w.expr(n.Y, p))
		}
		return w.exprs(p, n.X, n.Y)
	case *js.UnaryExpr:
		return w.expr(n.X, p)
	case *js.DotExpr:
		return w.expr(n.X, p)
	case *js.IndexExpr:
		return w.exprs(p, n.X, n.Y)
	case *js.ArrayExpr:
		for _, el := range n.List {
			p = w.expr(el.Value, p)
		}
		return p
	case *js.ObjectExpr:
		for _, pr := range n.List {
			if _, m := pr.Value.(*js.MethodDecl); m {
				continue
			}
			if pr.Name != nil && pr.Name.IsComputed() {
				p = w.expr(pr.Name.Computed, p)
			}
			p = w.exprs(p, pr.Value, pr.Init)
		}
		return p
	case *js.TemplateExpr:
		p = w.expr(n.Tag, p)
		for _, part := range n.List {
			p = w.expr(part.Expr, p)
		}
		return w.event(n, p)
	case *js.YieldExpr:
		return w.expr(n.X, p)
	case *js.NewExpr:
		p = w.expr(n.X, p)
		if n.Args != nil {
			for _, arg := range n.Args.List {
				p = w.expr(arg.Value, p)
			}
		}
		return w.event(n, p)
	case *js.CallExpr:
		p = w.expr(n.X, p)
		for _, arg := range n.Args.List {
			p = w.expr(arg.Value, p)
		}
		return w.event(n, p)
	}
	return p
}

// event is what a call does once its callee and arguments are evaluated.
func (w *seqWalker) event(n js.INode, p iset) iset {
	for _, i := range w.calls[n] {
		for prev := range p {
			w.pairs[[2]int{prev, i}] = true
		}
		p = join(p, iset{i: true})
	}
	if fns := w.a.localCalls[n]; len(fns) > 0 {
		var out iset
		for _, fn := range fns {
			out = join(out, w.inline(fn, p))
		}
		p = join(p, out)
	}
	for _, fn := range w.a.callbacks[n] {
		once := w.inline(fn, p)
		twice := w.inline(fn, join(p, once))
		p = join(p, once, twice)
	}
	return p
}
