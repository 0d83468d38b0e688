package cli

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/fake/llmfake"
)

const plannedScript = `export default Keep.workflow({
  name: "notes",
  topics: { "note": {} },
  producers: { p: { publishes: ["note"], schedule: { interval: "5m" }, handler: async (ctx, state) => {
    for (const f of await ctx.files.list({ dir: "in" })) {
      const inputId = ctx.registerInput({ source: "files", type: "file", id: f.name, title: "Note " + f.name })
      await ctx.publish("note", { messageId: %ID%, inputId, payload: { name: f.name } })
    }
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["note"],
    async prepare(ctx) { const [e] = await ctx.peek("note"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "note", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.files.write({ path: "out/" + p.data.name, content: "seen" }) },
  }) },
})`

// plannedTest is the test a Planner's answer carries; writes is what its
// case expects.
func plannedTest(file, writes string) string {
	return `export default Keep.test({
  workflow: "./` + file + `",
  cases: {
    "a note is copied once": {
      answers: { "files.list": [{ args: { dir: "in" }, answer: [{ path: "in/a", name: "a" }] }] },
      faults: { "files.write": [{ fault: "timeoutAfterApply" }] },
      expect: { writes: ` + writes + `, inputs: [{ title: "Note a", status: "done" }] },
    },
  },
})`
}

func planned(id string) string { return plannedFor(id, "notes.js") }

func plannedFor(id, file string) string {
	return "Here it is.\n\n```js\n" + strings.Replace(plannedScript, "%ID%", id, 1) + "\n```\n\nIts test:\n\n```js\n" +
		plannedTest(file, `[{ tool: "files.write", target: "file out/a" }]`) + "\n```\n\nIt copies notes."
}

func TestPlanWritesAValidReviewedScript(t *testing.T) {
	fake := llmfake.New(
		llmfake.Reply{Content: "I would poll the folder.", Tokens: 100},
		llmfake.Reply{Content: "```js\nexport default Keep.workflow({ name: \"x\" })\n```", Tokens: 100},
		llmfake.Reply{Content: planned(`"n-" + Date.now()`), Tokens: 100},
		llmfake.Reply{Content: planned(`f.name`), Tokens: 100},
	)
	srv := httptest.NewServer(fake.Handler())
	defer srv.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keep.toml")
	os.WriteFile(cfg, []byte("[llm]\nbase_url = \""+srv.URL+"/v1\"\nmodel = \"fake\"\n\n[maintainer]\nmax_attempts = 4\n"), 0o644)
	out := filepath.Join(dir, "notes.js")
	r := keep(t, "plan", "copy each note in in/ to out/", "-o", out, "--config", cfg, "--data", filepath.Join(dir, "data"))
	if r.code != 0 || !strings.Contains(r.out, "wrote "+out+" (valid; 4 attempts, 400 tokens)") || !strings.Contains(r.out, "It copies notes.") {
		t.Fatalf("keep plan: %d\n%s%s", r.code, r.out, r.err)
	}
	reqs := fake.Requests()
	if len(reqs) != 4 || !strings.Contains(reqs[1].Messages[len(reqs[1].Messages)-1].Text(), "no fenced code block") ||
		!strings.Contains(reqs[2].Messages[len(reqs[2].Messages)-1].Text(), "keep validate") ||
		!strings.Contains(reqs[3].Messages[len(reqs[3].Messages)-1].Text(), "built from the time or chance") {
		t.Fatalf("the refusals were not fed back: %+v", reqs)
	}
	if r := keep(t, "validate", out); r.code != 0 {
		t.Fatalf("the saved script: %d %s %s", r.code, r.out, r.err)
	}
	// --revise sends the version in place and says when item ids change.
	if r := keep(t, "deploy", "--grant", "--data", filepath.Join(dir, "data"), out); r.code != 0 {
		t.Fatalf("deploy: %s %s", r.out, r.err)
	}
	// A first answer for another workflow is refused (deploying it would
	// start a second workflow beside this one) and the model is told why.
	fake2 := llmfake.New(llmfake.Reply{Content: strings.Replace(plannedFor(`"note:" + f.name`, "notes2.js"), `name: "notes"`, `name: "memos"`, 1), Tokens: 50},
		llmfake.Reply{Content: plannedFor(`"note:" + f.name`, "notes2.js"), Tokens: 50})
	srv2 := httptest.NewServer(fake2.Handler())
	defer srv2.Close()
	os.WriteFile(cfg, []byte("[llm]\nbase_url = \""+srv2.URL+"/v1\"\nmodel = \"fake\"\n"), 0o644)
	r = keep(t, "plan", "prefix the ids", "--revise", "notes", "-o", filepath.Join(dir, "notes2.js"), "--config", cfg, "--data", filepath.Join(dir, "data"))
	if r.code != 0 || !strings.Contains(r.out, "--accept-orphans") || !strings.Contains(r.out, "keep deploy --major") {
		t.Fatalf("keep plan --revise: %d\n%s%s", r.code, r.out, r.err)
	}
	if req := fake2.Requests(); len(req) != 2 || !strings.Contains(req[0].Messages[1].Text(), "messageId: f.name") {
		t.Fatal("the version in place was not sent")
	} else if last := req[1].Messages[len(req[1].Messages)-1].Text(); !strings.Contains(last, `it is named "memos", but it revises the workflow "notes"`) {
		t.Fatalf("the other workflow's script was not refused: %q", last)
	}
	if r := keep(t, "plan", "x", "-o", out, "--config", cfg); r.code == 0 || !strings.Contains(r.err, "exists") {
		t.Fatalf("an existing file: %d %s", r.code, r.err)
	}
	empty := filepath.Join(dir, "empty.toml")
	os.WriteFile(empty, []byte("[policy]\n"), 0o644)
	t.Setenv("KEEP_LLM_BASE_URL", "")
	if r := keep(t, "plan", "x", "--config", empty); r.code == 0 || !strings.Contains(r.err, "[llm] base_url and model") {
		t.Fatalf("without a model: %d %s", r.code, r.err)
	}
}

