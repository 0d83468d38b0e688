package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/inproc"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testrun"
)

// planCmd is the Planner: a script from a person's words.
func (a *app) planCmd() *cobra.Command {
	var out, revise string
	var force bool
	c := &cobra.Command{
		Use:   "plan \"what the workflow should do\" [-o FILE] [--revise WORKFLOW]",
		Short: "write a workflow script from your words with the model of [llm]; keep validates and reviews it before saving it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(a.config())
			if err != nil {
				return err
			}
			if !cfg.LLM.Set() {
				return errors.New("keep plan needs a model: set [llm] base_url and model in keep.toml (docs/maintainer.md), or KEEP_LLM_BASE_URL and KEEP_LLM_MODEL")
			}
			if out == "" {
				out = "workflow.js"
			}
			testOut := strings.TrimSuffix(out, filepath.Ext(out)) + ".test.js"
			for _, f := range []string{out, testOut} {
				if _, err := os.Stat(f); err == nil && !force {
					return fmt.Errorf("%s exists; name another file with -o, or pass --force to overwrite it", f)
				}
			}
			var current *kt.Version
			if revise != "" {
				d := a.direct(false)
				v, err := d.ActiveVersion(cmd.Context(), revise)
				d.Close()
				if err != nil {
					return err
				}
				current = &v
			}
			plan, err := inproc.Plan(cmd.Context(), cfg, inproc.PlanRequest{Words: args[0], File: filepath.Base(out), Test: a.planTest(out, testOut), Current: current})
			if err != nil {
				return fmt.Errorf("%v (%d tokens); nothing was saved", err, plan.Tokens)
			}
			if err := os.WriteFile(out, []byte(strings.TrimRight(plan.Script, "\n")+"\n"), 0o644); err != nil {
				return err
			}
			if err := os.WriteFile(testOut, []byte(strings.TrimRight(plan.Test, "\n")+"\n"), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "wrote %s (valid; %s, %s) and its test %s (passes: keep test %s)\n\n%s\n", out, kt.Count(plan.Attempts, "attempt"), kt.Count(plan.Tokens, "token"), testOut, testOut, plan.Summary)
			for _, n := range plan.Notes {
				fmt.Fprintf(a.out, "\nnote: %s\n", n)
			}
			if current != nil {
				fmt.Fprintf(a.out, "\nnext: read it, then keep deploy --major --reprocess=none %s (or =all, or KEY,KEY) --grant\n", out)
			} else {
				fmt.Fprintf(a.out, "\nnext: read it, fill in what it asks, then keep run %s (or keep deploy --grant %s)\n", out, out)
			}
			return nil
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "the file to write (default workflow.js); its test goes beside it (workflow.test.js)")
	c.Flags().StringVar(&revise, "revise", "", "write the next major version of this deployed workflow")
	c.Flags().BoolVar(&force, "force", false, "overwrite the output file")
	return c
}

// planTest runs the test the Planner's answer carries on its script
// (keep test, before anything is saved): why they are refused, "" when
// every case passes.
func (a *app) planTest(out, testOut string) func(ctx context.Context, testSrc, src string) string {
	return func(ctx context.Context, testSrc, src string) string {
		res, err := testrun.RunSource(ctx, testrun.Source{File: filepath.Base(testOut), Text: testSrc}, testrun.Source{File: out, Text: src}, testrun.Options{Config: a.config()})
		if err != nil {
			return "its test cannot be run (keep test): " + err.Error()
		}
		if want := "./" + filepath.Base(out); res.Named != want && res.Named != filepath.Base(out) {
			return fmt.Sprintf("its test names the workflow %q; the script is saved as %s: write workflow: %q", res.Named, filepath.Base(out), want)
		}
		if f := res.FirstFailure(); f != "" {
			return "its test fails (keep test): " + f
		}
		return ""
	}
}
