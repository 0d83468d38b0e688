package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/inproc"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testrun"
)

func (a *app) testCmd() *cobra.Command {
	var only string
	c := &cobra.Command{
		Use:   "test FILE",
		Short: "run a workflow's test file: its handlers on the real engine over a temporary store, its connectors answering as the test says",
		Long: "test runs each case of FILE (export default Keep.test({ workflow, cases })) on a store of its own: the\n" +
			"workflow is deployed, its producers, consumers and tasks run until idle as keep run does, every connector\n" +
			"answers from the case's table (answers, faults), and the case's expectations are checked. Nothing is sent.\n" +
			"Exit status: 0 every case passed, 1 a case failed, 2 the test file (or its workflow) cannot be run.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stopWorkers := daemon.StopWorkersOnSignal()
			defer stopWorkers()
			res, err := testrun.Run(cmd.Context(), args[0], testrun.Options{Config: a.configFile, Only: only})
			var inv *testrun.Invalid
			if errors.As(err, &inv) {
				return &exitError{code: ExitInvalid, err: err}
			}
			if err != nil {
				return err
			}
			if a.jsonOut {
				if err := a.printJSON(res); err != nil {
					return err
				}
			} else {
				a.printTestResult(res)
			}
			if n := res.Failed(); n > 0 {
				return &exitError{code: ExitError, err: fmt.Errorf("%s of %d failed", kt.Count(n, "case"), len(res.Cases))}
			}
			return nil
		},
	}
	c.Flags().StringVar(&only, "run", "", "run only the case of this name")
	a.addJSON(c)
	return c
}

func (a *app) printTestResult(res *testrun.Result) {
	for _, c := range res.Cases {
		if c.OK {
			fmt.Fprintf(a.out, "ok    %s (%s)\n", c.Name, c.Elapsed)
			continue
		}
		fmt.Fprintf(a.out, "FAIL  %s (%s:%d, %s)\n", c.Name, res.File, c.Line, c.Elapsed)
		for _, f := range c.Failures {
			fmt.Fprintf(a.out, "      %s (line %d): %s\n", f.Assertion, f.Line, f.Message)
			if f.Expected != "" || f.Got != "" {
				fmt.Fprintf(a.out, "        expected: %s\n", f.Expected)
				fmt.Fprintf(a.out, "        got:      %s\n", f.Got)
			}
		}
	}
}

// testBeside reads the test file beside a script (workflow.js →
// workflow.test.js), for keep deploy and keep run to record with the
// version: a Maintainer repair must pass it. "" when there is none; a test
// file keep cannot run is refused with the deploy, so that no repair is
// held for a test that was broken from the start.
func (a *app) testBeside(file string) (string, error) {
	path := strings.TrimSuffix(file, filepath.Ext(file)) + ".test.js"
	src, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	cfg, err := config.Load(a.config())
	if err != nil {
		return "", err
	}
	if err := inproc.CheckTest(cfg, filepath.Dir(file), path, string(src)); err != nil {
		return "", &exitError{code: ExitInvalid, err: fmt.Errorf("%v\n(the test beside %s is recorded with it, for the Maintainer's repairs to pass: fix it, or move it away; nothing was deployed)", err, file)}
	}
	return string(src), nil
}
