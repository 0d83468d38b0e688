package script

import (
	"github.com/tdewolff/parse/v2/js"
)

// Time and chance: where a script reads the clock or a random number
// (Date.now, new Date(), Math.random, crypto, performance, ctx.now,
// ctx.random), which an identity must not depend on.

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
