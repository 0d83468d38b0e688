package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/dts"
	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testrun"
)

// Every connector method declares its TypeScript types, and keep types
// prints the declarations of the registry's connectors: keep's own and
// keep.toml's custom ones.
func TestTypesDeclareEveryMethod(t *testing.T) {
	infos := connector.Describe(daemon.Registry(t.TempDir()))
	if missing := connector.Untyped(infos); len(missing) > 0 {
		t.Fatalf("keep types cannot declare these (give each a TypeScript type in its Doc):\n%s", strings.Join(missing, "\n"))
	}
	r := keep(t, "--data", t.TempDir(), "--config", filepath.Join("..", "..", "examples", "custom-connector", "keep.toml"), "types", "-o", "-")
	if r.code != 0 {
		t.Fatalf("keep types: exit %d\n%s", r.code, r.err)
	}
	for _, c := range infos {
		for _, m := range c.Methods {
			if !strings.Contains(r.out, "\n      "+m.Name+"(args") {
				t.Errorf("keep types declares no ctx.%s.%s", c.Name, m.Name)
			}
		}
	}
	if !strings.Contains(r.out, "namespace tickets {") || !strings.Contains(r.out, `{ source: "tickets"; type: "ticket" }`) {
		t.Fatalf("keep types leaves out the custom connector tickets of keep.toml:\n%s", r.out)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "keep.d.ts")
	w := keep(t, "--data", t.TempDir(), "--config", filepath.Join("..", "..", "examples", "custom-connector", "keep.toml"), "types", "-o", file)
	written, err := os.ReadFile(file)
	if w.code != 0 || err != nil || string(written) != r.out || !strings.Contains(w.out, `/// <reference path="`+filepath.ToSlash(file)+`" />`) {
		t.Fatalf("keep types -o FILE: exit %d, %v, the file as -o - prints it: %v\n%s", w.code, err, string(written) == r.out, w.out)
	}
	if r := keep(t, "--data", t.TempDir(), "--config", filepath.Join(dir, "none.toml"), "types", "-o", filepath.Join(dir, "keep.d.ts")); r.code == 0 {
		t.Fatalf("keep types with a keep.toml that does not exist: exit 0\n%s", r.out)
	}
}

// docs/keep.d.ts is what keep types writes for keep's own connectors;
// rewrite it with: go test ./internal/cli -run TestKeepDtsIsCurrent -update
func TestKeepDtsIsCurrent(t *testing.T) {
	const path = "../../docs/keep.d.ts"
	want := dts.Render(connector.Describe(daemon.Registry(t.TempDir())), dts.Options{Faults: testrun.Faults()})
	have, err := os.ReadFile(path)
	if *updateDocs {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil || string(have) != want {
		t.Fatalf("docs/keep.d.ts is not what keep types writes now (%v): run go test ./internal/cli -run TestKeepDtsIsCurrent -update", err)
	}
}

// tscOver writes the scripts into one folder (NAME.js) with the keep.d.ts
// keep types writes there (with keep.toml when given), and runs tsc over
// them: the scripts' own `// @ts-check` and reference lines decide what
// is checked, as in a person's editor. It returns tsc's output and
// whether it passed.
func tscOver(t *testing.T, scripts map[string]string, config string) (string, bool) {
	t.Helper()
	node, tsc := testbin.TypeScript(t)
	dir := t.TempDir()
	args := []string{"--data", t.TempDir(), "types", "-o", filepath.Join(dir, "keep.d.ts")}
	if config != "" {
		args = append([]string{"--config", config}, args...)
	}
	if r := keep(t, args...); r.code != 0 {
		t.Fatalf("keep types: exit %d\n%s", r.code, r.err)
	}
	var files []string
	for name, src := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name+".js"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, `"`+name+`.js"`)
	}
	// No checkJs: a script is checked because it says // @ts-check. No
	// DOM and no @types: the sandbox has neither.
	tsconfig := `{"compilerOptions": {"allowJs": true, "noEmit": true, "target": "es2022", "module": "es2022", "lib": ["es2022"], "types": []}, "files": [` + strings.Join(files, ", ") + `]}`
	if err := os.WriteFile(filepath.Join(dir, "tsconfig.json"), []byte(tsconfig), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, tsc, "-p", "tsconfig.json", "--pretty", "false")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if _, exit := err.(*exec.ExitError); err != nil && !exit {
		t.Fatalf("run tsc: %v", err)
	}
	return string(out), err == nil
}

