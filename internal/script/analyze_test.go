package script

import (
	"strings"
	"testing"
)

// wf wraps handler bodies into a workflow: a producer p and a consumer c
// (prepare, mutate), and a task t.
func wf(top, producer, mutate, task string) string {
	return top + `
export default Keep.workflow({
  name: "w",
  topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1m" }, handler: async (ctx, state) => {
    ` + producer + `
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"],
    async prepare(ctx) { return { reservations: [] } },
    async mutate(ctx, p) {
      ` + mutate + `
    },
  }) },
  tasks: { t: Keep.task({ schedule: { interval: "1h" }, async run(ctx) {
    ` + task + `
  } }) },
})`
}

func analyze(t *testing.T, src string) *Analysis {
	t.Helper()
	a, err := Analyze(src)
	if err != nil {
		t.Fatalf("analyze: %v\n%s", err, src)
	}
	return a
}

func callsOf(a *Analysis) []string {
	var out []string
	for _, c := range a.Calls {
		out = append(out, c.Tool+"."+c.Method+"@"+strings.Join(c.Handlers, ","))
	}
	return out
}

// The calls on ctx are found however they are reached, and only where
// they are code.
func TestAnalyzeFindsCallsOnCtx(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, src string
		want      []string
	}{
		{"plain", wf("", "", `await ctx.files.write({ path: "x" })`, ""), []string{"files.write@consumers.c.mutate"}},
		{"alias of a method", wf("", "", `const send = ctx.gmail.send; await send({ to: "a" })`, ""), []string{"gmail.send@consumers.c.mutate"}},
		{"destructured connector", wf("", "", `const { http } = ctx; await http.request({ url: "u" })`, ""), []string{"http.request@consumers.c.mutate"}},
		{"nested destructuring", wf("", "", `const { http: { request: r } } = ctx; await r({ url: "u" })`, ""), []string{"http.request@consumers.c.mutate"}},
		{"alias of a connector", wf("", "", `const h = ctx.http; await h.request({})`, ""), []string{"http.request@consumers.c.mutate"}},
		{"let reassigned", wf("", "", `let h; h = ctx.http; await h.request({})`, ""), []string{"http.request@consumers.c.mutate"}},
		{"destructured parameter", wf("", "", `await (async ({ slack }) => slack.postMessage({}))(ctx)`, ""), []string{"slack.postMessage@consumers.c.mutate"}},
		{"helper function", wf(`async function send(c, to) { return c.email.send({ to }) }`, "", `await send(ctx, "a")`, ""), []string{"email.send@consumers.c.mutate"}},
		{"helper through a const", wf(`const send = async (c) => c.email.send({})
const alias = send`, "", `await alias(ctx)`, ""), []string{"email.send@consumers.c.mutate"}},
		{"string literal index", wf("", "", `await ctx["http"]["request"]({})`, ""), []string{"http.request@consumers.c.mutate"}},
		{"optional chain", wf("", "", `await ctx.http?.request?.({})`, ""), []string{"http.request@consumers.c.mutate"}},
		{".call", wf("", "", `await ctx.http.request.call(null, { method: "GET" })`, ""), []string{"http.request@consumers.c.mutate"}},
		{"item callback", wf("", "", "", "await ctx.withItem(`x:1`, \"x\", async (ictx) => { await ictx.sheets.appendRow({}) })"), []string{"sheets.appendRow@tasks.t.run"}},
		{"comments and strings", wf("", `// ctx.files.write({})
/* ctx.http.request({}) */ const s = "ctx.gmail.send({})"; const t = `+"`ctx.slack.postMessage(${s})`", "", ""), nil},
		{"nothing outside handlers", wf(`const ctx = { http: { request() {} } }; ctx.http.request({})`, "", "", ""), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := analyze(t, c.src)
			got := callsOf(a)
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Fatalf("calls %v, want %v", got, c.want)
			}
			if len(a.Refused) > 0 {
				t.Fatalf("refused: %+v", a.Refused)
			}
		})
	}
}

