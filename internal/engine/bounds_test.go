package engine_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// bigPolicy gives the sandbox room for the strings an attack hands keep:
// what is tested is keep's own bound, not the sandbox's.
var bigPolicy = strings.Replace(roomyPolicy, `memory_limit = "32MiB"`, `memory_limit = "128MiB"`, 1)

// storeBytes is the size of the SQLite store on disk (0 on PostgreSQL).
func storeBytes(e *env) int64 {
	var n int64
	for _, f := range []string{"keep.db", "keep.db-wal"} {
		if st, err := os.Stat(filepath.Join(e.dir, "data", f)); err == nil {
			n += st.Size()
		}
	}
	return n
}

// producerAttack deploys a producer whose handler is body and runs it; it
// returns the failed run, after checking that nothing of it was stored
// and that the store did not grow by more than a few MiB.
func producerAttack(t *testing.T, name, body string) kt.Run {
	t.Helper()
	return producerAttackWith(t, bigPolicy, name, body)
}

// hugePolicy lets the sandbox worker hold several copies of a 17 MiB
// string (the script's, its JSON, the frame's), so that keep's bound on
// what crosses is reached before the worker's own.
var hugePolicy = strings.Replace(roomyPolicy, `memory_limit = "32MiB"`, `memory_limit = "512MiB"`, 1)

func producerAttackWith(t *testing.T, policy, name, body string) kt.Run {
	t.Helper()
	e := newEnvWith(t, policy)
	before := storeBytes(e)
	wf := e.deploy(`export default Keep.workflow({ name: "` + name + `", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const big = "x".repeat(1 << 20)
    ` + body + `
  } } } })`)
	e.settle()
	r := e.open(wf)
	if n := len(e.inputs(wf)); n != 0 {
		t.Fatalf("%d inputs of the failed run were stored", n)
	}
	if n := len(e.events(wf, "a")); n != 0 {
		t.Fatalf("%d events of the failed run were stored", n)
	}
	if grew := storeBytes(e) - before; grew > 8<<20 {
		t.Fatalf("the store grew by %d bytes for a run that stored nothing", grew)
	}
	return r
}

func wantFailed(t *testing.T, r kt.Run, parts ...string) {
	t.Helper()
	if r.Status != kt.StatusFailedLogic {
		t.Fatalf("run %s: %s (want failed:logic)", r.Status, r.ErrorMessage)
	}
	for _, p := range parts {
		if !strings.Contains(r.ErrorMessage, p) {
			t.Fatalf("the run's error %q does not say %q", r.ErrorMessage, p)
		}
	}
}

// Issue 23 #4: 300 registerInput ids of 1 MiB once took 2.3 GiB of keep's
// memory and 946 MB of keep.db. Now the first one fails the run, naming
// the bound, its value and the call.
func TestRegisterInputIDIsBounded(t *testing.T) {
	t.Parallel()
	r := producerAttack(t, "bigids", `for (let i = 0; i < 300; i++) ctx.registerInput({ source: "system", type: "schedule", id: i + big, title: "T" + i })`)
	wantFailed(t, r, "producer p, ctx.registerInput: the id has 1048577 characters, over keep's bound of 500 characters")
}

func TestRegisterInputTitleIsBounded(t *testing.T) {
	t.Parallel()
	r := producerAttack(t, "bigtitle", `ctx.registerInput({ source: "system", type: "schedule", id: "1", title: big })`)
	wantFailed(t, r, "producer p, ctx.registerInput: the title has 1048576 characters, over keep's bound of 500 characters")
}

func TestInputsPerRunAreBounded(t *testing.T) {
	t.Parallel()
	r := producerAttack(t, "manyinputs", `for (let i = 0; i <= 10000; i++) ctx.registerInput({ source: "system", type: "schedule", id: "i" + i, title: "T" + i })`)
	wantFailed(t, r, "producer p, ctx.registerInput: this run registered 10001 inputs, over keep's bound of 10000 inputs")
}

// A messageId counts: it was outside the 64 MiB publish bound.
func TestMessageIDIsBounded(t *testing.T) {
	t.Parallel()
	r := producerAttack(t, "bigmsgid", `const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "T" })
    for (let i = 0; i < 300; i++) await ctx.publish("a", { messageId: i + big, inputId, payload: {} })`)
	wantFailed(t, r, "producer p, ctx.publish: the messageId has 1048577 characters, over keep's bound of 500 characters")
}

