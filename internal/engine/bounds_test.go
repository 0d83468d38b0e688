package engine_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/keep-run/keep/internal/apitype"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
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
// memory and 946 MB of keep.db. Issue 40 #2: failing the run for it made
// one outside message (a mail, a file) stop its whole source. An id over
// keep's bound is named by its hash — the same id always the same name —
// and the trace says so; nothing of the 1 MiB is stored.
func TestRegisterInputIDOverTheBoundIsItsHash(t *testing.T) {
	t.Parallel()
	e, wf, d := producerCommits(t, "bigids", `for (let i = 0; i < 100; i++) {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id: (i % 50) + big, title: "T" + (i % 50) })
      await ctx.publish("a", { inputId, payload: {} })
    }`)
	ins := e.inputs(wf)
	if len(ins) != 50 {
		t.Fatalf("%d inputs, want 50 (100 registrations of 50 long ids)", len(ins))
	}
	for _, in := range ins {
		if want, _ := kt.BoundedID(strings.TrimPrefix(in.Title, "T") + strings.Repeat("x", 1<<20)); in.ExternalID != want {
			t.Fatalf("input %q has the id %q, want its hash %q", in.Title, in.ExternalID, want)
		}
	}
	wantTraced(t, d, "producer p, ctx.registerInput: the id has 1048577 characters, more than keep's bound of 500: keep names it by its hash, sha256:")
}

// Issue 40 #2: one long mail subject made a title over keep's bound and
// failed the producer. A title is display: shortened, on a rune
// boundary, ending in an ellipsis, and the trace says so.
func TestRegisterInputTitleOverTheBoundIsShortened(t *testing.T) {
	t.Parallel()
	e, wf, d := producerCommits(t, "bigtitle", `const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "é" + big })
    await ctx.publish("a", { inputId, payload: {} })`)
	ins := e.inputs(wf)
	if len(ins) != 1 {
		t.Fatalf("%d inputs, want 1", len(ins))
	}
	want, _ := kt.ShortTitle("é" + strings.Repeat("x", 1<<20))
	if got := ins[0].Title; got != want || len(got) > kt.MaxTitleChars || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Fatalf("the title is %q (%d bytes), want %q", got, len(got), want)
	}
	wantTraced(t, d, "producer p, ctx.registerInput: the title has 1048578 characters, more than keep's bound of 500: shortened to ")
}

// producerCommits deploys a producer whose handler is body, runs it, and
// returns its committed run's detail, after checking that the store grew
// by no more than a few MiB.
func producerCommits(t *testing.T, name, body string) (*env, string, apitype.RunDetail) {
	t.Helper()
	e := newEnvWith(t, bigPolicy)
	before := storeBytes(e)
	wf := e.deploy(`export default Keep.workflow({ name: "` + name + `", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const big = "x".repeat(1 << 20)
    ` + body + `
  } } } })`)
	e.settle()
	if grew := storeBytes(e) - before; grew > 8<<20 {
		t.Fatalf("the store grew by %d bytes", grew)
	}
	for _, r := range e.runs(wf) {
		if r.Status != string(kt.StatusCommitted) {
			t.Fatalf("the producer's run is %s: %v", r.Status, r.Error)
		}
		d, err := report.ShowRun(e.ctx(), e.k.Store, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		return e, wf, d
	}
	t.Fatal("no run of the producer")
	return nil, "", apitype.RunDetail{}
}

// wantTraced checks that a line of the run's trace says text.
func wantTraced(t *testing.T, d apitype.RunDetail, text string) {
	t.Helper()
	for _, l := range d.Trace {
		if strings.Contains(l.Text, text) {
			return
		}
	}
	t.Fatalf("no line of the trace says %q: %+v", text, d.Trace)
}

func TestInputsPerRunAreBounded(t *testing.T) {
	t.Parallel()
	r := producerAttack(t, "manyinputs", `for (let i = 0; i <= 10000; i++) ctx.registerInput({ source: "system", type: "schedule", id: "i" + i, title: "T" + i })`)
	wantFailed(t, r, "producer p, ctx.registerInput: this run registered 10001 inputs, over keep's bound of 10000 inputs")
}

// A messageId counts: it was outside the 64 MiB publish bound. One over
// keep's bound is named by its hash, as an input's id is.
func TestMessageIDOverTheBoundIsItsHash(t *testing.T) {
	t.Parallel()
	e, wf, d := producerCommits(t, "bigmsgid", `const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "T" })
    for (let i = 0; i < 100; i++) await ctx.publish("a", { messageId: (i % 3) + big, inputId, payload: {} })`)
	evs := e.events(wf, "a")
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3", len(evs))
	}
	for _, ev := range evs {
		if !strings.HasPrefix(ev.MessageID, "sha256:") || len(ev.MessageID) > kt.MaxIDChars {
			t.Fatalf("an event's messageId is %q", ev.MessageID)
		}
	}
	wantTraced(t, d, "producer p, ctx.publish: the messageId has 1048577 characters, more than keep's bound of 500: keep names it by its hash")
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

// A subkey and an item's id and title are bounded like an input's: an
// id by its hash, a title shortened.
func TestSubkeyOverTheBoundIsItsHash(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, bigPolicy)
	wf := e.deploy(hookScript("", `, subkey: "k".repeat(501)`))
	e.settle()
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("%d writes at the sink, want 1", n)
	}
}

func TestItemTitleOverTheBoundIsShortened(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, bigPolicy)
	wf := e.deploy(`export default Keep.workflow({ name: "bigitem", tasks: { t: { schedule: { interval: "1h" }, run: async (ctx) => {
    await ctx.withItem("i:" + "d".repeat(600), "x".repeat(1 << 20), async () => {})
  } } } })`)
	e.settle()
	e.noOpenRun(wf)
	ins := e.inputs(wf)
	if len(ins) != 1 || len(ins[0].Title) > kt.MaxTitleChars || !strings.HasSuffix(ins[0].Title, "…") || !strings.HasPrefix(ins[0].Key, "sha256:") {
		t.Fatalf("items: %+v", ins)
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
