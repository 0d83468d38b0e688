package script

import (
	"github.com/tdewolff/parse/v2/js"
)

// Values: what an expression may hold, as far as ctx is concerned, and
// the analyzer's state — what each name and each function's parameters
// may hold, learnt pass after pass until nothing new is.

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
