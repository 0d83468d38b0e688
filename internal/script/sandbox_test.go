package script

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

const okScript = `
export default Keep.workflow({
  name: "t",
  topics: { "a": {} },
  producers: {
    p: { publishes: ["a"], schedule: { interval: "5m" }, handler: async (ctx, state) => {
      const n = (state?.n ?? 0) + 1
      const r = await ctx.files.read({ path: "x" })
      console.log("read", r.content)
      return { n, content: r.content }
    } },
  },
  consumers: {
    c: Keep.consumer({ subscribe: ["a"], async prepare(ctx, state) { return { reservations: [], data: {} } } }),
  },
})
`

func compile(t *testing.T, src string) *Program {
	t.Helper()
	p, err := Compile("wf.js", src)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return p
}

func TestInvokeReturnsStateAndRoutesHostCalls(t *testing.T) {
	t.Parallel()
	p := compile(t, okScript)
	if p.Decl.WorkflowName() != "t" || len(p.Decl.Producers) != 1 || len(p.Decl.Consumers) != 1 {
		t.Fatalf("declaration: %+v", p.Decl)
	}
	var calls []string
	out, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler",
		Args: []json.RawMessage{json.RawMessage(`{"n":41}`)}, Tools: map[string][]string{"files": {"read"}},
		Limits: Limits{Timeout: 5 * time.Second, MemoryLimit: 32 << 20},
		Host: func(m string, a json.RawMessage) (json.RawMessage, error) {
			calls = append(calls, m+" "+string(a))
			if m == "files.read" {
				return json.RawMessage(`{"content":"hello"}`), nil
			}
			return nil, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Value) != `{"n":42,"content":"hello"}` {
		t.Fatalf("value %s", out.Value)
	}
	if len(calls) != 2 || calls[0] != `files.read {"path":"x"}` || calls[1] != `log "read hello"` {
		t.Fatalf("calls %q", calls)
	}
}

func handlerScript(body string) string {
	return `export default Keep.workflow({ name: "h", topics: {"a":{}}, producers: { p: { publishes: ["a"], schedule: {interval:"1m"},
  handler: async (ctx, state) => {` + body + `} } } })`
}

func run(t *testing.T, body string, host HostFunc) (Outcome, error) {
	t.Helper()
	return runWithin(t, body, host, 500*time.Millisecond)
}

// runWithin runs body with a time limit; tests of another limit give it
// room, so that on a busy machine the time limit never trips first.
func runWithin(t *testing.T, body string, host HostFunc, timeout time.Duration) (Outcome, error) {
	t.Helper()
	p := compile(t, handlerScript(body))
	return p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{nil},
		Tools: map[string][]string{"files": {"write"}}, Host: host, Limits: Limits{Timeout: timeout, MemoryLimit: 32 << 20}})
}

func TestHostAbortCannotBeCaught(t *testing.T) {
	t.Parallel()
	_, err := run(t, `try { await ctx.files.write({path:"x"}) } catch (e) { return {caught: true} } return {caught:false}`,
		func(m string, a json.RawMessage) (json.RawMessage, error) {
			return nil, kt.Errorf(kt.ClassLogic, "phase violation: files.write is a mutation; a producer may not mutate")
		})
	if err == nil || !strings.Contains(err.Error(), "phase violation") || kt.ClassOf(err) != kt.ClassLogic {
		t.Fatalf("want uncatchable phase violation, got %v", err)
	}
}

// A call the host takes over gives the script no result, and the script
// goes on to its end, so the host sees what follows (issue 24 #2: a second
// write after it once vanished); the invocation ends Suspended.
func TestATakenOverCallLetsTheScriptGoOn(t *testing.T) {
	t.Parallel()
	after := false
	out, err := run(t, `const r = await ctx.files.write({path:"x"}); ctx.log("after", r === undefined); return {}`,
		func(m string, a json.RawMessage) (json.RawMessage, error) {
			if m == "log" {
				after = string(a) == `"after true"`
				return nil, nil
			}
			return nil, ErrSuspend
		})
	if err != nil || !out.Suspended || !after {
		t.Fatalf("stop: out=%+v err=%v after=%v", out, err, after)
	}
	// A throw after the taken-over call fails the invocation, saying so.
	_, err = run(t, `const r = await ctx.files.write({path:"x"}); return r.id`,
		func(string, json.RawMessage) (json.RawMessage, error) { return nil, ErrSuspend })
	if err == nil || kt.ClassOf(err) != kt.ClassLogic || !strings.Contains(err.Error(), "after its mutation call") {
		t.Fatalf("a throw after the call: %v", err)
	}
}

