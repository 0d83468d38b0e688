// Package keeptest runs `keep test` through the binary as a script's
// author does: every example's test file passes, and a failing one says
// which assertion failed and why, with exit status 1 (2 for a test file
// keep cannot run).
package keeptest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testbin"
)

var keepBin string

func TestMain(m *testing.M) { testbin.Main(m, &keepBin) }

func repoRoot() string {
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", "..")
}

// keep runs the binary in dir and returns its exit status and output.
func keep(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(keepBin, args...)
	cmd.Dir = dir
	r := testbin.Run(t, cmd)
	return r.Code, r.Out, r.Err
}

// TestExamplesPassTheirTests: each example ships a test file, and
// `keep test` passes every case of it.
func TestExamplesPassTheirTests(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(), "examples", "*", "workflow.test.js"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d example test files, want at least quickstart's and one with a fault case", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(filepath.Dir(f)), func(t *testing.T) {
			t.Parallel()
			code, out, errOut := keep(t, t.TempDir(), "test", f, "--json")
			if code != 0 {
				t.Fatalf("keep test %s: exit %d\n%s%s", f, code, out, errOut)
			}
			var res struct {
				Cases []struct {
					Name string
					OK   bool
				}
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if len(res.Cases) == 0 {
				t.Fatalf("no case ran: %s", out)
			}
			for _, c := range res.Cases {
				if !c.OK {
					t.Errorf("case %q failed", c.Name)
				}
			}
		})
	}
}

// A workflow with a bug: it writes each confirmation twice.
const twiceWorkflow = `export default Keep.workflow({
  name: "twice",
  tasks: { confirm: Keep.task({ schedule: { interval: "1h" }, async run(ctx) {
    for (const f of await ctx.files.list({ dir: "in" })) {
      await ctx.withItem("order:" + f.name, "Order " + f.name, async (ictx) => {
        await ictx.files.write({ path: "out/" + f.name, content: "confirmed" });
        await ictx.files.write({ path: "out/" + f.name + ".copy", content: "confirmed" });
      });
    }
  } }) },
});
`

const twiceTest = `export default Keep.test({
  workflow: "./workflow.js",
  cases: {
    "one confirmation per order": {
      answers: { "files.list": [{ args: { dir: "in" }, answer: [{ path: "in/a", name: "a" }] }] },
      expect: {
        writes: [{ tool: "files.write", target: "file out/a" }],
      },
    },
  },
});
`

// TestAFailingTestSaysWhy: the case fails, names the assertion and its
// line, says expected against got, and keep exits 1.
func TestAFailingTestSaysWhy(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"workflow.js": twiceWorkflow, "workflow.test.js": twiceTest} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := keep(t, dir, "test", "workflow.test.js")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"FAIL  one confirmation per order (workflow.test.js:4",
		"expect.writes (line 7): expected 1 write, got 2",
		"expected: files.write file out/a",
		"got:      files.write file out/a {\"content\":\"confirmed\"}; files.write file out/a.copy",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "1 case of 1 failed") {
		t.Errorf("stderr: %s", errOut)
	}
}

// TestAnInvalidTestFileExits2: where the mistake is, and what to write.
func TestAnInvalidTestFileExits2(t *testing.T) {
	dir := t.TempDir()
	bad := strings.Replace(twiceTest, `writes: [`, `writes: [{ tool: "files.writ" }, `, 1)
	for name, body := range map[string]string{"workflow.js": twiceWorkflow, "workflow.test.js": bad} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := keep(t, dir, "test", "workflow.test.js")
	if code != 2 {
		t.Fatalf("exit %d, want 2\n%s%s", code, out, errOut)
	}
	want := `workflow.test.js:7: cases["one confirmation per order"].expect.writes[0].tool: connector "files" has no method "writ"; files has: files.list, files.read, files.write`
	if !strings.Contains(errOut, want) {
		t.Fatalf("stderr %q\nwant %q", errOut, want)
	}
}

// TestScriptsDocExamplePasses: the workflow and test that docs/scripts.md
// shows under "Testing a workflow" pass as it says they do.
func TestScriptsDocExamplePasses(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "scripts.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for tag, name := range map[string]string{"workflow": "workflow.js", "test": "workflow.test.js"} {
		_, after, ok := strings.Cut(string(doc), "<!-- docs example: "+tag+" -->\n```js\n")
		if !ok {
			t.Fatalf("docs/scripts.md has no example marked %q", tag)
		}
		code, _, _ := strings.Cut(after, "```\n")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := keep(t, dir, "test", "workflow.test.js")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	_, shown, _ := strings.Cut(string(doc), "$ keep test workflow.test.js\n")
	shown, _, _ = strings.Cut(shown, "```")
	for _, line := range strings.Split(strings.TrimSpace(shown), "\n") {
		name, _, _ := strings.Cut(strings.TrimPrefix(line, "ok    "), " (")
		if !strings.Contains(out, "ok    "+name+" (") {
			t.Errorf("the document shows %q; keep test printed:\n%s", line, out)
		}
	}
}

// TestPlannersExampleTestPasses: the script and test the Planner's prompt
// shows the model are a pair keep test passes, so the model is never shown
// a test its own checks would refuse.
func TestPlannersExampleTestPasses(t *testing.T) {
	prompt, err := os.ReadFile(filepath.Join(repoRoot(), "internal", "maintainer", "prompts", "plan.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rest := string(prompt)
	for _, name := range []string{"workflow.js", "workflow.test.js"} {
		var ok bool
		if _, rest, ok = strings.Cut(rest, "```js\n"); !ok {
			t.Fatalf("plan.md has no example for %s", name)
		}
		var code string
		code, rest, _ = strings.Cut(rest, "```\n")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := keep(t, dir, "test", "workflow.test.js")
	if code != 0 || strings.Count(out, "ok    ") != 2 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}

// TestDeployRefusesABrokenTestBeside: keep deploy records the test beside
// the script for the Maintainer's repairs, so one keep cannot run is
// refused with the deploy, at its line, and nothing is deployed.
func TestDeployRefusesABrokenTestBeside(t *testing.T) {
	dir := t.TempDir()
	bad := strings.Replace(twiceTest, `writes: [`, `wrotes: [`, 1)
	for name, body := range map[string]string{"workflow.js": twiceWorkflow, "workflow.test.js": bad} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := keep(t, dir, "deploy", "--grant", "workflow.js")
	if code != 2 || !strings.Contains(errOut, `workflow.test.js:7: cases["one confirmation per order"].expect.wrotes: is not something a test says`) || !strings.Contains(errOut, "nothing was deployed") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := keep(t, dir, "status", "twice"); code == 0 {
		t.Fatalf("the workflow was deployed:\n%s", out)
	}
	// Fixed, it deploys, and a changed test alone is a new version.
	if err := os.WriteFile(filepath.Join(dir, "workflow.test.js"), []byte(twiceTest), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := keep(t, dir, "deploy", "--grant", "workflow.js"); code != 0 || !strings.Contains(out, "version 1.0") {
		t.Fatalf("deploy: %d %s%s", code, out, errOut)
	}
	changed := strings.Replace(twiceTest, `target: "file out/a"`, `target: "file out/a.copy"`, 1)
	if err := os.WriteFile(filepath.Join(dir, "workflow.test.js"), []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := keep(t, dir, "deploy", "--grant", "workflow.js"); code != 0 || !strings.Contains(out, "version 1.1") {
		t.Fatalf("deploy with a changed test: %d %s%s", code, out, errOut)
	}
}
