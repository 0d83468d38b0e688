package script

import (
	"fmt"
	"strings"

	"github.com/tdewolff/parse/v2/js"
)

// Sites: where a node is (the parser keeps no offsets, but every token it
// keeps is a slice of the buffer it read, so a token's offset is where it
// points), what is recorded on the last pass, and which handlers reach
// each recorded site.

func (a *analyzer) offsetOf(b []byte) int { return offsetIn(a.buf, b) }

type posFinder struct {
	a        *analyzer
	lit, vr  int
	checkVar bool
}

func (p *posFinder) Enter(n js.INode) js.IVisitor {
	switch n := n.(type) {
	case *js.LiteralExpr:
		if n != nil {
			p.min(&p.lit, n.Data)
		}
	case js.LiteralExpr:
		p.min(&p.lit, n.Data)
	case *js.TemplateExpr:
		if n != nil {
			for _, part := range n.List {
				p.min(&p.lit, part.Value)
			}
			p.min(&p.lit, n.Tail)
		}
	case *js.Var:
		if n != nil {
			p.min(&p.vr, n.Data)
		}
	}
	return p
}

func (p *posFinder) Exit(js.INode) {}

func (p *posFinder) min(at *int, b []byte) {
	if o := p.a.offsetOf(b); o >= 0 && (*at < 0 || o < *at) {
		*at = o
	}
}

// line is the line of a node's first token that can be placed; 0 when none.
func (a *analyzer) line(n js.INode) int {
	if n == nil {
		return 0
	}
	p := &posFinder{a: a, lit: -1, vr: -1}
	js.Walk(p, n)
	off := p.lit
	if off < 0 && len(a.stmtAt) > 0 {
		// A bare name points where it was declared; the statement it is
		// used in is closer.
		q := &posFinder{a: a, lit: -1, vr: -1}
		js.Walk(q, a.stmtAt[len(a.stmtAt)-1])
		off = q.lit
	}
	if off < 0 {
		off = p.vr
	}
	if off < 0 {
		return 0
	}
	return strings.Count(string(a.buf[:off]), "\n") + 1
}

// text is a node's source, normalized: the tree printed back.
func (a *analyzer) text(n js.INode) string {
	if n == nil {
		return ""
	}
	if t, ok := a.exprMemo[n]; ok {
		return t
	}
	var b strings.Builder
	n.JS(&b)
	t := strings.Join(strings.Fields(b.String()), " ")
	a.exprMemo[n] = t
	return t
}

func (a *analyzer) cur() js.INode {
	if len(a.stack) == 0 {
		return nil
	}
	return a.stack[len(a.stack)-1]
}

func (a *analyzer) site(n js.INode, text string) Site {
	return Site{Line: a.line(n), Text: text}
}

func (a *analyzer) refuse(n js.INode, msg string) {
	if !a.report {
		return
	}
	s := a.site(n, msg)
	k := fmt.Sprintf("%d %s", s.Line, msg)
	if a.refused[k] {
		return
	}
	a.refused[k] = true
	a.out.Refused = append(a.out.Refused, s)
	a.refusedFn = append(a.refusedFn, a.cur())
}

func (a *analyzer) escape(s vset, n js.INode, where string) {
	if !a.report || !s.capability() {
		return
	}
	a.refuse(n, fmt.Sprintf("%s %s, where keep can no longer see what is called on it: use ctx only as ctx.TOOL.METHOD(...) (for example ctx.http.request({ ... })), or pass ctx itself, as an argument of its own, to a function the script declares", a.text(n), where))
}

// attribute fills in the handlers of every site, once every function
// knows which handlers reach it.
func (a *analyzer) attribute() {
	// A function reaches what it references (calls, callbacks, nested functions).
	for fn, f := range a.funcs {
		for _, h := range f.roots {
			a.reach(fn, h)
		}
	}
	set := func(s *Site, fn js.INode) {
		if fn == nil {
			return
		}
		if f := a.funcs[fn]; f != nil {
			s.Handlers = sortedKeys(f.reached)
		}
	}
	for i := range a.out.Calls {
		set(&a.out.Calls[i].Site, a.callFn[i])
		if a.out.Calls[i].Subkey != nil {
			a.out.Calls[i].Subkey.Handlers = a.out.Calls[i].Handlers
		}
	}
	for i := range a.out.Inputs {
		set(&a.out.Inputs[i].Site, a.inputFn[i])
		if a.out.Inputs[i].ID != nil {
			a.out.Inputs[i].ID.Handlers = a.out.Inputs[i].Handlers
		}
	}
	for i := range a.out.Publishes {
		set(&a.out.Publishes[i].Site, a.publishFn[i])
		if a.out.Publishes[i].MessageID != nil {
			a.out.Publishes[i].MessageID.Handlers = a.out.Publishes[i].Handlers
		}
	}
	for i := range a.out.Items {
		set(&a.out.Items[i].Site, a.itemFn[i])
	}
	for i := range a.out.Unstable {
		set(&a.out.Unstable[i], a.unstableFn[i])
	}
	for i := range a.out.Refused {
		set(&a.out.Refused[i], a.refusedFn[i])
	}
	a.sequence()
}

func (a *analyzer) reach(fn js.INode, h string) {
	f := a.fn(fn)
	if f.reached[h] {
		return
	}
	f.reached[h] = true
	for r := range f.refs {
		a.reach(r, h)
	}
}
