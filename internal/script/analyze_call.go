package script

import (
	"github.com/tdewolff/parse/v2/js"
)

// Calls: a call of ctx.TOOL.METHOD is recorded (Call), ctx's own builtins
// read (registerInput, publish, withItem), a call of the script's own
// function binds its parameters, and what goes to code the script does
// not define escapes.

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
