package script

import (
	"fmt"
	"sort"
	"strings"
	"unsafe"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/tdewolff/parse/v2"
	"github.com/tdewolff/parse/v2/js"
)

// literalCredentials warns about every credential the script writes
// literally (FindCredentials decides what is one: a value under a
// credential's name, a "Bearer …", a URL's password, a token of a
// well-known form), at the line its literal starts: it would be read by
// anyone who reads the script, and by the model that repairs it.
func (v *validation) literalCredentials() {
	found := FindCredentials(v.p.Source)
	if len(found.raw) == 0 {
		return
	}
	// The parser's literals are slices of buf (room for the NUL it adds
	// keeps it from copying): where one starts is its place in the source.
	buf := make([]byte, len(v.p.Source), len(v.p.Source)+1)
	copy(buf, v.p.Source)
	ast, err := js.Parse(parse.NewInputBytes(buf), js.Options{})
	if err != nil {
		return
	}
	lines := map[int]string{}
	js.Walk(literalSites{func(data []byte, text string) {
		if _, ok := found.raw[text]; !ok {
			return
		}
		off := offsetIn(buf, data)
		if off < 0 {
			return
		}
		line := 1 + strings.Count(v.p.Source[:off], "\n")
		if _, seen := lines[line]; !seen {
			lines[line] = text
		}
	}}, ast)
	var at []int
	for l := range lines {
		at = append(at, l)
	}
	sort.Ints(at)
	for _, l := range at {
		v.out = append(v.out, kt.Problem{Severity: "warning", Line: l, Message: fmt.Sprintf(
			"a credential is written in the script (%s): whoever reads the script sees it — keep it in keep instead: "+
				"`printf %%s \"$VALUE\" | keep secret set NAME`, and write {secret:NAME} where it was (e.g. \"Authorization\": \"Bearer {secret:NAME}\")",
			hint(lines[l]))})
	}
}

// offsetIn is where b, a slice of buf, starts in it; -1 when it is not one.
func offsetIn(buf, b []byte) int {
	if len(b) == 0 || len(buf) == 0 {
		return -1
	}
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) - uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	if off < 0 || off >= len(buf) || &buf[off] != &b[0] {
		return -1
	}
	return off
}

// hint shows a credential's first characters only.
func hint(s string) string {
	r := []rune(s)
	if len(r) > 6 {
		return string(r[:6]) + "…"
	}
	return "…"
}

// literalSites calls at for every string literal and template part of a
// script, with the text FindCredentials reads from it.
type literalSites struct {
	at func(data []byte, text string)
}

func (l literalSites) Enter(n js.INode) js.IVisitor {
	switch n := n.(type) {
	case *js.LiteralExpr:
		if n.TokenType == js.StringToken {
			l.at(n.Data, inner(n.Data))
		}
	case js.LiteralExpr:
		if n.TokenType == js.StringToken {
			l.at(n.Data, inner(n.Data))
		}
	case *js.TemplateExpr:
		for _, p := range n.List {
			l.at(p.Value, templateText(p.Value))
		}
		l.at(n.Tail, templateText(n.Tail))
	}
	return l
}

func (literalSites) Exit(js.INode) {}
