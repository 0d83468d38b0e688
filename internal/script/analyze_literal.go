package script

import (
	"strconv"
	"strings"

	"github.com/tdewolff/parse/v2/js"
)

// Literals: names and values written in the script, directly or through
// a const.

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