// Every example, and its test file, type-checks clean against the
// keep.d.ts keep types writes in its folder (issue 26 #3).
func TestTypesCheckTheExamples(t *testing.T) {
	dirs, err := filepath.Glob("../../examples/*/workflow.js")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range dirs {
		dir := filepath.Dir(f)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			scripts := map[string]string{}
			for name, file := range map[string]string{"workflow": f, "workflow.test": filepath.Join(dir, "workflow.test.js")} {
				src, err := os.ReadFile(file)
				if os.IsNotExist(err) && name == "workflow.test" {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(string(src), "// @ts-check\n/// <reference path=\"./keep.d.ts\" />\n") {
					t.Fatalf("%s does not begin with // @ts-check and the reference to ./keep.d.ts", file)
				}
				scripts[name] = string(src)
			}
			config := filepath.Join(dir, "keep.toml")
			if _, err := os.Stat(config); err != nil {
				config = filepath.Join(t.TempDir(), "keep.toml")
				if err := os.WriteFile(config, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if out, ok := tscOver(t, scripts, config); !ok {
				t.Fatalf("tsc finds type errors in %s:\n%s", dir, out)
			}
		})
	}
}

// A script that breaks the phase rules, or misspells a parameter, fails
// tsc with an error that names the call; the same script written right
// passes, so the errors are the mistakes' and nothing else's.
func TestTypesRefuseWhatTheEngineRefuses(t *testing.T) {
	const script = `// @ts-check
/// <reference path="./keep.d.ts" />
export default Keep.workflow({
  name: "wrong",
  topics: { a: {}, b: {} },
  producers: {
    p: { publishes: ["a"], schedule: { interval: "1m" }, handler: async (ctx) => {
      const inputId = ctx.registerInput({ source: "files", type: "file", id: 1, title: "t" });
      await ctx.publish("a", { inputId, payload: {} });
      PRODUCER
    } },
  },
  consumers: {
    c: Keep.consumer({
      subscribe: ["a"],
      publishes: ["b"],
      async prepare(ctx) {
        const [e] = await ctx.peek("a");
        PREPARE
        return { reservations: [{ topic: "a", ids: [e.messageId] }], data: e.payload };
      },
      async mutate(ctx, prepared) {
        MUTATE
      },
      async next(ctx, prepared, r) {
        if (r.status === "applied") await ctx.publish("b", { messageId: "m:" + prepared.data.id, payload: r.result });
        NEXT
      },
    }),
  },
  tasks: {
    t: Keep.task({ schedule: { cron: "*/5 * * * *" }, async run(ctx) {
      await ctx.withItem("i", "t", async (ctx) => {
        if (!ctx.item.isDone) await ctx.files.write({ path: "x", content: "y" });
      });
      TASK
    } }),
  },
});
`
	fill := func(m map[string]string) string {
		s := script
		for _, k := range []string{"PRODUCER", "PREPARE", "MUTATE", "NEXT", "TASK"} {
			s = strings.Replace(s, k, m[k], 1)
		}
		return s
	}
	right := fill(map[string]string{
		"PREPARE": `await ctx.http.request({ url: "https://x.example/orders" });`,
		"MUTATE":  `await ctx.files.read({ path: "x" }); await ctx.files.write({ path: "x", content: "y" });`,
	})
	cases := []struct{ name, where, code, want string }{
		{"peek in mutate", "MUTATE", `await ctx.peek("a");`, "Property 'peek' does not exist on type 'MutateCtx'"},
		{"misspelled param", "MUTATE", `await ctx.files.write({ pth: "x", content: "y" });`, "'pth' does not exist in type 'WriteArgs'"},
		{"write in prepare", "PREPARE", `await ctx.files.write({ path: "x", content: "y" });`, "Property 'write' does not exist on type"},
		{"http write in prepare", "PREPARE", `await ctx.http.request({ method: "POST", url: "https://x.example" });`, `Type '"POST"' is not assignable`},
		{"list read in mutate", "MUTATE", `await ctx.files.list({});`, "Property 'list' does not exist on type"},
		{"connector in next", "NEXT", `await ctx.files.read({ path: "x" });`, "Property 'files' does not exist on type 'NextCtx'"},
		{"inputId in next", "NEXT", `await ctx.publish("b", { messageId: "m", inputId: "x" });`, "'inputId' does not exist in type"},
		{"registerInput in prepare", "PREPARE", `ctx.registerInput({ source: "files", type: "file", id: 1, title: "t" });`, "Property 'registerInput' does not exist on type 'PrepareCtx'"},
		{"publish without inputId in a producer", "PRODUCER", `await ctx.publish("a", { messageId: "m" });`, "Property 'inputId' is missing"},
		{"unknown source", "PRODUCER", `ctx.registerInput({ source: "files", type: "folder", id: 1, title: "t" });`, `Type '"folder"' is not assignable`},
		{"write outside withItem", "TASK", `await ctx.files.write({ path: "x", content: "y" });`, "Property 'write' does not exist on type"},
		{"a write's result in mutate", "MUTATE", `const r = await ctx.files.write({ path: "x", content: "y" }); ctx.log(r.sha256);`, "Property 'sha256' does not exist on type 'void'"},
	}
	scripts := map[string]string{"right": right}
	for i, c := range cases {
		scripts[fmt4(i)] = fill(map[string]string{c.where: c.code})
	}
	out, _ := tscOver(t, scripts, "")
	// tsc's errors begin NAME.js(line,col); a line that goes on an error
	// is indented.
	byScript, last := map[string]string{}, "?"
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, ".js("); i > 0 && !strings.HasPrefix(line, " ") {
			last = line[:i]
		} else if !strings.HasPrefix(line, " ") {
			last = "?"
		}
		if line != "" {
			byScript[last] += line + "\n"
		}
	}
	if byScript["?"] != "" {
		t.Fatalf("tsc says:\n%s", out)
	}
	if e := byScript["right"]; e != "" {
		t.Fatalf("tsc finds errors in the script written right:\n%s", e)
	}
	for i, c := range cases {
		got := byScript[fmt4(i)]
		if !strings.Contains(got, c.want) {
			t.Errorf("%s: tsc says\n%s\nwant an error containing %q", c.name, got, c.want)
		}
		if n := strings.Count(got, "error TS"); n != 1 {
			t.Errorf("%s: %d errors, want the one mistake's:\n%s", c.name, n, got)
		}
	}
}

