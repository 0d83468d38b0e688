package script

import (
	"fmt"

	"github.com/tdewolff/parse/v2/js"
)

// Globals the sandbox does not have (issue 42).

// absentGlobals are the globals of Node and of browsers that keep's
// sandbox does not have, each with what a script writes instead: a model
// (or a person) used to them writes fetch(...) and the run would fail on
// its first call with "fetch is not defined" (TestAbsentGlobalsAreAbsent
// checks each is absent in the sandbox).
var absentGlobals = map[string]string{
	"fetch":          "call HTTP through keep: await ctx.http.request({ method: \"GET\", url }) (it returns { status, headers, body, json }; a write is keep's one write of the run, in mutate)",
	"XMLHttpRequest": "call HTTP through keep: await ctx.http.request({ method, url, headers, json })",
	"WebSocket":      "keep runs a handler to its end and has no sockets: poll with ctx.http.request({ method: \"GET\", url }) from a producer on a schedule, or receive pushes with a webhook (webhooks: { NAME: { handler } })",
	"EventSource":    "keep runs a handler to its end and has no streams: poll with ctx.http.request({ method: \"GET\", url }) from a producer on a schedule, or receive pushes with a webhook",
	"require":        "a script is one file and imports nothing: the connectors are on ctx (ctx.http.request, ctx.files.read, ctx.sql.query …); write helpers in the script itself",
	"module":         "a script is one file: export the workflow with export default Keep.workflow({ ... })",
	"exports":        "a script is one file: export the workflow with export default Keep.workflow({ ... })",
	"process":        "there is no process or environment: keep a credential in keep (printf %s \"$VALUE\" | keep secret set NAME) and write {secret:NAME} where it goes in a connector call (\"Authorization\": \"Bearer {secret:NAME}\"); settings go in the script",
	"__dirname":      "there is no file system path: read and write files with ctx.files.read({ path }) and ctx.files.write({ path, content }), relative to the workflow's files root",
	"__filename":     "there is no file system path: read and write files with ctx.files.read({ path }) and ctx.files.write({ path, content }), relative to the workflow's files root",
	"setTimeout":     "keep has no timers: a handler runs to its end — run later with a producer's or a task's schedule (schedule: { interval: \"5m\" }), and for a retry throw: keep runs the item again with backoff",
	"setInterval":    "keep has no timers: a handler runs to its end — repeat with a producer's or a task's schedule (schedule: { interval: \"5m\" })",
	"setImmediate":   "keep has no timers: await the work directly (await ctx.http.request({ ... }))",
	"clearTimeout":   "keep has no timers: a handler runs to its end — run later with a producer's or a task's schedule",
	"clearInterval":  "keep has no timers: a handler runs to its end — repeat with a producer's or a task's schedule",
	"clearImmediate": "keep has no timers: await the work directly",
	"Buffer":         "there is no Buffer: work on strings; bytes travel as { base64: \"…\" } in a connector call's argument",
	"window":         "there is no window: the script's globals are JavaScript's own, and the outside is reached through ctx (ctx.http.request({ ... }))",
	"document":       "there is no document: the script's globals are JavaScript's own, and the outside is reached through ctx (ctx.http.request({ ... }))",
	"localStorage":   "there is no localStorage: a handler's state is its return value (a producer's handler(ctx, state) gets what it returned last run)",
	"global":         "there is no global: the script's globals are JavaScript's own, and the outside is reached through ctx (ctx.http.request({ ... }))",
}

// absentGlobal refuses a name the sandbox does not have.
func (a *analyzer) absentGlobal(n js.INode, name string) {
	if instead, ok := absentGlobals[name]; ok {
		a.refuse(n, fmt.Sprintf("%s does not exist in keep's sandbox (the run would fail with \"%s is not defined\"): %s", name, name, instead))
	}
}

// onGlobalObject refuses globalThis.NAME (or through a const holding
// globalThis) for a NAME the sandbox does not have.
func (a *analyzer) onGlobalObject(n js.INode, base js.IExpr, name string) {
	if v, ok := a.resolve(base).(*js.Var); ok && varOf(v).Decl == js.NoDecl && string(varOf(v).Data) == "globalThis" {
		a.absentGlobal(n, name)
	}
}
