package engine_test

import (
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// takeOverScript is hookScript whose mutate is body (S is the sink's URL).
func takeOverScript(body string) string {
	return "const S = \"%SINK%\"\n" + strings.Replace(hookScript("", ""),
		`await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, timeoutMs: 300 })`, body, 1)
}

// Issue 25: the sandbox worker takes mutate's first write over without
// asking keep (kt.ReadsBy tells it which calls write). Whatever the
// script passes — a method spelled oddly, a value that answers differently
// at each read, a write keep refuses — what a person sees is what keep
// decides: the writes at the sink, the run's status and its message. A
// write keep refuses (a grant missing, arguments it refuses) is the
// user's mistake: the run says so and no sandbox worker is killed for it.
func TestWhatTheSandboxTakesOverIsKeepsToSendOrRefuse(t *testing.T) {
	for _, c := range []struct {
		name, body string
		status     kt.Status
		msg        string // in the run's error message
		sent       string // "METHOD /path" at the sink, or ""
	}{
		{"lower case", `await ctx.http.request({ method: "post", url: S + "/write/a" })`, kt.StatusCommitted, "", "POST /write/a"},
		{"mixed case", `await ctx.http.request({ method: "PoSt", url: S + "/write/a" })`, kt.StatusCommitted, "", "POST /write/a"},
		{"a long s, upper case POST", `await ctx.http.request({ method: "po\u017Ft", url: S + "/write/a" })`, kt.StatusCommitted, "", "POST /write/a"},
		{"a space", `await ctx.http.request({ method: " POST", url: S + "/write/a" })`, kt.StatusFailedLogic, `" POST" is not an HTTP method`, ""},
		{"no method: a GET", `await ctx.http.request({ url: S + "/write/a" })`, kt.StatusFailedLogic, "is a list/search read", ""},
		{"a number", `await ctx.http.request({ method: 7, url: S + "/write/a" })`, kt.StatusFailedLogic, "is a list/search read", ""},
		{"an object with toString", `await ctx.http.request({ method: { toString() { return "POST" } }, url: S + "/write/a" })`, kt.StatusFailedLogic, "is a list/search read", ""},
		{"a getter, POST then GET", `let n = 0; const o = { url: S + "/write/a" }
      Object.defineProperty(o, "method", { enumerable: true, get() { return ++n % 2 ? "POST" : "GET" } })
      await ctx.http.request(o)`, kt.StatusApproval, "http.request POST", ""},
		{"a getter, GET then POST", `let n = 0; const o = { url: S + "/write/a", kind: "byId" }
      Object.defineProperty(o, "method", { enumerable: true, get() { return ++n % 2 ? "GET" : "POST" } })
      await ctx.http.request(o)`, kt.StatusCommitted, "", ""},
		{"toJSON", `await ctx.http.request({ toJSON() { return { method: "POST", url: S + "/write/a" } } })`, kt.StatusApproval, "http.request POST", ""},
		{"Method beside method", `await ctx.http.request({ Method: "POST", method: "GET", kind: "byId", url: S + "/write/a" })`, kt.StatusCommitted, "", ""},
		{"not granted", `await ctx.http.request({ method: ["PAT", "CH"].join(""), url: S + "/write/a" })`, kt.StatusApproval, "http.request PATCH", ""},
		{"not granted, caught", `try { await ctx.http.request({ method: ["PAT", "CH"].join(""), url: S + "/write/a" }) } catch (e) { console.log(e.message) }`, kt.StatusApproval, "http.request PATCH", ""},
		{"not granted, a read after", `await ctx.http.request({ method: ["PAT", "CH"].join(""), url: S + "/write/a" })
      await ctx.http.request({ method: "GET", kind: "byId", url: S + "/read/a" })`, kt.StatusApproval, "http.request PATCH", ""},
		{"not granted, a throw after", `await ctx.http.request({ method: ["PAT", "CH"].join(""), url: S + "/write/a" }); throw new Error("after")`, kt.StatusApproval, "http.request PATCH", ""},
		{"arguments refused", `await ctx.http.request({ method: "POST", url: "ftp://127.0.0.1/x" })`, kt.StatusFailedLogic, "is not an absolute http(s) URL", ""},
		{"a subkey refused", `await ctx.http.request({ method: "POST", url: S + "/write/a", subkey: 5 })`, kt.StatusFailedLogic, "subkey must be a string", ""},
		{"two writes", `await ctx.http.request({ method: "POST", url: S + "/write/a" }); await ctx.http.request({ method: "PUT", url: S + "/write/b" })`, kt.StatusFailedLogic, "a second mutation in mutate", ""},
		{"the take-over caught, a second write", `try { await ctx.http.request({ method: "POST", url: S + "/write/a" }) } catch (e) {}
      await ctx.http.request({ method: "POST", url: S + "/write/b" })`, kt.StatusFailedLogic, "a second mutation in mutate", ""},
		{"two writes at once", `await Promise.all([ctx.http.request({ method: "POST", url: S + "/write/a" }), ctx.http.request({ method: "PUT", url: S + "/write/b" })])`, kt.StatusFailedLogic, "a second mutation in mutate", ""},
		{"not awaited, a throw", `ctx.http.request({ method: "POST", url: S + "/write/a" }); throw new Error("boom")`, kt.StatusFailedLogic, "boom (at mutate", ""},
		{"not awaited, a return", `ctx.http.request({ method: "POST", url: S + "/write/a" }); return 5`, kt.StatusCommitted, "", "POST /write/a"},
		{"a read after", `await ctx.http.request({ method: "POST", url: S + "/write/a" }); await ctx.http.request({ method: "GET", kind: "byId", url: S + "/read/a" })`, kt.StatusFailedLogic, "was called after the mutation call", ""},
		{"a publish after", `await ctx.http.request({ method: "POST", url: S + "/write/a" }); await ctx.publish("job", { messageId: "z", payload: {} })`, kt.StatusFailedLogic, "ctx.publish was called after the mutation call", ""},
		{"sql.exec of no database", `await ctx.sql.exec({ db: "nope", sql: "DELETE FROM t" })`, kt.StatusFailedLogic, `there is no database "nope"`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			wf := e.deployUnchecked(takeOverScript(c.body))
			_, killed0 := e.k.Sandbox.WorkerStats()
			e.settle()
			_, killed := e.k.Sandbox.WorkerStats()
			var r kt.Run
			if err := e.k.Store.View(e.ctx(), func(tx storeTx) error {
				rs, err := tx.RunList(wf, 10)
				for _, run := range rs {
					if run.Handler == "c" && r.ID == "" {
						r = run
					}
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if r.Status != c.status || !strings.Contains(r.ErrorMessage, c.msg) {
				t.Errorf("the consumer's run is %s: %q; want %s with %q", r.Status, r.ErrorMessage, c.status, c.msg)
			}
			var sent []string
			for _, w := range e.sink.Writes() {
				sent = append(sent, w.Method+" "+w.Path)
			}
			if strings.Join(sent, ", ") != c.sent {
				t.Errorf("written at the sink: %q, want %q", sent, c.sent)
			}
			if killed != killed0 {
				t.Errorf("%d sandbox workers killed", killed-killed0)
			}
		})
	}
}
