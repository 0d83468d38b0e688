package engine_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// phaseScript builds a workflow whose handler `where` runs `code` inside a
// try/catch that swallows everything: a phase violation must fail the run anyway.
func phaseScript(where, code string) string {
	wrap := func(w string) string {
		if w != where {
			return ""
		}
		return "try { " + code + " } catch (e) { /* swallowed */ }"
	}
	return fmt.Sprintf(`export default Keep.workflow({
  name: "phases",
  topics: { "a": {}, "b": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    %s
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "Tick 1" })
    await ctx.publish("a", { messageId: "1", inputId, payload: {} })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"], publishes: ["b"],
    async prepare(ctx) {
      %s
      const [e] = await ctx.peek("a")
      if (!e) return { reservations: [] }
      return { reservations: [{ topic: "a", ids: [e.messageId] }], data: {} }
    },
    async mutate(ctx, p) { %s },
    async next(ctx, p, r) { %s },
  }),
  d: Keep.consumer({ subscribe: ["b"], async prepare(ctx) { return { reservations: [] } } }) },
})`, wrap("producer"), wrap("prepare"), wrap("mutate"), wrap("next"))
}

func TestPhaseViolationsFailTheRunEvenWhenCaught(t *testing.T) {
	t.Parallel()
	cases := []struct{ where, code, want string }{
		{"producer", `await ctx.files.write({ path: "x", content: "y" })`, "producers only read"},
		{"producer", `await ctx.peek("a")`, "peek is only allowed in prepare"},
		{"producer", `await ctx.publish("b", { messageId: "z", payload: {} })`, `publish to "b"`},
		{"prepare", `await ctx.files.write({ path: "x", content: "y" })`, "prepare only reads"},
		{"prepare", `await ctx.publish("b", { messageId: "z", payload: {} })`, "publish is only allowed"},
		{"prepare", `ctx.registerInput({ source: "system", type: "schedule", id: "2", title: "t" })`, "registerInput is only allowed"},
		{"prepare", `await ctx.peek("b")`, "does not subscribe"},
		{"mutate", `await ctx.files.list({ dir: "." })`, "mutate may only read by id"},
		{"mutate", `await ctx.peek("a")`, "peek is only allowed in prepare"},
		{"mutate", `await ctx.publish("b", { messageId: "z", payload: {} })`, "publish is only allowed"},
		{"next", `await ctx.files.read({ path: "x" })`, "next may not call connectors"},
		{"next", `await ctx.peek("a")`, "peek is only allowed in prepare"},
		{"next", `await ctx.publish("b", { messageId: "z", inputId: "x", payload: {} })`, "may not pass inputId"},
		{"next", `await ctx.publish("a", { messageId: "z", payload: {} })`, `publish to "a"`},
	}
	for _, c := range cases {
		t.Run(c.where+"/"+c.want, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			os.WriteFile(filepath.Join(e.dir, "files", "x"), []byte("y"), 0o644)
			wf := e.deploy(phaseScript(c.where, c.code))
			e.settle()
			r := e.open(wf)
			if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, c.want) {
				t.Fatalf("run %s %s: %s (want failed:logic containing %q)", r.Handler, r.Status, r.ErrorMessage, c.want)
			}
			if c.where == "producer" {
				if ins := e.inputs(wf); len(ins) != 0 {
					t.Fatalf("a failed producer left inputs: %+v", ins)
				}
			}
			if _, err := os.Stat(filepath.Join(e.dir, "files", "x")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A second write in mutate, or anything mutate does after its write, fails
// the run as a logic error naming the calls, before anything is sent
// (issue 24 #2: `await a(); await b()` once committed with b never run).
func TestSecondMutationInMutateIsLogicErrorAndNothingIsWritten(t *testing.T) {
	t.Parallel()
	const first = `await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, timeoutMs: 300 })`
	for _, c := range []struct {
		name, mutate, want string
		refused            bool // by validation too: two writes where it sees them
	}{
		{"at once", `ctx.http.request({ method: "POST", url: "%SINK%/write/1", json: {} }); ctx.http.request({ method: "POST", url: "%SINK%/write/2", json: {} })`, "ctx.http.request after ctx.http.request: a second mutation in mutate", true},
		{"one after the other", first + `; await ctx.http.request({ method: "PUT", url: "%SINK%/write/2", json: {} })`, "ctx.http.request after ctx.http.request: a second mutation in mutate", true},
		{"using the first result", `const r = ` + first + `; await ctx.http.request({ method: "POST", url: "%SINK%/write/" + r.id, json: {} })`, "after its mutation call, which must be the last thing mutate does", true},
		{"a throw after it", first + `; throw new Error("checked after the write")`, "checked after the write", false},
		{"a read after it", first + `; await ctx.http.request({ method: "GET", url: "%SINK%/read" })`, "was called after the mutation call ctx.http.request", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			src := strings.Replace(hookScript("", ""), first, c.mutate, 1)
			deploy := e.deploy
			if c.refused {
				// Validation names both calls (the static half); deployed
				// regardless, the engine stops the second at run time.
				if _, _, err := e.k.Engine.Check("wf.js", src); err == nil || !strings.Contains(err.Error(), "consumers.c.mutate can write twice: ctx.http.request") || strings.Count(err.Error(), "ctx.http.request({") != 2 {
					t.Fatalf("validation: %v", err)
				}
				deploy = e.deployUnchecked
			}
			wf := deploy(src)
			e.settle()
			r := e.open(wf)
			if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, c.want) {
				t.Fatalf("run %s: %s (want failed:logic with %q)", r.Status, r.ErrorMessage, c.want)
			}
			if e.sink.Requests() != 0 {
				t.Fatalf("requests at the sink: %d", e.sink.Requests())
			}
			// Logic failure before the mutation: the reservation stays pinned to
			// the failed run (SPEC §4), so its input shows what is stuck.
			if ev := e.events(wf, "job"); ev[0].ReservedBy != r.ID || ev[0].Status != kt.EventPending {
				t.Fatalf("event %+v", ev[0])
			}
		})
	}
}

// A log line after the write is kept, and the write goes out once.
func TestALogLineAfterTheMutationIsKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := strings.Replace(hookScript("", ""), `timeoutMs: 300 })`, `timeoutMs: 300 }); ctx.log("asked for the write")`, 1)
	wf := e.deploy(src)
	e.settle()
	e.noOpenRun(wf)
	if len(e.sink.Writes()) != 1 {
		t.Fatalf("writes %d", len(e.sink.Writes()))
	}
}

