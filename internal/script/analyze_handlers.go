package script

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tdewolff/parse/v2/js"
)

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