func fmt4(i int) string { return "case" + string(rune('a'+i)) }

// docs/scripts.md's "ctx in every phase" is keeptype's table, the one the
// engine enforces and keep types declares; rewrite it with:
// go test ./internal/cli -run TestPhaseTableIsCurrent -update
func TestPhaseTableIsCurrent(t *testing.T) {
	want, err := dts.PhaseTable()
	if err != nil {
		t.Fatal(err)
	}
	testbin.CurrentDoc(t, "../../docs/scripts.md", "<!-- generated from keeptype's ctx table (dts.PhaseTable): begin -->\n",
		"<!-- generated from keeptype's ctx table (dts.PhaseTable): end -->", want, *updateDocs, "go test ./internal/cli -run TestPhaseTableIsCurrent -update")
}

// A test file's mistakes that keep test refuses at its line are type
// errors too: a fault keep test does not know, a method no connector has,
// arguments the method does not take.
func TestTypesRefuseAWrongTestFile(t *testing.T) {
	const test = `// @ts-check
/// <reference path="./keep.d.ts" />
export default Keep.test({
  workflow: "./workflow.js",
  cases: {
    "one": {
      answers: { ANSWERS },
      faults: { "files.write": [{ args: { path: "out/1.json" }, fault: FAULT }] },
      events: { "order.placed": [{ id: "1", title: "Order 1", payload: { id: 1 } }] },
      expect: { writes: [{ tool: TOOL, target: "file out/1.json" }], inputs: [{ title: "Order 1", status: "done" }], runs: { committed: 2 } },
    },
  },
});
`
	fill := func(answers, fault, tool string) string {
		return strings.NewReplacer("ANSWERS", answers, "FAULT", fault, "TOOL", tool).Replace(test)
	}
	right := fill(`"files.list": [{ args: { dir: "incoming" }, answer: [{ path: "incoming/1.json" }] }]`, `"timeoutAfterApply"`, `"files.write"`)
	cases := []struct{ name, src, want string }{
		{"unknown fault", fill(`"files.list": [{ answer: [] }]`, `"timeout_after"`, `"files.write"`), `Type '"timeout_after"' is not assignable to type 'TestFault'`},
		{"unknown method", fill(`"files.lst": [{ answer: [] }]`, `"timeout"`, `"files.write"`), `'"files.lst"' does not exist in type 'TestAnswers'`},
		{"a read as a write", fill(`"files.list": [{ answer: [] }]`, `"timeout"`, `"files.read"`), `Type '"files.read"' is not assignable to type 'WriteMethod'`},
		{"an argument the method does not take", fill(`"files.list": [{ args: { folder: "x" }, answer: [] }]`, `"timeout"`, `"files.write"`), `'folder' does not exist in type 'Partial<ListArgs>'`},
		{"an input status keep has not", strings.Replace(right, `status: "done"`, `status: "finished"`, 1), `Type '"finished"' is not assignable to type 'TestItemStatus'`},
		{"a run status keep has not", strings.Replace(right, `runs: { committed: 2 }`, `runs: { done: 2 }`, 1), `'done' does not exist in type`},
	}
	scripts := map[string]string{"right": right}
	for i, c := range cases {
		scripts[fmt4(i)] = c.src
	}
	out, _ := tscOver(t, scripts, "")
	if strings.Contains(out, "right.js(") {
		t.Fatalf("tsc finds errors in the test file written right:\n%s", out)
	}
	for i, c := range cases {
		var got []string
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, fmt4(i)+".js(") {
				got = append(got, line)
			}
		}
		if len(got) != 1 || !strings.Contains(got[0], c.want) {
			t.Errorf("%s: tsc says %q, want one error containing %q", c.name, got, c.want)
		}
	}
}