const chainScript = `export default Keep.workflow({
  name: "chain",
  topics: { "a": {}, "b": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    const v = (state && state.v) || "v1"
    for (const id of ["x", "y"]) {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id, title: "Item " + id })
      await ctx.publish("a", { messageId: id, inputId, payload: { id, v } })
    }
    if (state && state.boom) throw new Error("boom after publishing")
    return { v: "v2" }
  } } },
  consumers: {
    first: Keep.consumer({ subscribe: ["a"], publishes: ["b"],
      async prepare(ctx) { const [e] = await ctx.peek("a"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "a", ids: [e.messageId] }], data: e.payload } },
      async mutate(ctx, p) { await ctx.files.write({ path: "out/" + p.data.id, content: p.data.v }) },
      async next(ctx, p, r) { if (r.status !== "applied") return; await ctx.publish("b", { messageId: "b-" + p.data.id, payload: { id: p.data.id, sha: r.result.sha256 } }) },
    }),
    second: Keep.consumer({ subscribe: ["b"],
      async prepare(ctx) { const [e] = await ctx.peek("b"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "b", ids: [e.messageId] }], data: e.payload } },
      async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data }) },
    }),
  },
})`

func TestCausedByFlowsThroughTwoConsumers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(chainScript)
	e.settle()
	e.noOpenRun(wf)
	ins := e.inputs(wf)
	if len(ins) != 2 {
		t.Fatalf("inputs %+v", ins)
	}
	byTitle := map[string]string{}
	for _, in := range ins {
		byTitle[in.ID] = in.Title
		if in.Status != "done" {
			t.Fatalf("input %s is %s", in.Title, in.Status)
		}
	}
	outs := e.outputs(wf)
	if len(outs) != 4 {
		t.Fatalf("outputs %d", len(outs))
	}
	perInput := map[string][]string{}
	for _, o := range outs {
		if len(o.InputIDs) != 1 {
			t.Fatalf("output %s has inputs %v", o.Target, o.InputIDs)
		}
		perInput[byTitle[o.InputIDs[0]]] = append(perInput[byTitle[o.InputIDs[0]]], o.Tool)
	}
	for title, tools := range perInput {
		if strings.Join(tools, ",") != "files,http" {
			t.Fatalf("%s caused %v", title, tools)
		}
	}
	for _, ev := range e.events(wf, "b") {
		if len(ev.CausedBy) != 1 || ev.Status != kt.EventConsumed {
			t.Fatalf("downstream event %+v", ev)
		}
	}
	if len(e.sink.Writes()) != 2 {
		t.Fatalf("writes %d", len(e.sink.Writes()))
	}
}

func TestLastWriteWinsKeepsStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(chainScript)
	e.settle()
	// The producer runs again and republishes x and y with payload v2.
	if _, err := runNow(e, wf); err != nil {
		t.Fatal(err)
	}
	e.settle()
	evs := e.events(wf, "a")
	if len(evs) != 2 {
		t.Fatalf("events %d", len(evs))
	}
	for _, ev := range evs {
		if ev.Status != kt.EventConsumed || !strings.Contains(string(ev.Payload), `"v2"`) {
			t.Fatalf("event %s: status %s payload %s", ev.MessageID, ev.Status, ev.Payload)
		}
	}
	if n := len(e.outputs(wf)); n != 4 {
		t.Fatalf("republishing made new outputs: %d", n)
	}
}

func TestProducerCommitIsAtomic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := strings.Replace(chainScript, `return { v: "v2" }`, `throw new Error("boom after publishing")`, 1)
	wf := e.deploy(src)
	e.settle()
	r := e.open(wf)
	if r.HandlerType != kt.HandlerProducer || r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, "boom after publishing") {
		t.Fatalf("run %s %s: %s", r.HandlerType, r.Status, r.ErrorMessage)
	}
	if ins := e.inputs(wf); len(ins) != 0 {
		t.Fatalf("inputs left by a failed producer: %+v", ins)
	}
	var n int
	_ = e.k.Store.View(e.ctx(), func(tx storeTx) error {
		var err error
		n, err = tx.CountPending(wf)
		return err
	})
	if n != 0 {
		t.Fatalf("events left by a failed producer: %d", n)
	}
}

func TestLogicFailureWaitsForMinorVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	broken := strings.Replace(chainScript, `content: p.data.v })`, `content: p.data.v.missing.field })`, 1)
	wf := e.deploy(broken)
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusFailedLogic || r.Handler != "first" || !strings.Contains(r.ErrorMessage, "mutate threw TypeError") {
		t.Fatalf("run %s %s: %s", r.Handler, r.Status, r.ErrorMessage)
	}
	if !strings.Contains(r.ErrorMessage, "wf.js:") {
		t.Fatalf("the error names no line: %s", r.ErrorMessage)
	}
	e.settle() // nothing happens until a fixed version is deployed
	if again := e.open(wf); again.ID != r.ID {
		t.Fatalf("a logic failure was retried without a new version")
	}
	e.redeploy(chainScript, "minor")
	e.settle()
	e.noOpenRun(wf)
	if len(e.sink.Writes()) != 2 {
		t.Fatalf("writes %d", len(e.sink.Writes()))
	}
}

// mutate may read by id (ch 06): an http GET the script marks kind "byId",
// a custom connector's readById method; list and search reads stay refused
// there (issue 24 #8: every GET in mutate was refused as a list read).
func TestMutateMayReadByID(t *testing.T) {
	t.Parallel()
	custom := `
[connectors.custom.crm]
base_url = "%SINK%"
[connectors.custom.crm.methods.getOrder]
kind = "readById"
path = "/orders/{id}"
params = { id = "the order's id" }
required = ["id"]
[connectors.custom.crm.methods.findOrders]
kind = "read"
path = "/orders"
params = { q = "what to look for" }
`
	const write = `await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, timeoutMs: 300 })`
	for _, c := range []struct{ name, read, refused string }{
		{"http byId", `const o = await ctx.http.request({ url: "%SINK%/orders/" + p.data.id, kind: "byId" }); if (!o.json.ok) throw new Error("no order")`, ""},
		{"custom readById", `const o = await ctx.crm.getOrder({ id: p.data.id }); if (!o.json.ok) throw new Error("no order")`, ""},
		{"http list", `await ctx.http.request({ url: "%SINK%/orders" })`, "ctx.http.request is a list/search read; mutate may only read by id"},
		{"custom search", `await ctx.crm.findOrders({ q: "a" })`, "ctx.crm.findOrders is a list/search read"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvWith(t, testPolicy+custom)
			wf := e.deploy(strings.Replace(hookScript("", ""), write, c.read+"; "+write, 1))
			e.settle()
			if c.refused == "" {
				e.noOpenRun(wf)
				if n := len(e.sink.Writes()); n != 1 {
					t.Fatalf("writes %d", n)
				}
				return
			}
			r := e.open(wf)
			if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, c.refused) {
				t.Fatalf("run %s: %s (want failed:logic with %q)", r.Status, r.ErrorMessage, c.refused)
			}
			if n := e.sink.Requests(); n != 0 {
				t.Fatalf("requests at the sink: %d", n)
			}
		})
	}
}
