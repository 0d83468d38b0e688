package engine_test

import (
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/testsink"
)

// itemScript is ch 12/14's model as written: items from the inbox folder,
// two mutations per item (an http POST with a probe and a file), the
// second guarded by isDone as scripts should be.
func itemScript(extra, body string) string {
	return `export default Keep.workflow({
  name: "items", ` + extra + `
  tasks: {
    notify: Keep.task({ schedule: { interval: "1h" }, async run(ctx, state) {
      for (const f of await ctx.files.list({ dir: "inbox", glob: "*.json" })) {
        const id = f.name.replace(".json", "")
        await ctx.withItem("email:" + id, "Email " + id, async (ctx) => {
          ` + body + `
        })
      }
      return { runs: ((state && state.runs) || 0) + 1 }
    } }),
  },
})`
}

const twoMutations = `if (ctx.item.isDone) return
          const sent = await ctx.http.request({ method: "POST", url: "%SINK%/write/" + id, json: { id }, timeoutMs: 500, reconcile: { url: "%SINK%/writes/{idempotencyKey}" } })
          await ctx.files.write({ path: "out/" + id + ".txt", content: "sent " + sent.status })`

func TestItemScriptRunsEachItemOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeInbox(t, e, "a", "b")
	wf := e.deploy(itemScript("", twoMutations))
	e.settle()
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 2 {
		t.Fatalf("writes %d", n)
	}
	items := e.inputs(wf)
	if len(items) != 2 || items[0].Status != "done" || items[0].Key != "email:a" || items[0].Title != "Email a" {
		t.Fatalf("items %+v", items)
	}
	if outs := e.outputs(wf); len(outs) != 4 {
		t.Fatalf("outputs %d", len(outs))
	}
	// The task runs again (run-now): the handlers run, isDone is true, nothing is written.
	if _, err := runNow(e, wf); err != nil {
		t.Fatal(err)
	}
	e.settle()
	if n := len(e.sink.Writes()); n != 2 {
		t.Fatalf("writes after the second run %d", n)
	}
}

func TestMutationOnDoneItemIsLogicError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeInbox(t, e, "a")
	unguarded := strings.Replace(twoMutations, "if (ctx.item.isDone) return", "", 1)
	wf := e.deploy(itemScript("", unguarded))
	e.settle()
	e.noOpenRun(wf)
	if _, err := runNow(e, wf); err != nil {
		t.Fatal(err)
	}
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, "already done") {
		t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
	}
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes %d", n)
	}
	if it := e.inputs(wf); it[0].Status != "done" {
		t.Fatalf("the done item changed to %s", it[0].Status)
	}
}

func TestItemRules(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ body, want string }{
		"nested":           {`await ctx.withItem("x", "X", async () => {})`, "cannot be nested"},
		"outer ctx nested": {`await outer.withItem("x", "X", async () => {})`, "cannot be nested"},
		"throw caught":     {`try { throw new Error("boom") } finally {}`, `the handler of item "email:a" threw Error: boom`},
		"no title":         {``, ""},
	}
	for name, c := range cases {
		if c.want == "" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			writeInbox(t, e, "a")
			src := strings.Replace(itemScript("", c.body), "async run(ctx, state) {", "async run(ctx, state) { const outer = ctx;", 1)
			wf := e.deploy(src)
			e.settle()
			r := e.open(wf)
			if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, c.want) {
				t.Fatalf("run %s: %s (want %q)", r.Status, r.ErrorMessage, c.want)
			}
			if it := e.inputs(wf); len(it) != 1 || it[0].Status != "failed" {
				t.Fatalf("items %+v", it)
			}
		})
	}
	t.Run("mutation outside withItem", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		src := strings.Replace(itemScript("", ""), "async run(ctx, state) {", `async run(ctx, state) { await ctx.files.write({ path: "x", content: "y" });`, 1)
		wf := e.deploy(src)
		e.settle()
		if r := e.open(wf); r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, "outside withItem") {
			t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
		}
	})
	t.Run("concurrent withItem calls are serialized", func(t *testing.T) {
		t.Parallel()
		e := newEnvWith(t, roomyPolicy) // three serialized item writes: the time limit is not what is tested
		writeInbox(t, e, "a", "b", "c")
		src := strings.Replace(itemScript("", ""), `for (const f of await ctx.files.list({ dir: "inbox", glob: "*.json" })) {`,
			`const files = await ctx.files.list({ dir: "inbox", glob: "*.json" }); await Promise.all(files.map((f) => ctx.withItem("p:" + f.name, "P " + f.name, async (ctx) => { await ctx.files.write({ path: "par/" + f.name, content: ctx.item.id }) }))); for (const f of []) {`, 1)
		wf := e.deploy(src)
		e.settle()
		e.noOpenRun(wf)
		if it := e.inputs(wf); len(it) != 3 {
			t.Fatalf("items %+v", it)
		}
	})
}

// TestBlockedItemMutationStaysActionable: a retry that meets an indeterminate
// write of an earlier run must show that write on its card and let a person
// resolve it (the torture test found a retry loop here).
func TestBlockedItemMutationStaysActionable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeInbox(t, e, "a")
	e.sink.Queue(testsink.OK, testsink.TimeoutAfter)
	noProbe := strings.Replace(twoMutations, `await ctx.files.write({ path: "out/" + id + ".txt", content: "sent " + sent.status })`,
		`await ctx.http.request({ method: "POST", url: "%SINK%/write/b-" + id, json: { id }, timeoutMs: 300 })`, 1)
	wf := e.deploy(itemScript("", noProbe))
	e.settle()
	r := e.open(wf)
	// keep was killed after recording the unknown write but before recording
	// the run's status: at restart the run is crashed and gets replaced; the
	// replacement meets the same unknown write and blocks — on a card that names it.
	if err := e.k.Store.Update(e.ctx(), func(tx storeTx) error {
		r.Status = kt.StatusCrashed
		return tx.RunPut(r)
	}); err != nil {
		t.Fatal(err)
	}
	e.settle()
	r2 := e.open(wf)
	if r2.ID == r.ID {
		t.Fatal("the run was not retried")
	}
	cards, _ := report.Blocked(e.ctx(), e.k.Store, wf)
	if len(cards) != 1 || cards[0].MutationStatus != "indeterminate" || strings.Join(cards[0].Actions, ",") != "skip,didnt-happen,reprocess" { // safest first (issue 42)
		t.Fatalf("card %+v", cards)
	}
	e.resolve(r2.ID, kt.ResolveSkip)
	e.settle()
	e.noOpenRun(wf)
	if it := e.inputs(wf); it[0].Status != "skipped" {
		t.Fatalf("item %+v", it)
	}
}