// What the analysis cannot follow is refused, with how to write it.
func TestAnalyzeRefusesWhatItCannotFollow(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, mutate, want string }{
		{"computed connector", `const x = "http"; await ctx[x].request({})`, "ctx[x] reaches ctx by a computed name"},
		{"computed method", `const m = "request"; await ctx.http[m]({})`, "ctx.http[m] reaches ctx by a computed name"},
		{"built name", `await ctx["ht" + "tp"]["req" + "uest"]({})`, "reaches ctx by a computed name, which keep cannot follow: write the name, as in ctx.http.request"},
		{"computed through an alias", `const h = ctx.http; await h[p.m]({})`, "h[p.m] reaches ctx by a computed name"},
		{"computed destructuring", `const { [p.k]: t } = ctx; await t.x({})`, "takes a member of ctx whose name is computed"},
		{"unknown function", `await Reflect.apply(ctx.http.request, null, [{}])`, "ctx.http.request is passed to Reflect.apply"},
		{"into an object", `await helper({ ctx })`, "ctx is put in an object"},
		{"into an array", `const all = [ctx.http]; await all[0].request({})`, "ctx.http is put in an array"},
		{"returned", `return ctx.http`, "ctx.http is returned"},
		{"spread", `const c = { ...ctx }; await c.http.request({})`, "ctx is spread into an object"},
		{"stored", `p.keep = ctx`, "ctx is stored in an object's property"},
		{"Object.values", `for (const t of Object.values(ctx)) await t.request({})`, "ctx is passed to Object.values"},
		{"eval", `eval("ctx.http.request({})")`, "eval is not allowed"},
		{"arguments", `await (function () { return arguments[0].http.request({}) })(ctx)`, "arguments is not allowed"},
		{"method by bind of unknown", `const f = pick(ctx); await f.request({})`, "ctx is passed to pick"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := analyze(t, wf(`async function helper(o) {}`, "", c.mutate, ""))
			for _, r := range a.Refused {
				if strings.Contains(r.Text, c.want) {
					if r.Line == 0 || !contains(r.Handlers, "consumers.c.mutate") {
						t.Fatalf("refusal %+v: want a line and the handler", r)
					}
					return
				}
			}
			t.Fatalf("no refusal containing %q in %+v", c.want, a.Refused)
		})
	}
}

// A handler keep cannot find is refused by validation (the runtime would
// run code the analysis never read).
func TestAnalyzeHandlersMustBeReadable(t *testing.T) {
	t.Parallel()
	a := analyze(t, `const hs = {}; hs["pre" + "pare"] = async (ctx) => ctx.files.write({})
export default Keep.workflow({ name: "w", topics: {}, consumers: { c: Keep.consumer({ subscribe: ["a"], ...hs }) } })`)
	if len(a.Refused) == 0 || !strings.Contains(a.Refused[0].Text, "hs is changed after it is written") {
		t.Fatalf("refused %+v", a.Refused)
	}
	a = analyze(t, `const hs = { prepare: async (ctx) => ctx.files.read({}) }; Object.assign(hs, { prepare: async (ctx) => ctx.files.write({}) })
export default Keep.workflow({ name: "w", topics: {}, consumers: { c: Keep.consumer({ subscribe: ["a"], ...hs }) } })`)
	if len(a.Refused) == 0 || !strings.Contains(a.Refused[0].Text, "hs is changed after it is written") {
		t.Fatalf("refused %+v", a.Refused)
	}
	a = analyze(t, `async function poll(ctx) { await ctx.files.list({}) }
const consumers = { c: { subscribe: ["a"], prepare: poll } }
export default Keep.workflow({ name: "w", topics: {}, producers: { p: { handler: poll } }, consumers })`)
	if strings.Join(a.Handlers, " ") != "consumers.c.prepare producers.p.handler" || len(a.Refused) > 0 {
		t.Fatalf("handlers %v refused %+v", a.Handlers, a.Refused)
	}
	if got := callsOf(a); len(got) != 1 || got[0] != "files.list@consumers.c.prepare,producers.p.handler" {
		t.Fatalf("calls %v", got)
	}
}

