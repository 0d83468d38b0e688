package script

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// Every global keep validate refuses as absent is absent in the sandbox:
// the refusal says what a run would meet.
func TestAbsentGlobalsAreAbsent(t *testing.T) {
	t.Parallel()
	var names []string
	for n := range absentGlobals {
		names = append(names, n)
	}
	sort.Strings(names)
	list, _ := json.Marshal(names)
	out, err := run(t, `const seen = {}; for (const n of `+string(list)+`) seen[n] = typeof globalThis[n]; return seen`, nil)
	if err != nil {
		t.Fatal(err)
	}
	var types map[string]string
	if err := json.Unmarshal(out.Value, &types); err != nil {
		t.Fatalf("%s: %v", out.Value, err)
	}
	for _, n := range names {
		if types[n] != "undefined" {
			t.Errorf("%s is %q in the sandbox, yet validate refuses it as absent", n, types[n])
		}
	}
}

// check is every static check of src, with the connectors of known and
// the sources of the system connector.
func check(t *testing.T, src string) []kt.Problem {
	t.Helper()
	p, err := Compile("wf.js", src)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return ValidateAll(p, known, map[string][]string{"system": {"schedule", "random"}, "files": {"file"}})
}

// wf42 is a workflow whose producer's handler is producer and whose
// consumer's mutate is mutate, with helpers declared before it.
func wf42(helpers, producer, mutate string) string {
	return helpers + `
export default Keep.workflow({ name: "w", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "5m" }, handler: async (ctx, state) => {
` + producer + `
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"],
    async prepare(ctx, state) { return { reservations: [], data: state } },
    async mutate(ctx, p) {
` + mutate + `
    } }) },
})`
}

// oneError is a script that validation refuses with one error, at its
// line and handler, saying want and every one of also.
type oneError struct {
	name, helpers, producer, mutate string
	line                            int
	handler, want                   string
}

func expectOneError(t *testing.T, cases []oneError, also ...string) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			errs := errorsOf(check(t, wf42(c.helpers, c.producer, c.mutate)))
			if len(errs) != 1 {
				t.Fatalf("want one error, got %v", errs)
			}
			e := errs[0]
			ok := e.Line == c.line && e.Handler == c.handler && strings.Contains(e.Message, c.want)
			for _, a := range also {
				ok = ok && strings.Contains(e.Message, a)
			}
			if !ok {
				t.Fatalf("got %q (line %d, handler %q); want line %d, handler %q, saying %q and %q", e.Message, e.Line, e.Handler, c.line, c.handler, c.want, also)
			}
		})
	}
}

func errorsOf(ps []kt.Problem) []kt.Problem {
	var out []kt.Problem
	for _, p := range ps {
		if p.Severity == "error" {
			out = append(out, p)
		}
	}
	return out
}

// keep validate refuses a global the sandbox does not have, however the
// script reaches it (an alias, globalThis, a helper), at its line, naming
// the handler and what to write instead (issue 42).
func TestValidateRefusesGlobalsTheSandboxLacks(t *testing.T) {
	t.Parallel()
	cases := []oneError{
		{"fetch", "", "", `      const r = await fetch("https://api.example/x")`, 9, "consumers.c.mutate", "ctx.http.request"},
		{"fetch aliased", "", `    const f = fetch
    await f("https://api.example/x")`, "", 4, "producers.p.handler", "fetch does not exist in keep's sandbox"},
		{"globalThis.fetch", "", `    await globalThis.fetch("https://api.example/x")`, "", 4, "producers.p.handler", "ctx.http.request"},
		{"globalThis through a const", "", `    const g = globalThis
    await g["fetch"]("https://api.example/x")`, "", 5, "producers.p.handler", "ctx.http.request"},
		{"XMLHttpRequest", "", `    const x = new XMLHttpRequest()`, "", 4, "producers.p.handler", "ctx.http.request"},
		{"require", `function client() { return require("axios") }`, "", `      await client().post("https://api.example/x")`, 1, "consumers.c.mutate", "the connectors are on ctx"},
		{"process.env", "", `    const key = process.env.API_KEY`, "", 4, "producers.p.handler", "keep secret set NAME"},
		{"setTimeout in a helper", `function later(ms) { return new Promise((r) => setTimeout(r, ms)) }`, "", `      await later(1000)`, 1, "consumers.c.mutate", "schedule"},
		{"setInterval", "", `    setInterval(() => {}, 1000)`, "", 4, "producers.p.handler", "schedule: { interval"},
		{"Buffer", "", `    const b = Buffer.from("x").toString("base64")`, "", 4, "producers.p.handler", "base64"},
	}
	expectOneError(t, cases, "does not exist in keep's sandbox")
}

