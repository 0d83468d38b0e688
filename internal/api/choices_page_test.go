package api_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"golang.org/x/net/html"
)

// pageHTML is a page as a browser gets it (GET, or POST of form with the
// page's CSRF token), parsed.
func (r *rig) pageHTML(method, path string, form url.Values) *html.Node {
	r.t.Helper()
	var body io.Reader
	var csrf *http.Cookie
	if method == http.MethodPost {
		csrf = r.pageCSRF()
		if form == nil {
			form = url.Values{}
		}
		form.Set("csrf", csrf.Value)
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, r.srv.URL+path, body)
	if csrf != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(csrf)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		r.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	doc, err := html.Parse(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return doc
}

func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

func hasClass(n *html.Node, class string) bool {
	for _, c := range strings.Fields(attr(n, "class")) {
		if c == class {
			return true
		}
	}
	return false
}

// all lists the elements under n (n included) that match, in document order.
func all(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	if n.Type == html.ElementNode && match(n) {
		out = append(out, n)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		out = append(out, all(c, match)...)
	}
	return out
}

func text(n *html.Node) string {
	if n.Type == html.TextNode {
		return n.Data
	}
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		b.WriteString(text(c))
	}
	return b.String()
}

// shownChoice is a choice as the page shows it: the form's action, its
// risk, the button's classes and words, and the risk's line.
type shownChoice struct {
	action, risk, button, label, line string
}

func choicesIn(n *html.Node) []shownChoice {
	var out []shownChoice
	for _, f := range all(n, func(n *html.Node) bool { return n.Data == "form" && hasClass(n, "choice") }) {
		c := shownChoice{action: attr(f, "action"), risk: attr(f, "data-risk")}
		for _, b := range all(f, func(n *html.Node) bool { return n.Data == "button" }) {
			c.button, c.label = attr(b, "class"), strings.TrimSpace(text(b))
		}
		for _, s := range all(f, func(n *html.Node) bool { return n.Data == "span" && hasClass(n, "risk") }) {
			c.line = strings.Join(strings.Fields(text(s)), " ")
		}
		out = append(out, c)
	}
	return out
}

// Issue 42 #4 on the item page and the topics page: Skip and Reprocess,
// and a topic's skip-pending, come in the card's order, colours and risk
// sentence, read from keeptype's one table through the API.
func TestItemAndTopicActionsSayWhatTheyRisk(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	// Two jobs: the first is held by the run blocked for approval, the
	// second waits (pending) behind it.
	r.deploy(strings.Replace(script, `await ctx.publish("job", { messageId: "a", inputId, payload: {} })`,
		`await ctx.publish("job", { messageId: "a", inputId, payload: {} }); await ctx.publish("job", { messageId: "b", inputId, payload: {} })`, 1), "hook.js")
	key := url.PathEscape("system:schedule:a")

	item := r.pageHTML(http.MethodGet, "/items/"+key+"?workflow=hook", nil)
	actions := all(item, func(n *html.Node) bool { return n.Data == "div" && hasClass(n, "item-actions") })
	if len(actions) != 1 {
		t.Fatalf("the item page has %d item-actions blocks, want 1", len(actions))
	}
	got := choicesIn(actions[0])
	skip, reprocess := kt.ChoiceIn(kt.ScopeItem, kt.ResolveSkip, false), kt.ChoiceIn(kt.ScopeItem, kt.ResolveReprocess, false)
	if len(got) != 2 {
		t.Fatalf("the item page offers %+v, want Skip and Reprocess", got)
	}
	for i, want := range []struct {
		verb, label string
		c           kt.Choice
		primary     bool
	}{{"skip", "Skip", skip, true}, {"reprocess", "Reprocess", reprocess, false}} {
		g := got[i]
		if !strings.HasSuffix(g.action, "/"+want.verb) || g.label != want.label || g.risk != string(want.c.Risk) {
			t.Errorf("choice %d is %+v, want %s (%s)", i+1, g, want.label, want.c.Risk)
		}
		if !strings.Contains(" "+g.button+" ", " risk-"+string(want.c.Risk)+" ") || strings.Contains(g.button, "primary") != want.primary {
			t.Errorf("%s's button has classes %q, want risk-%s (primary %v)", want.label, g.button, want.c.Risk, want.primary)
		}
		if line := want.c.Risk.Label() + " — " + want.c.Says; g.line != line {
			t.Errorf("%s's line says %q, want %q", want.label, g.line, line)
		}
	}

	// The topics page: the control is coloured by its risk, and its
	// confirmation says it on the button's line.
	topics := r.pageHTML(http.MethodGet, "/w/hook/topics", nil)
	sp := kt.ChoiceIn(kt.ScopeTopic, kt.Resolution(kt.ActSkipPending), false)
	buttons := all(topics, func(n *html.Node) bool { return n.Data == "button" && attr(n, "value") == "skip-pending" })
	if len(buttons) == 0 {
		t.Fatal("the topics page offers no skip-pending (the job topic has a pending event)")
	}
	for _, b := range buttons {
		if !hasClass(b, "risk-"+string(sp.Risk)) || !strings.Contains(attr(b, "title"), sp.Says) {
			t.Errorf("skip-pending's button: class %q, title %q; want risk-%s and %q", attr(b, "class"), attr(b, "title"), sp.Risk, sp.Says)
		}
	}
	confirm := choicesIn(r.pageHTML(http.MethodPost, "/w/hook/topics/job/skip-pending", nil))
	if len(confirm) != 1 || confirm[0].risk != string(sp.Risk) || confirm[0].label != "Skip them" ||
		confirm[0].line != sp.Risk.Label()+" — "+sp.Says || !strings.Contains(confirm[0].button, "risk-"+string(sp.Risk)) {
		t.Errorf("the confirmation shows %+v, want Skip them with %q", confirm, sp.Risk.Label()+" — "+sp.Says)
	}
}