// Identities are read as expressions with what they depend on, so a
// change anywhere in how an id is built shows.
func TestAnalyzeIdentities(t *testing.T) {
	t.Parallel()
	ids := func(src string) string {
		return strings.Join(analyze(t, src).Identities(), "\n")
	}
	// Issue 22 #2: a nested ${} no longer stops the comparison.
	a := ids(wf("", "", "await ctx.http.request({ url: \"u\", subkey: `order:${p.o.id}` })", ""))
	b := ids(wf("", "", "await ctx.http.request({ url: \"u\", subkey: `order:${p.o.id}:${p.o.customer}` })", ""))
	if a == b || !strings.Contains(b, "subkey: `order:${p.o.id}:${p.o.customer}`") {
		t.Fatalf("ids\n%s\n%s", a, b)
	}
	// Issue 22 #1: the same withItem text over a mapped list is another id.
	loop := "for (const f of files) { await ctx.withItem(`email:${f.name}`, f.name, async (ictx) => {}) }"
	a = ids(wf("", "", "", "const files = await ctx.files.list({});\n"+loop))
	b = ids(wf("", "", "", "const files = (await ctx.files.list({})).map(f => ({ ...f, name: \"r2-\" + f.name }));\n"+loop))
	if a == b || !strings.Contains(b, `"r2-"`) {
		t.Fatalf("ids\n%s\n%s", a, b)
	}
	// Whitespace and comments do not count.
	c := ids(wf("", "", "", "const files = await ctx.files.list({ /* all */ });\n"+strings.ReplaceAll(loop, " ", "  ")))
	if a != c {
		t.Fatalf("ids\n%s\n%s", a, c)
	}
	// messageIds and input ids, literal sources.
	an := analyze(t, wf("", `const id = state.n + 1
const inputId = ctx.registerInput({ source: "files", type: "file", id: "f:" + id, title: "t" })
await ctx.publish(["a"], { messageId: `+"`m:${id}`"+`, inputId, payload: {} })`, "", ""))
	if len(an.Inputs) != 1 || an.Inputs[0].Source != "files" || an.Inputs[0].Type != "file" || !an.Inputs[0].HasTitle || an.Inputs[0].ID.Text != `'f:' + id` && an.Inputs[0].ID.Text != `"f:" + id` {
		t.Fatalf("inputs %+v", an.Inputs)
	}
	if len(an.Publishes) != 1 || strings.Join(an.Publishes[0].Topics, ",") != "a" || an.Publishes[0].MessageID == nil || !strings.Contains(strings.Join(an.Publishes[0].MessageID.Deps, ";"), "state.n + 1") {
		t.Fatalf("publishes %+v", an.Publishes)
	}
	if u := an.Uses(); strings.Join(u, " ") != "source:files" {
		t.Fatalf("uses %v", u)
	}
}

// Time and chance are found in any part of an id, and through what it
// depends on.
func TestAnalyzeTimeAndChance(t *testing.T) {
	t.Parallel()
	cases := []struct{ task, want string }{
		{"for (const f of [1]) await ctx.withItem(`f:${f}:${Date.now()}`, \"x\", async () => {})", "Date.now"},
		{"const stamp = new Date().toISOString(); await ctx.withItem(\"f:\" + stamp, \"x\", async () => {})", "new Date()"},
		{"const r = ctx.random(); await ctx.withItem(`f:${r}`, \"x\", async () => {})", "ctx.random"},
		{"const mk = (n) => n + Math.random(); await ctx.withItem(mk(\"f:\"), \"x\", async () => {})", "Math.random"},
		{"await ctx.withItem(crypto.randomUUID(), \"x\", async () => {})", "crypto"},
		{"const { now } = ctx; await ctx.withItem(`f:${now()}`, \"x\", async () => {})", "ctx.now"},
	}
	for _, c := range cases {
		a := analyze(t, wf("", "", "", c.task))
		if len(a.Items) != 1 || !contains(a.Items[0].Unstable, c.want) {
			t.Fatalf("%s: items %+v, want unstable %q", c.task, a.Items, c.want)
		}
	}
	a := analyze(t, wf("", "", "", "await ctx.withItem(`f:${new Date(ctx.item).getTime()}`, \"x\", async () => {})"))
	if len(a.Items) != 1 || len(a.Items[0].Unstable) != 0 {
		t.Fatalf("a date parsed from data is no clock: %+v", a.Items)
	}
}

// Two writes in one mutate where the second can run after the first.
func TestAnalyzeWritePairs(t *testing.T) {
	t.Parallel()
	writes := func(c Call) bool { return c.Method == "write" || c.Method == "send" }
	cases := []struct {
		mutate string
		pairs  int
	}{
		{`await ctx.files.write({}); await ctx.email.send({})`, 1},
		{`if (p.x) { await ctx.files.write({}) } else { await ctx.email.send({}) }`, 0},
		{`if (p.x) { await ctx.files.write({}); return } await ctx.email.send({})`, 0},
		{`if (p.x) await ctx.files.write({}); await ctx.email.send({})`, 1},
		{`for (const x of p.xs) await ctx.files.write({ path: x })`, 1},
		{`p.xs.forEach((x) => ctx.files.write({ path: x }))`, 1},
		{`await ctx.files.read({}); await ctx.files.write({})`, 0},
		{`const w = async () => ctx.files.write({}); await w(); await w()`, 1},
		{`try { await ctx.files.write({}) } catch (e) { throw e }`, 0},
		{`p.x ? await ctx.files.write({}) : await ctx.email.send({})`, 0},
	}
	for _, c := range cases {
		a := analyze(t, wf("", "", c.mutate, ""))
		if got := len(a.WritePairs(writes)); got != c.pairs {
			t.Fatalf("%s: %d pairs %+v, want %d", c.mutate, got, a.WritePairs(writes), c.pairs)
		}
	}
}