func TestHostileHandlersFailAsLogic(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ body, want string }{
		"cpu loop":        {`while(true){}`, "time limit"},
		"cpu loop caught": {`try { while(true){} } catch(e) {} return {}`, "time limit"},
		"memory strings":  {`let s='x'; while(true) s = s + s`, "string too long"},
		"memory arrays":   {`const a=[]; while(true) a.push(new Array(10000).fill(1))`, "memory"},
		"recursion":       {`const f = (n) => f(n+1) + 1; f(0)`, "stack overflow"},
		"never resolves":  {`await new Promise(() => {})`, "never finished"},
		"throws":          {`throw new TypeError("boom")`, "TypeError: boom"},
		"throws string":   {`throw "plain"`, "plain"},
		"function value":  {`return { f: () => 1 }`, "is a function"},
		"bigint value":    {`return { n: 10n }`, "BigInt"},
		"cycle":           {`const o = {}; o.o = o; return o`, "cycle"},
		"no require":      {`require("fs")`, "'require' is not defined"},
		"no process":      {`process.exit(1)`, "'process' is not defined"},
		"no timers":       {`setTimeout(() => {}, 1)`, "'setTimeout' is not defined"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			timeout := 500 * time.Millisecond
			if c.want != "time limit" {
				timeout = 2 * time.Minute
			}
			_, err := runWithin(t, c.body, func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil }, timeout)
			if err == nil {
				t.Fatalf("no error")
			}
			if kt.ClassOf(err) != kt.ClassLogic || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v (class %s), want logic error containing %q", err, kt.ClassOf(err), c.want)
			}
		})
	}
}

func TestCtxUsedAfterReturnIsRejected(t *testing.T) {
	t.Parallel()
	// A promise chain left running calls the host after the handler settled.
	_, err := run(t, `Promise.resolve().then(() => ctx.files.write({path:"late"})); return {}`,
		func(m string, a json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{}`), nil })
	if err != nil {
		t.Fatalf("the handler itself returned fine: %v", err)
	}
}

func TestSyntaxErrorNamesLine(t *testing.T) {
	t.Parallel()
	_, err := Compile("bad.js", "export default Keep.workflow({\n  name: 'x',\n  topics: { a: {} ,,\n})")
	var se *SyntaxError
	if !errors.As(err, &se) || se.Line != 3 || se.File != "bad.js" {
		t.Fatalf("want syntax error at bad.js:3, got %v", err)
	}
}

// TestAReturnedValueNestsWithinKeepsOneDepthBound: the prelude's bound on
// a returned value is keeptype's MaxJSONDepth (put in when it is loaded,
// not a number of its own): a value at it is returned, one level deeper
// fails as a logic error naming the bound.
func TestAReturnedValueNestsWithinKeepsOneDepthBound(t *testing.T) {
	t.Parallel()
	nested := func(depth int) string { // {"v":[[…]]}, depth levels in all
		return `return ` + `{"v":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
	}
	nop := func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil }
	out, err := runWithin(t, nested(kt.MaxJSONDepth), nop, 2*time.Minute)
	if err != nil || kt.JSONDepth(out.Value) != kt.MaxJSONDepth {
		t.Fatalf("a value %d levels deep: %v (%d deep returned)", kt.MaxJSONDepth, err, kt.JSONDepth(out.Value))
	}
	_, err = runWithin(t, nested(kt.MaxJSONDepth+1), nop, 2*time.Minute)
	if want := fmt.Sprintf("is nested more than %d levels deep", kt.MaxJSONDepth); err == nil || kt.ClassOf(err) != kt.ClassLogic || !strings.Contains(err.Error(), want) {
		t.Fatalf("a value %d levels deep: %v, want a logic error saying %q", kt.MaxJSONDepth+1, err, want)
	}
}
