package script

import (
	"github.com/tdewolff/parse/v2/js"
)

// Statements and functions: the walk that carries what each name holds
// through the script's statements, its functions and its classes.

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