func TestAnalyzeSyntaxError(t *testing.T) {
	t.Parallel()
	_, err := Analyze("const x = ;\n")
	if err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("got %v", err)
	}
}

func FuzzAnalyze(f *testing.F) {
	f.Add(wf("", "", `const { http: { request } } = ctx; await request({ subkey: `+"`a:${p.x}`"+` })`, ""))
	f.Add(wf(`function h(c) { return c["x"] }`, `ctx.registerInput({ ...x })`, `await ctx[p]()`, "for (const f of fs) await ctx.withItem(`f:${f}`, 1, g)"))
	f.Add("export default Keep.workflow({ producers: { p: { handler: (a = ctx) => a.b.c() } } })")
	f.Add("class A { #x = ctx; static { ctx.a.b() } }; export default A")
	f.Add("label: for (;;) { try { break label } finally { continue } }")
	f.Fuzz(func(t *testing.T, src string) {
		a, err := Analyze(src)
		if err != nil {
			return
		}
		_ = a.Uses()
		_ = a.Identities()
		_ = a.WritePairs(func(Call) bool { return true })
	})
}

// `export default` is rewritten where it is a statement, never inside a
// string, a template or a comment, and the line numbers stay.
func TestExportDefaultByTokens(t *testing.T) {
	t.Parallel()
	src := "const note = `\nexport default nothing`\n/*\nexport default x */\nconst r = 4 / 2 / 1, re = /export default/\nexport\n  default Keep.workflow({ name: \"w\", note })"
	w, err := wrapScript(src)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w, "`\nexport default nothing`") || !strings.Contains(w, "/*\nexport default x */") || !strings.Contains(w, "/export default/") ||
		!strings.Contains(w, "__keep_export =\n Keep.workflow") || strings.Count(w, "\n") != strings.Count(src, "\n")+2 {
		t.Fatalf("wrapped:\n%s", w)
	}
	if _, err := wrapScript("export default 1\nexport default 2"); err == nil {
		t.Fatal("two exports accepted")
	}
	p, err := Compile("wf.js", src)
	if err != nil {
		t.Fatal(err)
	}
	if p.Decl.WorkflowName() != "w" {
		t.Fatalf("declaration %+v", p.Decl)
	}
}

// Issue 38 #4 and issue 39: the secrets a script names are read from its
// syntax tree, wherever a call's argument is built (a header in a spread
// behind a condition, a const, a template, an escape), never from its
// comments; a name built at run time is said to be computed.
func TestAnalyzeNamesTheSecrets(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      string
		computed  bool
	}{
		{"header", `const H = { Authorization: "Bearer {secret:crm_token}" }; // {secret:in_a_comment}
export default Keep.workflow({ name: "w", consumers: { c: Keep.consumer({ async mutate(ctx, p) {
  await ctx.http.request({ method: "POST", url: "https://api.example.com/x?k={secret:maps_key}", headers: H,
    ...(Number(p.data.id) > 1 ? { headers: { "X-Debug": "{secret:payroll_api_key}" } } : {}) }) } }) } })`,
			"crm_token maps_key payroll_api_key", false},
		{"template and escape", "const a = `Bearer {secret:tok}${x}`; const b = \"\\u007bsecret:esc}\"; const c = `${y}{secret:tail}`",
			"esc tail tok", false},
		{"computed", `const n = "crm"; const h = "{secret:" + n + "}"`, "", true},
		{"split by a substitution", "const h = `{secret:pay${''}roll}`", "", true},
		{"none", `const h = "secret: not a placeholder {x}"`, "", false},
	} {
		a, err := Analyze(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := strings.Join(a.Secrets, " "); got != c.want || a.SecretsComputed != c.computed {
			t.Errorf("%s: secrets %q computed %v, want %q %v", c.name, got, a.SecretsComputed, c.want, c.computed)
		}
	}
}
