package script

import (
	"strings"

	"github.com/tdewolff/parse/v2/js"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// Secrets: the {secret:NAME}s a script writes, each a grant (issue 38).

// secrets reads every {secret:NAME} the script writes, wherever it is:
// each is a grant, whether or not a handler reaches it.
func (a *analyzer) secrets() {
	sl := &secretLines{}
	js.Walk(sl, a.tree)
	a.out.Secrets, a.out.SecretsComputed = sortedKeys(sl.names), sl.computed
}

// secretLines collects the {secret:NAME}s of every string literal and
// every template's text (kt.SecretsIn reads them as the call's fill does).
type secretLines struct {
	names    map[string]bool
	computed bool
}

func (s *secretLines) add(text string, ok bool) {
	if !ok {
		// A string whose escapes do not read is judged by its text.
		s.computed = s.computed || strings.Contains(text, "secret")
	}
	names, partial := kt.SecretsIn(text)
	if s.names == nil {
		s.names = map[string]bool{}
	}
	for _, n := range names {
		s.names[n] = true
	}
	s.computed = s.computed || partial
}

func (s *secretLines) Enter(n js.INode) js.IVisitor {
	switch x := n.(type) {
	case *js.LiteralExpr:
		if x.TokenType == js.StringToken {
			s.add(unquoteOK(x.Data))
		}
	case *js.TemplateExpr:
		// Each piece of text between substitutions: "`a${", "}b${", "}c`".
		for _, p := range x.List {
			s.add(templateRead(p.Value))
		}
		s.add(templateRead(x.Tail))
	}
	return s
}

func (s *secretLines) Exit(js.INode) {}

// unquoteOK is unquote, with the raw text when its escapes do not read.
func unquoteOK(b []byte) (string, bool) {
	if t, ok := unquote(b); ok {
		return t, true
	}
	return string(b), false
}

// templateRead is the text of a template's piece (templateText), its
// escapes read.
func templateRead(b []byte) (string, bool) {
	t := templateText(b)
	if !strings.Contains(t, `\`) {
		return t, true
	}
	return unquoteOK([]byte("`" + strings.ReplaceAll(t, "\\`", "`") + "`"))
}
