package script

import (
	"strings"

	"github.com/tdewolff/parse/v2/js"
)

// Identities and what they depend on: an item id, a messageId, an input
// id or a subkey, with the definitions it reads and the time or chance
// in them.

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