// One call's arguments, and all the calls of a run, are bounded whatever
// the call (a log line is cut to 1,000 characters, but the whole line
// crossed into keep's process first).
func TestHostCallBytesAreBounded(t *testing.T) {
	t.Parallel()
	r := producerAttackWith(t, hugePolicy, "bigcall", `ctx.log(big.repeat(17))`)
	wantFailed(t, r, "producer p, ctx.log: its arguments came to", "over keep's bound of 16 MiB")
}

func TestHostBytesPerRunAreBounded(t *testing.T) {
	t.Parallel()
	r := producerAttackWith(t, hugePolicy, "manycalls", `const line = big.repeat(15)
    for (let i = 0; i < 20; i++) ctx.log(line)`)
	wantFailed(t, r, "producer p, ctx.log: this run's calls moved", "over keep's bound of 256 MiB")
}

// getByIds with one id repeated 1,500 times once answered 1,500 copies of
// a 1 MiB event (5.7 GiB): ids are asked for once each, at most 1,000 of
// them, and the answer is bounded as it is read.
func consumerAttack(t *testing.T, name string, events int, prepare string) (*env, string) {
	t.Helper()
	e := newEnvWith(t, bigPolicy)
	wf := e.deploy(`export default Keep.workflow({ name: "` + name + `", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "Tick" })
    const big = "x".repeat(1000000)
    for (let i = 0; i < ` + strconv.Itoa(events) + `; i++) await ctx.publish("a", { messageId: "m" + i, inputId, payload: big })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"],
    async prepare(ctx) {
      const [e] = await ctx.peek("a", { limit: 1 }); if (!e) return { reservations: [] }
      ` + prepare + `
      return { reservations: [{ topic: "a", ids: [e.messageId] }], data: {} }
    },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/` + name + `", json: {} }) },
  }) },
})`)
	e.settle()
	return e, wf
}

func TestGetByIdsAsksForEachIDOnce(t *testing.T) {
	t.Parallel()
	e, wf := consumerAttack(t, "repeated", 1, `const evs = await ctx.getByIds("a", Array(1500).fill(e.messageId))
      if (evs.length !== 1) throw new Error("getByIds answered " + evs.length + " events")`)
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("%d writes at the sink, want 1", n)
	}
}

func TestGetByIdsIsBounded(t *testing.T) {
	t.Parallel()
	e, wf := consumerAttack(t, "manyids", 1, `const ids = []; for (let i = 0; i < 1001; i++) ids.push("m" + i)
      await ctx.getByIds("a", ids)`)
	wantFailed(t, e.open(wf), "consumer c, ctx.getByIds: the call asks for 1001 distinct ids, over keep's bound of 1000 distinct ids")
	if n := len(e.sink.Writes()); n != 0 {
		t.Fatalf("%d writes at the sink, want none", n)
	}
}

func TestGetByIdsAnswerIsBounded(t *testing.T) {
	t.Parallel()
	e, wf := consumerAttack(t, "bigread", 17, `const ids = []; for (let i = 0; i < 17; i++) ids.push("m" + i)
      await ctx.getByIds("a", ids)`)
	wantFailed(t, e.open(wf), "consumer c, ctx.getByIds: the events asked for come to at least", "over keep's bound of 16 MiB")
}

// A subkey and an item's id and title are bounded like an input's.
func TestSubkeyIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, bigPolicy)
	wf := e.deploy(hookScript("", `, subkey: "k".repeat(501)`))
	e.settle()
	wantFailed(t, e.open(wf), "ctx.http.request: the subkey has 501 characters, over keep's bound of 500 characters")
	if n := len(e.sink.Writes()); n != 0 {
		t.Fatalf("%d writes at the sink, want none", n)
	}
}

func TestItemTitleIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, bigPolicy)
	wf := e.deploy(`export default Keep.workflow({ name: "bigitem", tasks: { t: { schedule: { interval: "1h" }, run: async (ctx) => {
    await ctx.withItem("i:1", "x".repeat(1 << 20), async () => {})
  } } } })`)
	e.settle()
	wantFailed(t, e.open(wf), "task t, ctx.withItem: the title has 1048576 characters, over keep's bound of 500 characters")
	if n := len(e.inputs(wf)); n != 0 {
		t.Fatalf("%d items stored", n)
	}
}

// peek reads no further than its answer's bound: large events come fewer
// than limit (1,000 events of 1 MiB would have been 1 GiB in keep), and
// the rest in later runs.
func TestPeekOfLargeEventsIsBounded(t *testing.T) {
	t.Parallel()
	e, wf := consumerAttack(t, "bigpeek", 17, `const all = await ctx.peek("a", { limit: 1000 })
      if (all.length === 0 || all.length >= 17) throw new Error("peek answered " + all.length + " events")`)
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 17 {
		t.Fatalf("%d writes at the sink, want one per event (17)", n)
	}
}
