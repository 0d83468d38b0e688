package script

import (
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
)

var known = map[string][]string{"files": {"list", "read", "write"}, "http": {"request"}, "system": {}}

func problems(t *testing.T, src string) []kt.Problem {
	t.Helper()
	p, err := Compile("wf.js", src)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return Validate(p, known)
}

func TestValidWorkflowHasNoErrors(t *testing.T) {
	t.Parallel()
	ps := problems(t, `export default Keep.workflow({
  name: "ok",
  topics: { "a": {}, "b": {} },
  producers: { p: { publishes: ["a"], schedule: { cron: "*/5 * * * *" }, handler: async (ctx) => { await ctx.files.list({}) } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"], publishes: ["b"], async prepare(ctx) { return { reservations: [] } }, async next() {} }) },
})`)
	if kt.HasErrors(ps) || len(ps) != 1 || !strings.Contains(ps[0].Message, `topic "b" has no consumer`) {
		t.Fatalf("problems %v", ps)
	}
}

// TestTopicFromAPIIsItsWriter: a topic declared { from: "api" } is
// written by keep's event API, so a workflow of one consumer is whole.
func TestTopicFromAPIIsItsWriter(t *testing.T) {
	t.Parallel()
	ps := problems(t, `export default Keep.workflow({
  name: "orders",
  topics: { "order.placed": { from: "api" }, other: {} },
  producers: { p: { publishes: ["other"], schedule: { interval: "1m" }, handler: async () => {} } },
  consumers: { c: Keep.consumer({ subscribe: ["order.placed", "other"], async prepare() { return { reservations: [] } } }) },
})`)
	if kt.HasErrors(ps) {
		t.Fatalf("problems %v", ps)
	}
	p, err := Compile("wf.js", `export default Keep.workflow({ name: "o", topics: { a: { from: "api" }, b: {} } })`)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Decl.OpenToAPI("a") || p.Decl.OpenToAPI("b") || p.Decl.OpenToAPI("c") {
		t.Fatalf("OpenToAPI: a %v, b %v, c %v (topicFrom %v)", p.Decl.OpenToAPI("a"), p.Decl.OpenToAPI("b"), p.Decl.OpenToAPI("c"), p.Decl.TopicFrom)
	}
}

func TestValidationRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, src, want string
		line            int
	}{
		{"no workflow", `const x = 1`, "declares no workflow", 0},
		{"no handlers", `export default Keep.workflow({ name: "x", topics: {} })`, "no handler", 0},
		{"no name", `export default Keep.workflow({ topics: {"a":{}}, producers: { p: { publishes: ["a"], schedule: {interval:"1m"}, handler: async () => {} } } })`, "has no name", 0},
		{"producer without schedule", "export default Keep.workflow({ name: \"x\", topics: {\"a\":{}},\n producers: { p: { publishes: [\"a\"], handler: async () => {} } } })", "producers.p: missing schedule", 2},
		{"bad interval", `export default Keep.workflow({ name: "x", topics: {"a":{}}, producers: { p: { publishes: ["a"], schedule: {interval:"5 minutes"}, handler: async () => {} } } })`, `invalid interval "5 minutes"`, 1},
		{"bad cron", `export default Keep.workflow({ name: "x", topics: {"a":{}}, producers: { p: { publishes: ["a"], schedule: {cron:"* * *"}, handler: async () => {} } } })`, "invalid cron", 1},
		{"producer without publishes", `export default Keep.workflow({ name: "x", topics: {}, producers: { p: { schedule: {interval:"1m"}, handler: async () => {} } } })`, "non-empty publishes", 1},
		{"producer without handler", `export default Keep.workflow({ name: "x", topics: {"a":{}}, producers: { p: { publishes: ["a"], schedule: {interval:"1m"} } } })`, "no handler function", 1},
		{"consumer without subscribe", `export default Keep.workflow({ name: "x", topics: {}, consumers: { c: Keep.consumer({ async prepare() {} }) } })`, "non-empty subscribe", 1},
		{"consumer without prepare", `export default Keep.workflow({ name: "x", topics: {"a":{}}, producers: { p: { publishes: ["a"], schedule: {interval:"1m"}, handler: async () => {} } }, consumers: { c: Keep.consumer({ subscribe: ["a"] }) } })`, "no prepare function", 1},
		{"publishes without next", `export default Keep.workflow({ name: "x", topics: {"a":{}, "b":{}}, producers: { p: { publishes: ["a"], schedule: {interval:"1m"}, handler: async () => {} } }, consumers: { c: Keep.consumer({ subscribe: ["a"], publishes: ["b"], async prepare() {} }) } })`, "no next function", 1},
		{"undeclared topic", "export default Keep.workflow({ name: \"x\", topics: {},\n\n producers: { p: { publishes: [\"nope\"], schedule: {interval:\"1m\"}, handler: async () => {} } } })", `topic "nope" is used by producers.p but not declared`, 3},
		{"two writers", `export default Keep.workflow({ name: "x", topics: {"a":{}}, producers: { p: { publishes: ["a"], schedule: {interval:"1m"}, handler: async () => {} }, q: { publishes: ["a"], schedule: {interval:"1m"}, handler: async () => {} } } })`, "has 2 writers", 1},
		{"two consumers", `export default Keep.workflow({ name: "x", topics: {"a":{}}, producers: { p: { publishes: ["a"], schedule: {interval:"1m"}, handler: async () => {} } }, consumers: { c: Keep.consumer({ subscribe: ["a"], async prepare() {} }), d: Keep.consumer({ subscribe: ["a"], async prepare() {} }) } })`, "has 2 consumers", 1},
		{"no writer", `export default Keep.workflow({ name: "x", topics: {"a":{}}, consumers: { c: Keep.consumer({ subscribe: ["a"], async prepare() {} }) } })`, "has no writer", 1},
		{"unknown from", `export default Keep.workflow({ name: "x", topics: {"a": { from: "webhook" }}, consumers: { c: Keep.consumer({ subscribe: ["a"], async prepare() {} }) } })`, `topic "a": from: "webhook" is not a source keep knows; the one value is "api"`, 1},
		{"colon in an API topic", `export default Keep.workflow({ name: "x", topics: {"a:b": { from: "api" }}, consumers: { c: Keep.consumer({ subscribe: ["a:b"], async prepare() {} }) } })`, `topic "a:b" is open to the event API and has a ":" in its name`, 1},
		{"from not a string", `export default Keep.workflow({ name: "x", topics: {"a": { from: 1 }}, consumers: { c: Keep.consumer({ subscribe: ["a"], async prepare() {} }) } })`, `from: "(a number)" is not a source keep knows`, 1},
		{"from api and a producer", `export default Keep.workflow({ name: "x", topics: {"a": { from: "api" }}, producers: { p: { publishes: ["a"], schedule: {interval:"1m"}, handler: async () => {} } } })`, `has 2 writers (the event API (from: "api"), producers.p)`, 1},
		{"unknown connector", "export default Keep.workflow({ name: \"x\", topics: {\"a\":{}}, producers: { p: { publishes: [\"a\"], schedule: {interval:\"1m\"},\n handler: async (ctx) => { await ctx.gmial.search({}) } } } })", `no connector named "gmial"`, 2},
		{"unknown method", `export default Keep.workflow({ name: "x", topics: {"a":{}}, producers: { p: { publishes: ["a"], schedule: {interval:"1m"}, handler: async (ctx) => { await ctx.files.delete({}) } } } })`, `has no method "delete"`, 1},
		{"requireApproval as an object", `export default Keep.workflow({ name: "x", topics: {"a":{}}, requireApproval: { "http.request": true }, producers: { p: { publishes: ["a"], schedule: {interval:"1m"}, handler: async () => {} } } })`, "requireApproval must be true, or an array of tool or tool.method names", 0},
		{"requireApproval of a misspelled method", `export default Keep.workflow({ name: "x", topics: {"a":{}}, requireApproval: ["http.requst"], producers: { p: { publishes: ["a"], schedule: {interval:"1m"}, handler: async () => {} } } })`, `requireApproval: connector "http" has no method "requst"`, 0},
		{"requireApproval of no connector", `export default Keep.workflow({ name: "x", topics: {"a":{}}, requireApproval: ["gmial"], producers: { p: { publishes: ["a"], schedule: {interval:"1m"}, handler: async () => {} } } })`, `requireApproval: "gmial" names no connector`, 0},
		{"bad name", `export default Keep.workflow({ name: "a b/c", topics: {"a":{}}, producers: { p: { publishes: ["a"], schedule: {interval:"1m"}, handler: async () => {} } } })`, "may use only letters", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ps := problems(t, c.src)
			for _, p := range ps {
				if p.Severity == "error" && strings.Contains(p.String(), c.want) {
					if c.line > 0 && p.Line != c.line {
						t.Fatalf("%q is on line %d, want %d", p.String(), p.Line, c.line)
					}
					return
				}
			}
			t.Fatalf("no error containing %q in %v", c.want, ps)
		})
	}
}

// The forms of requireApproval the engine reads pass: true, false, tool
// and tool.method names.
func TestRequireApprovalForms(t *testing.T) {
	t.Parallel()
	for _, ra := range []string{`true`, `false`, `["http"]`, `["http.request", "files.write"]`} {
		ps := problems(t, `export default Keep.workflow({ name: "x", topics: {"a":{}}, requireApproval: `+ra+`, producers: { p: { publishes: ["a"], schedule: {interval:"1m"}, handler: async () => {} } } })`)
		if kt.HasErrors(ps) {
			t.Errorf("requireApproval: %s: %v", ra, ps)
		}
	}
}

