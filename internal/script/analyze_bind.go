package script

import (
	"fmt"

	"github.com/tdewolff/parse/v2/js"
)

// Bindings: declarations, destructuring and assignments, each giving a
// name what its source may hold.

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
				a.expr(item.Key.Computed)
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
