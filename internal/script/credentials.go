package script

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tdewolff/parse/v2"
	"github.com/tdewolff/parse/v2/js"

	"github.com/keep-run/keep/internal/redact"
)

// Credentials are the credentials a script carries written literally (a
// header's "Bearer …", a property named like a key or password, a URL with
// a password, a value keep knows to be secret), found in its syntax tree —
// string literals and template parts, never comments — so that they can be
// masked wherever the script goes outside keep (the model's endpoint) or
// is shown (keep repairs, the API), and put back into a script that comes
// back with the placeholders.
type Credentials struct {
	// raw holds each credential's text (between its quotes).
	raw map[string]string
}

// FindCredentials reads src's literals. A script that does not parse is
// masked as text (redact.String) by Mask.
func FindCredentials(src string) *Credentials {
	c := &Credentials{raw: map[string]string{}}
	ast, err := js.Parse(parse.NewInputString(src), js.Options{})
	if err != nil {
		return c
	}
	js.Walk(credVisitor{c, map[js.IExpr]bool{}}, ast)
	return c
}

// credVisitor finds the credentials; names holds the values that name a
// secret of keep's instead of carrying one (a webhook's verify: { hmac: {
// secret: "GITHUB_WEBHOOK_SECRET" } }), seen before them in the walk.
type credVisitor struct {
	c     *Credentials
	names map[js.IExpr]bool
}

func (v credVisitor) Enter(n js.INode) js.IVisitor {
	switch n := n.(type) {
	case *js.Property:
		if n.Name == nil || n.Name.Computed != nil {
			break
		}
		name := unquoted(n.Name.Literal.Data)
		if o, ok := n.Value.(*js.ObjectExpr); ok && verifyFields[name].all != nil {
			for _, p := range o.List {
				if p.Name != nil && p.Name.Computed == nil && unquoted(p.Name.Literal.Data) == "secret" {
					v.names[p.Value] = true
				}
			}
		}
		if redact.Name(name) && !v.names[n.Value] {
			v.valueIsSecret(n.Value)
		}
	case *js.BindingElement:
		if b, ok := n.Binding.(*js.Var); ok && redact.Name(string(b.Data)) {
			v.valueIsSecret(n.Default)
		}
	case *js.LiteralExpr:
		v.literal(*n)
	case js.LiteralExpr:
		v.literal(n)
	case *js.TemplateExpr:
		for _, p := range n.List {
			v.text(templateText(p.Value))
		}
		v.text(templateText(n.Tail))
	}
	return v
}

func (credVisitor) Exit(js.INode) {}

// valueIsSecret masks the value of a property named like a credential.
func (v credVisitor) valueIsSecret(e js.IExpr) {
	switch e := e.(type) {
	case *js.LiteralExpr:
		if e.TokenType == js.StringToken {
			v.c.add(inner(e.Data))
		}
	case *js.TemplateExpr:
		for _, p := range e.List {
			v.c.add(templateText(p.Value))
		}
		v.c.add(templateText(e.Tail))
	}
}

// literal masks a string that holds a credential by its form.
func (v credVisitor) literal(l js.LiteralExpr) {
	if l.TokenType == js.StringToken {
		v.text(inner(l.Data))
	}
}

func (v credVisitor) text(s string) {
	if s != "" && redact.String(s) != s {
		v.c.add(s)
	}
}

// add keeps a credential's text. One that names a secret of keep's
// ({secret:NAME}, filled in at the call) carries none.
func (c *Credentials) add(s string) {
	if len(strings.TrimSpace(s)) < redact.MinKnown || strings.Contains(s, "{secret:") {
		return
	}
	c.raw[s] = ""
}

// texts are the credentials longest first (one that contains another is
// replaced whole).
func (c *Credentials) texts() []string {
	out := make([]string, 0, len(c.raw))
	for s := range c.raw {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) > len(out[j])
		}
		return out[i] < out[j]
	})
	return out
}

// Placeholders replaces every credential in text by a placeholder the
// model can copy ({keep-masked:N}), then masks what else keep knows to be
// secret. Restore puts them back.
func (c *Credentials) Placeholders(text string) string {
	for i, s := range c.texts() {
		text = strings.ReplaceAll(text, s, fmt.Sprintf("{keep-masked:%d}", i+1))
	}
	return redact.MaskKnown(text)
}

// Restore puts the credentials back where a script has their placeholders.
func (c *Credentials) Restore(text string) string {
	for i, s := range c.texts() {
		text = strings.ReplaceAll(text, fmt.Sprintf("{keep-masked:%d}", i+1), s)
	}
	return text
}

// Hide masks every credential in text for a person's eyes (redact.Mask).
func (c *Credentials) Hide(text string) string {
	for _, s := range c.texts() {
		text = strings.ReplaceAll(text, s, redact.Mask)
	}
	return redact.String(text)
}

// inner is a string literal's text between its quotes, as written.
func inner(b []byte) string {
	if len(b) >= 2 {
		return string(b[1 : len(b)-1])
	}
	return string(b)
}

// templateText is a template part's text without its delimiters (` ${ }).
func templateText(b []byte) string {
	s := strings.TrimPrefix(string(b), "`")
	s = strings.TrimPrefix(s, "}")
	s = strings.TrimSuffix(s, "${")
	return strings.TrimSuffix(s, "`")
}

func unquoted(b []byte) string {
	s := string(b)
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}
