package script

import (
	"fmt"
	"sort"

	"github.com/tdewolff/parse/v2/js"
)

// Writes: which connector calls may run after which, in one invocation
// of a handler (WritePairs). A return or throw ends a path; a loop, and
// a callback handed to a function the script does not define, run their
// body again; a call of the script's own function runs its body there.

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