// Issue 22 #10: time or chance in any part of an id is refused — inside a
// template's ${}, or in a name the id is built from — and the refusal
// says which, so the model can answer with the data's own ids.
func TestPlanRefusesTimeAndChanceInAnyPartOfAnID(t *testing.T) {
	fake := llmfake.New(
		llmfake.Reply{Content: planned("`f:${f.name}:${Date.now()}`"), Tokens: 10},
		llmfake.Reply{Content: strings.Replace(planned("`f:${f.name}:${stamp}`"), "for (const f of", "const stamp = new Date().toISOString()\n    for (const f of", 1), Tokens: 10},
		llmfake.Reply{Content: planned("`f:${f.name}:${ctx.random()}`"), Tokens: 10},
		llmfake.Reply{Content: planned("`f:${f.name}`"), Tokens: 10},
	)
	srv := httptest.NewServer(fake.Handler())
	defer srv.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keep.toml")
	os.WriteFile(cfg, []byte("[llm]\nbase_url = \""+srv.URL+"/v1\"\nmodel = \"fake\"\n\n[maintainer]\nmax_attempts = 4\n"), 0o644)
	out := filepath.Join(dir, "notes.js")
	r := keep(t, "plan", "copy each note in in/ to out/", "-o", out, "--config", cfg, "--data", filepath.Join(dir, "data"))
	if r.code != 0 || !strings.Contains(r.out, "4 attempts") {
		t.Fatalf("keep plan: %d\n%s%s", r.code, r.out, r.err)
	}
	reqs := fake.Requests()
	for i, want := range []string{"line 7: producers.p.handler: the messageId `f:${f.name}:${Date.now()}` is built from the time or chance (Date.now)",
		"line 8: producers.p.handler: the messageId `f:${f.name}:${stamp}` is built from the time or chance (new Date())",
		"is built from the time or chance (ctx.random)"} {
		if got := reqs[i+1].Messages[len(reqs[i+1].Messages)-1].Text(); !strings.Contains(got, want) {
			t.Fatalf("refusal %d: %s\nwant %q", i+1, got, want)
		}
	}
	saved, _ := os.ReadFile(out)
	if strings.Contains(string(saved), "Date") || strings.Contains(string(saved), "random") {
		t.Fatalf("saved a script built from the time:\n%s", saved)
	}
}

// keep plan writes the script's test beside it, and only one that passes
// on the script: an answer without a test, or whose test fails, is
// refused and the model told why.
func TestPlanWritesATestThatPasses(t *testing.T) {
	script := "```js\n" + strings.Replace(plannedScript, "%ID%", "f.name", 1) + "\n```\n"
	fake := llmfake.New(
		llmfake.Reply{Content: script + "It copies notes.", Tokens: 10},
		llmfake.Reply{Content: script + "\n```js\n" + plannedTest("notes.js", `[{ tool: "files.write" }, { tool: "files.write" }]`) + "\n```\n", Tokens: 10},
		llmfake.Reply{Content: planned("f.name"), Tokens: 10},
	)
	srv := httptest.NewServer(fake.Handler())
	defer srv.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keep.toml")
	os.WriteFile(cfg, []byte("[llm]\nbase_url = \""+srv.URL+"/v1\"\nmodel = \"fake\"\n\n[maintainer]\nmax_attempts = 3\n"), 0o644)
	out := filepath.Join(dir, "notes.js")
	r := keep(t, "plan", "copy each note in in/ to out/", "-o", out, "--config", cfg, "--data", filepath.Join(dir, "data"))
	testOut := filepath.Join(dir, "notes.test.js")
	if r.code != 0 || !strings.Contains(r.out, "and its test "+testOut+" (passes: keep test "+testOut+")") {
		t.Fatalf("keep plan: %d\n%s%s", r.code, r.out, r.err)
	}
	reqs := fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	if got := reqs[0].Messages[1].Text(); !strings.Contains(got, `its test starts export default Keep.test({ workflow: "./notes.js"`) {
		t.Fatalf("the request does not say what the test names: %s", got)
	}
	for i, want := range []string{"no second fenced code block with the script's test",
		`its test fails (keep test): case "a note is copied once" fails: expect.writes (line 7): expected 2 writes, got 1`} {
		if got := reqs[i+1].Messages[len(reqs[i+1].Messages)-1].Text(); !strings.Contains(got, want) {
			t.Fatalf("refusal %d: %s\nwant %q", i+1, got, want)
		}
	}
	if r := keep(t, "test", testOut); r.code != 0 || !strings.Contains(r.out, "ok    a note is copied once") {
		t.Fatalf("keep test on the saved test: %d %s %s", r.code, r.out, r.err)
	}
}