// What only looks like those globals is no error: the script's own fetch,
// a field named setTimeout, typeof asking whether one exists.
func TestValidateKeepsNamesThatAreTheScripts(t *testing.T) {
	t.Parallel()
	src := wf42(`function fetch(ctx, url) { return ctx.http.request({ method: "GET", url }) }
const opts = { setTimeout: 5, process: "batch" }`,
		`    const r = await fetch(ctx, "https://api.example/x")
    const hasTimers = typeof setTimeout !== "undefined"
    ctx.log(opts.setTimeout, opts.process, hasTimers, r.status)`, "")
	if errs := errorsOf(check(t, src)); len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
}

// keep validate refuses an id built from the time or chance in every
// script — directly, through names, through a helper — at the id's line,
// naming its handler; the time and chance elsewhere are fine (issue 42).
func TestValidateRefusesIdsFromTimeOrChance(t *testing.T) {
	t.Parallel()
	cases := []oneError{
		{"an input id from Date.now()", "", `    ctx.registerInput({ source: "files", type: "file", id: "job-" + Date.now(), title: "Job" })`, "", 4, "producers.p.handler", "the input id \"job-\" + Date.now() is built from the time or chance (Date.now)"},
		{"an input id from a helper that returns Date.now()", `function stamp() { return String(Date.now()) }`,
			`    const id = stamp()
    ctx.registerInput({ source: "files", type: "file", id, title: "Job" })`, "", 5, "producers.p.handler", "(Date.now)"},
		{"a messageId from Math.random()", "", `    await ctx.publish("a", { messageId: "m-" + Math.random(), payload: { n: 1 } })`, "", 4, "producers.p.handler", "the messageId \"m-\" + Math.random() is built from the time or chance (Math.random)"},
		{"an item from new Date() through a name", "", "", `      const at = new Date().toISOString()
      await ctx.withItem("report:" + at, "Report", async () => {})`, 10, "consumers.c.mutate", "(new Date())"},
		{"a subkey from crypto.randomUUID()", "", "", `      await ctx.http.request({ method: "POST", url: "https://api.example/x", subkey: crypto.randomUUID() })`, 9, "consumers.c.mutate", "the subkey crypto.randomUUID() is built from the time or chance (crypto)"},
		{"an input id from performance.now()", "", `    const t = performance.now()
    ctx.registerInput({ source: "files", type: "file", id: ` + "`t-${t}`" + `, title: "Job" })`, "", 5, "producers.p.handler", "(performance)"},
		{"an input id from ctx.now()", "", `    ctx.registerInput({ source: "files", type: "file", id: String(ctx.now()), title: "Job" })`, "", 4, "producers.p.handler", "(ctx.now)"},
	}
	expectOneError(t, cases, "data's own id")
}

// The time and chance where they build no id are no error: a date the
// data carries, a title, a log line, a list asked for since an hour ago,
// a schedule tick of the system source.
func TestValidateKeepsTimeThatBuildsNoId(t *testing.T) {
	t.Parallel()
	src := wf42("", `    const rows = await ctx.http.request({ method: "GET", url: "https://api.example/orders?since=" + (Date.now() - 3600000) })
    for (const o of rows.json) {
      const day = new Date(o.createdAt).toISOString().slice(0, 10)
      ctx.registerInput({ source: "files", type: "file", id: "order:" + o.id + ":" + day, title: "Order " + o.id + " seen " + new Date().toISOString() })
      ctx.log("at", Date.now(), Math.random())
    }
    ctx.registerInput({ source: "system", type: "schedule", id: "tick-" + ctx.now(), title: "Tick" })`,
		`      await ctx.http.request({ method: "POST", url: "https://api.example/x", json: { at: Date.now() }, subkey: "x:" + p.id })`)
	if errs := errorsOf(check(t, src)); len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
}