func TestThrowingTopLevelIsAnError(t *testing.T) {
	t.Parallel()
	_, err := Compile("wf.js", "const x = null;\nx.y = 1;\nexport default Keep.workflow({})")
	if err == nil || !strings.Contains(err.Error(), "TypeError") || !strings.Contains(err.Error(), "wf.js:2") {
		t.Fatalf("got %v", err)
	}
}

func FuzzCompileValidate(f *testing.F) {
	f.Add(`export default Keep.workflow({ name: "x", topics: {"a":{}}, producers: { p: { publishes: ["a"], schedule: {interval:"1m"}, handler: async () => {} } } })`)
	f.Add(`export default Keep.workflow({ name: 1, topics: [], producers: null })`)
	f.Add(`export default 5`)
	f.Fuzz(func(t *testing.T, src string) {
		p, err := Compile("f.js", src)
		if err != nil {
			return
		}
		_ = Validate(p, known)
	})
}

// Issue 10 #10: an unknown literal source or type of registerInput fails
// validation, naming the line and the known ones.
func TestRegisterInputSourcesAreValidated(t *testing.T) {
	t.Parallel()
	sources := map[string][]string{"files": {"file"}, "system": {"schedule", "random"}}
	src := `export default Keep.workflow({
  name: "src",
  topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "5m" }, handler: async (ctx) => {
    ctx.registerInput({ source: "gmail", type: "email", id: "1", title: "x" })
    ctx.registerInput({ source: 'system', type: 'tick', id: "1", title: "x" })
    ctx.registerInput({ source: "files", type: "file", id: "1", title: "x" })
    ctx.registerInput({ source: ` + "`${s}`" + `, type: "x", id: "1", title: "x" })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"], async prepare(ctx) { return { reservations: [] } } }) },
})`
	p, err := Compile("wf.js", src)
	if err != nil {
		t.Fatal(err)
	}
	ps := ValidateAll(p, known, sources)
	var errs []string
	for _, x := range ps {
		if x.Severity == "error" {
			errs = append(errs, x.String())
		}
	}
	if len(errs) != 2 || !strings.Contains(errs[0], `line 5: registerInput: unknown source "gmail" (known: files, system)`) ||
		!strings.Contains(errs[1], `line 6: registerInput: source "system" has no type "tick" (it has: schedule, random)`) {
		t.Fatalf("errors: %q", errs)
	}
}

// keep validate warns about a credential written in the script, at its
// line, read from the syntax tree: a literal Authorization value, a token
// of a well-known form kept in a const, a URL's password; never a
// comment, a {secret:NAME} or an ordinary string.
func TestLiteralCredentialsAreWarnedAbout(t *testing.T) {
	t.Parallel()
	ps := problems(t, `// Bearer in-a-comment-0123456789 is not a credential
const KEY = "ghp_0123456789abcdefghijABCDEFGHIJ"
export default Keep.workflow({ name: "creds", topics: { "a": {} },
  consumers: { c: Keep.consumer({ subscribe: ["a"],
    async prepare(ctx) { return { reservations: [] } },
    async mutate(ctx, p) {
      await ctx.http.request({ method: "POST", url: "https://api.example/x", json: { title: "hello world" },
        headers: { "Authorization": "Bearer tok_9f8e7d6c5b4a",
          "X-Sig": "{secret:sig}", "X-Key": KEY } })
      await ctx.http.request({ method: "GET", url: "https://user:hunter22@api.example/y" })
    } }) },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async () => {} } } })`)
	var lines []int
	for _, p := range ps {
		if strings.Contains(p.Message, "a credential is written in the script") {
			if p.Severity != "warning" || !strings.Contains(p.Message, "keep secret set NAME") || !strings.Contains(p.Message, "{secret:NAME}") {
				t.Errorf("warning %v", p)
			}
			for _, leak := range []string{"tok_9f8e7d6c5b4a", "hunter22", "0123456789abcdef"} {
				if strings.Contains(p.Message, leak) {
					t.Errorf("the warning prints the credential: %v", p)
				}
			}
			lines = append(lines, p.Line)
		}
	}
	if len(lines) != 3 || lines[0] != 2 || lines[1] != 8 || lines[2] != 10 {
		t.Fatalf("credential warnings at lines %v, want 2, 8, 10: %v", lines, ps)
	}
	if kt.HasErrors(ps) {
		t.Fatalf("a credential is a warning, not an error: %v", ps)
	}
}
