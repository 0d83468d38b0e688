package script

import (
	"fmt"

	"github.com/tdewolff/parse/v2/js"
)

// Expressions: what each may hold, and where ctx would leave the
// analysis's sight (refused, with how to write it instead).

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

// expr is what an expression may hold, walking everything inside it.
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
		a.array(n)
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
		return a.unary(n)
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

// array reads an array literal: what is put in it escapes.
func (a *analyzer) array(n *js.ArrayExpr) {
	for _, el := range n.List {
		if el.Value != nil {
			v := a.expr(el.Value)
			a.escape(v, el.Value, "is put in an array")
		}
	}
}

// unary reads a unary expression: await passes its operand's values on;
// ++ and -- assign.
func (a *analyzer) unary(n *js.UnaryExpr) vset {
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
