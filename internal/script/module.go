package script

import (
	"fmt"
	"io"
	"strings"

	"github.com/tdewolff/parse/v2"
	"github.com/tdewolff/parse/v2/js"
)

// keep runs a script as the body of a strict function (a module's
// semantics, and new bindings for every invocation), so the module form the
// chapters use, `export default X`, becomes `__keep_export = X` in place.
// The statement is found by tokens, never by a pattern over the text, so
// `export default` in a string, a template or a comment is left alone;
// and the number found must equal the syntax tree's, or the script is
// refused rather than run differently from how it reads.

const exportGlobal = "__keep_export"

// span is [start, end) of `export default` in the source.
type span struct{ start, end int }

// exportDefaults finds the top-level `export default` keywords by the
// lexer, telling a regular expression from a division by the token before.
func exportDefaults(source string) ([]span, error) {
	buf := make([]byte, len(source), len(source)+1)
	copy(buf, source)
	in := parse.NewInputBytes(buf)
	l := js.NewLexer(in)
	var out []span
	depth := 0
	prev := js.ErrorToken // the last significant token
	exportAt := -1
	for {
		tt, data := l.Next()
		start := in.Offset() - len(data)
		switch tt {
		case js.ErrorToken:
			if err := l.Err(); err != nil && err != io.EOF {
				return out, fmt.Errorf("read the script's tokens: %v", l.Err())
			}
			return out, nil
		case js.WhitespaceToken, js.LineTerminatorToken, js.CommentToken, js.CommentLineTerminatorToken:
			continue
		case js.DivToken, js.DivEqToken:
			if !endsExpression(prev) {
				tt, _ = l.RegExp()
			}
		case js.OpenBraceToken, js.OpenParenToken, js.OpenBracketToken, js.TemplateStartToken:
			depth++
		case js.CloseBraceToken, js.CloseParenToken, js.CloseBracketToken, js.TemplateEndToken:
			depth--
		}
		if tt == js.DefaultToken && prev == js.ExportToken && exportAt >= 0 {
			out = append(out, span{exportAt, in.Offset()})
		}
		exportAt = -1
		if tt == js.ExportToken && depth == 0 {
			exportAt = start
		}
		prev = tt
	}
}

// endsExpression reports whether a token can end an expression, so a /
// after it divides.
func endsExpression(tt js.TokenType) bool {
	switch tt {
	case js.CloseParenToken, js.CloseBracketToken, js.CloseBraceToken, js.StringToken, js.RegExpToken, js.TemplateToken,
		js.TemplateEndToken, js.ThisToken, js.SuperToken, js.TrueToken, js.FalseToken, js.NullToken, js.IncrToken, js.DecrToken:
		return true
	}
	return js.IsNumeric(tt) || js.IsIdentifier(tt)
}

// wrapScript makes a script the body of the function keep runs, with its
// `export default` an assignment on the same lines; the wrapper's head
// stays on line 1, so line numbers in errors stay true.
func wrapScript(source string) (string, error) {
	spans, err := exportDefaults(source)
	if err != nil {
		return "", err
	}
	a, err := Analyze(source)
	if err == nil && a.DefaultExports != len(spans) {
		return "", fmt.Errorf("keep found %d `export default` statements where the script has %d; write it once, at the top level, as export default Keep.workflow({ ... })", len(spans), a.DefaultExports)
	}
	if len(spans) > 1 {
		return "", fmt.Errorf("more than one `export default`")
	}
	var b strings.Builder
	b.WriteString(`__keep_define(function () { "use strict"; let ` + exportGlobal + `; `)
	last := 0
	for _, s := range spans {
		b.WriteString(source[last:s.start])
		b.WriteString(exportGlobal + " =")
		b.WriteString(strings.Repeat("\n", strings.Count(source[s.start:s.end], "\n")))
		last = s.end
	}
	b.WriteString(source[last:])
	b.WriteString("\n;return " + exportGlobal + ";\n});")
	return b.String(), nil
}
