// Package hostile runs the hostile corpus (testdata/hostile) through the
// keep binary, as a person would meet each script: `keep run` on it, then
// `keep runs --json`. internal/engine's TestHostileCorpus runs the same
// files through the engine in its test's process; this is the promise of
// issue 43 that the corpus stays green "through the binary", whatever the
// default sandbox is (wasm in keep's process since then).
package hostile

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testbin"
)

var keepBin string

func TestMain(m *testing.M) { testbin.Main(m, &keepBin) }

// header reads a corpus file's "// name: value" line.
func header(src, name string) string {
	for _, line := range strings.Split(src, "\n") {
		if v, ok := strings.CutPrefix(line, "// "+name+": "); ok {
			return v
		}
	}
	return ""
}

func TestHostileCorpusThroughTheBinary(t *testing.T) {
	files, err := filepath.Glob("../../testdata/hostile/*.js")
	if err != nil || len(files) < 30 {
		t.Fatalf("corpus: %d files, %v", len(files), err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".js"), func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src := string(b)
			want, refused := header(src, "expect"), header(src, "refused")
			if want == "" {
				t.Fatalf("%s has no // expect: line", f)
			}
			dir := t.TempDir()
			// A time limit the corpus means to hit is short; any other is
			// out of reach, so that on a busy machine the limit under test
			// trips first (issue 12).
			limit := "120s"
			if strings.Contains(want, "time limit") {
				limit = "3s"
			}
			if err := os.WriteFile(filepath.Join(dir, "keep.toml"), []byte("[policy]\nhandler_timeout = \""+limit+"\"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "wf.js"), b, 0o600); err != nil {
				t.Fatal(err)
			}
			keep := func(args ...string) testbin.Result {
				cmd := exec.Command(keepBin, append(args, "--data", filepath.Join(dir, "data"), "--config", filepath.Join(dir, "keep.toml"))...)
				cmd.Dir = dir
				return testbin.Run(t, cmd)
			}
			ran := keep("run", "--timeout", "2m", "wf.js")
			if refused != "" {
				// The analysis refuses it: nothing is deployed, and the
				// message says why (the engine's test deploys it anyway to
				// try the run-time checks behind the analysis).
				if ran.Code == 0 || !strings.Contains(ran.Err+ran.Out, refused) || !strings.Contains(ran.Err+ran.Out, "nothing was deployed") {
					t.Fatalf("keep run: exit %d, want it refused with %q\n%s%s", ran.Code, refused, ran.Out, ran.Err)
				}
				return
			}
			listed := keep("runs", "hostile", "--json")
			var runs []struct {
				Handler, Status, Phase string
				Error                  struct{ Message string }
			}
			if err := json.Unmarshal([]byte(listed.Out), &runs); err != nil {
				t.Fatalf("keep runs --json: %v\n%s%s\nkeep run said:\n%s%s", err, listed.Out, listed.Err, ran.Out, ran.Err)
			}
			for _, r := range runs {
				if r.Status != "failed:logic" {
					continue
				}
				for _, alt := range strings.Split(want, " | ") {
					if strings.Contains(r.Error.Message, alt) {
						// Anything hostile before next stops the write
						// (a hostile next comes after it, as designed).
						if _, err := os.Stat(filepath.Join(dir, "hostile.txt")); err == nil && r.Phase != "emitting" {
							t.Fatalf("the hostile workflow wrote its file (failed in %s)", r.Phase)
						}
						return
					}
				}
			}
			t.Fatalf("no run failed:logic saying %q; runs: %+v\nkeep run said:\n%s%s", want, runs, ran.Out, ran.Err)
		})
	}
}