// docs/scripts.md's examples that keep's tests run (each marked
// <!-- docs example: NAME -->) type-check clean too, as a reader who
// copies one into a file with the two lines at its top would see it.
func TestTypesCheckTheDocsExamples(t *testing.T) {
	b, err := os.ReadFile("../../docs/scripts.md")
	if err != nil {
		t.Fatal(err)
	}
	const mark, head = "<!-- docs example: ", "// @ts-check\n/// <reference path=\"./keep.d.ts\" />\n"
	scripts := map[string]string{}
	for rest := string(b); ; {
		i := strings.Index(rest, mark)
		if i < 0 {
			break
		}
		rest = rest[i+len(mark):]
		name := rest[:strings.Index(rest, " -->")]
		start := strings.Index(rest, "```js\n")
		end := strings.Index(rest[start+6:], "```\n")
		if start < 0 || end < 0 {
			t.Fatalf("docs example %s has no ```js block after its mark", name)
		}
		scripts[name] = head + rest[start+6:start+6+end]
	}
	if len(scripts) < 2 {
		t.Fatalf("found %d docs examples in docs/scripts.md", len(scripts))
	}
	if out, ok := tscOver(t, scripts, ""); !ok {
		t.Fatalf("tsc finds type errors in docs/scripts.md's examples:\n%s", out)
	}
}
