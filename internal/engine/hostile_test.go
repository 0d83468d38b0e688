package engine_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
)

func hostileScript(name, body string) string {
	return `export default Keep.workflow({
  name: "` + name + `",
  topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "Tick" })
    await ctx.publish("a", { messageId: "1", inputId, payload: {} })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"],
    async prepare(ctx) {
      const [e] = await ctx.peek("a"); if (!e) return { reservations: [] }
      ` + body + `
      return { reservations: [{ topic: "a", ids: [e.messageId] }], data: {} }
    },
    async mutate(ctx, p) { await ctx.http.request({ method: "POST", url: "%SINK%/write/` + name + `", json: {} }) },
  }) },
})`
}

func TestHostileHandlerFailsOnlyItsOwnRun(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ body, want string }{
		"cpu loop":        {`while (true) {}`, "time limit"},
		"cpu loop caught": {`try { while (true) {} } catch (e) {}`, "time limit"},
		// a built-in's native loop that calls nothing (aw43): it once held
		// its thread against Go's scheduler and collector
		"native loop":        {`Array.prototype.includes.call({ length: 2 ** 53 }, 1)`, "time limit"},
		"memory bomb":        {`const a = []; while (true) a.push("x".repeat(100000) + a.length)`, "out of memory"},
		"object graph":       {`let o = {}; for (;;) o = { o, a: [1, 2, 3] }`, "out of memory"},
		"never resolves":     {`await new Promise(() => {})`, "never finished"},
		"huge result":        {`return { reservations: [{ topic: "a", ids: [e.messageId] }], data: "x".repeat(2000000) }`, "more than the limit"},
		"non-json result":    {`return { reservations: [{ topic: "a", ids: [e.messageId] }], data: { f() {} } }`, "is a function"},
		"reach the host":     {`Function("return this")().process.exit(1)`, "cannot read property 'exit'"},
		"tamper with ctx":    {`ctx.http = null; ctx.peek = null; "use strict"; Object.defineProperty(ctx, "x", { value: 1 })`, "read-only"},
		"throw non-error":    {`throw { code: 42 }`, `{"code":42}`},
		"deep recursion":     {`const f = (n) => f(n + 1) + 1; f(0)`, "stack overflow"},
		"floods of promises": {`const ps = []; for (let i = 0; i < 1e7; i++) ps.push(Promise.resolve(i)); await Promise.all(ps)`, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if !strings.Contains(c.want, "time limit") && c.want != "" {
				e = newEnvWith(t, roomyPolicy)
			}
			deploy := e.deploy
			if strings.Contains(c.body, "defineProperty(ctx") {
				// validation refuses ctx handed to a function it cannot
				// see; the run-time freeze stands behind it.
				deploy = e.deployUnchecked
			}
			bad := deploy(hostileScript("bad", c.body))
			good := e.deploy(hostileScript("good", ""))
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); e.settle() }()
			wg.Wait()
			e.noOpenRun(good)
			found := false
			for _, w := range e.sink.Writes() {
				if strings.HasSuffix(w.Path, "/good") {
					found = true
				}
				if strings.HasSuffix(w.Path, "/bad") {
					t.Fatalf("the hostile workflow wrote to the sink")
				}
			}
			if !found {
				t.Fatal("the healthy workflow did not run next to the hostile one")
			}
			r := e.open(bad)
			if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, c.want) {
				t.Fatalf("hostile run: %s: %s (want failed:logic containing %q)", r.Status, r.ErrorMessage, c.want)
			}
		})
	}
}

// TestHostileCorpus runs every script of testdata/hostile as a real
// workflow next to a healthy one. Each must fail only its own run, as
// failed:logic, with a message containing its "// expect:" line; the
// healthy workflow must finish, and the hostile one must write nothing
// before the phase that is hostile.
func TestHostileCorpus(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../testdata/hostile/*.js")
	if err != nil || len(files) < 30 {
		t.Fatalf("corpus: %d files, %v", len(files), err)
	}
	for _, f := range files {
		f := f
		t.Run(strings.TrimSuffix(filepath.Base(f), ".js"), func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			m := regexp.MustCompile(`(?m)^// expect: (.+)$`).FindSubmatch(src)
			if m == nil {
				t.Fatalf("%s has no // expect: line", f)
			}
			want := string(m[1])
			e := newEnv(t)
			if !strings.Contains(want, "time limit") {
				e = newEnvWith(t, roomyPolicy)
			}
			// A script the analysis refuses is refused by validation
			// with its "// refused:" line; deployed regardless, the
			// run-time checks behind the analysis must still stop it.
			var bad string
			if r := regexp.MustCompile(`(?m)^// refused: (.+)$`).FindSubmatch(src); r != nil {
				_, _, err := e.k.Engine.Check("wf.js", string(src))
				if err == nil || !strings.Contains(err.Error(), string(r[1])) {
					t.Fatalf("validation: %v\nwant an error containing %q", err, r[1])
				}
				bad = e.deployUnchecked(string(src))
			} else {
				bad = e.deploy(string(src))
			}
			good := e.deploy(hostileScript("good", ""))
			e.settle()
			e.noOpenRun(good)
			r := e.open(bad)
			// "a | b": either message is right (which one comes first can
			// depend on the machine's speed against a time limit).
			matches := false
			for _, alt := range strings.Split(want, " | ") {
				matches = matches || strings.Contains(r.ErrorMessage, alt)
			}
			if r.Status != kt.StatusFailedLogic || !matches {
				t.Fatalf("hostile run %s (%s in %s): %s\nwant failed:logic containing %q", r.Handler, r.Status, r.Phase, r.ErrorMessage, want)
			}
			// A hostile next comes after mutate's write, which happened
			// (a run that reserved nothing does not run next: issue 24 #6);
			// anything hostile before it stops the write.
			if _, err := os.Stat(filepath.Join(e.dir, "files", "hostile.txt")); err == nil && r.Phase != kt.PhaseEmitting {
				t.Fatalf("the hostile workflow wrote its file (failed in %s)", r.Phase)
			}
			found := false
			for _, w := range e.sink.Writes() {
				found = found || strings.HasSuffix(w.Path, "/good")
			}
			if !found {
				t.Fatal("the healthy workflow did not write")
			}
		})
	}
}
