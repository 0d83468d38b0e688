package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/apiclient"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
)

func (a *app) runCmd() *cobra.Command {
	var filesRoot, name string
	var timeout time.Duration
	var minor, major bool
	c := &cobra.Command{
		Use:   "run FILE",
		Short: "deploy a script on the embedded store, run it until idle or blocked, print its inputs and outputs",
		Long: "run deploys FILE (when it changed), runs every due producer and consumer until nothing is left to do,\n" +
			"and prints the inputs and outputs. Exit status: 0 idle with nothing blocked, 2 invalid script, 3 a run needs a person.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, src, root, err := scriptToDeploy(args[0], filesRoot, minor, major)
			if err != nil {
				return err
			}
			test, err := a.testBeside(args[0])
			if err != nil {
				return err
			}
			k, ctx, done, err := a.startEngine(daemon.Options{ConfigFile: a.config(), FilesRoot: root, Notify: a.printNotice})
			if err != nil {
				return err
			}
			defer done()
			// Recorded once this process runs the data directory's workflows
			// (not when another keep holds it).
			if _, err := a.runConfig(); err != nil {
				return err
			}
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			if _, err := k.Recover(ctx); err != nil {
				return err
			}
			res, err := k.Engine.DeployWith(ctx, args[0], src, engine.DeployOptions{Name: name, Kind: kind, FilesRoot: root, Grant: true, Test: test})
			if err != nil {
				return a.deployError(args[0], err)
			}
			a.printWarnings(args[0], res.Problems)
			for _, x := range res.Stranded {
				fmt.Fprintf(a.errOut, "waiting: %s\n", x.Message)
			}
			if len(res.Granted) > 0 {
				// keep run is a person running this script: what it uses is theirs to allow.
				fmt.Fprintf(a.errOut, "granted %s: %s\n", res.Workflow, strings.Join(res.Granted, ", "))
			}
			// The development loop: every producer runs now, due or not.
			if _, err := engine.QueueAtStart(ctx, k.Store, res.Workflow, time.Now()); err != nil {
				return err
			}
			if err := k.Scheduler.RunUntilIdle(ctx); err != nil {
				if errors.Is(err, context.DeadlineExceeded) && timeout > 0 {
					// Say where it stopped: what is done, what is still pending.
					if _, perr := a.printRunSummary(context.WithoutCancel(ctx), apiclient.InProcess(k.API(), a.by), res); perr != nil {
						return perr
					}
					return fmt.Errorf("still not idle after --timeout %s: the inputs above marked pending are not done yet; keep run %s again, or keep serve, goes on from here", timeout, args[0])
				}
				return err
			}
			if errs := k.Scheduler.Errors(); len(errs) > 0 {
				return fmt.Errorf("keep hit an internal error: %v", errs[0])
			}
			blocked, err := a.printRunSummary(ctx, apiclient.InProcess(k.API(), a.by), res)
			if err != nil {
				return err
			}
			if blocked {
				return &exitError{code: ExitBlocked, err: errors.New("")}
			}
			return nil
		},
	}
	c.Flags().StringVar(&filesRoot, "files-root", "", "folder the workflow's files connector reads and writes, recorded for keep serve too (default: the script's folder)")
	c.Flags().StringVar(&name, "name", "", "workflow name (default: the script's name)")
	c.Flags().DurationVar(&timeout, "timeout", 0, "give up when not idle after this long (default: no limit)")
	c.Flags().BoolVar(&minor, "minor", false, "deploy as a minor version (repair)")
	c.Flags().BoolVar(&major, "major", false, "deploy as a major version")
	a.addJSON(c)
	return c
}

// printNotice prints, while keep run waits, what keep does by itself (a
// retry scheduled): on stderr, so that --json stays one document.
func (a *app) printNotice(n engine.Notice) {
	fmt.Fprintf(a.errOut, "%s  %s: %s\n", time.Now().Format("15:04:05"), n.Workflow, n.Text)
}

// printRunSummary prints where keep run left the workflow, read through
// the API on the engine keep run holds (c).
func (a *app) printRunSummary(ctx context.Context, c *apiclient.Client, res engine.DeployResult) (bool, error) {
	wf := res.Workflow
	inputs, err := c.Inputs(ctx, wf)
	if err != nil {
		return false, err
	}
	outputs, err := c.Outputs(ctx, wf)
	if err != nil {
		return false, err
	}
	runs, err := c.Runs(ctx, wf, 0)
	if err != nil {
		return false, err
	}
	cards, err := c.Blocked(ctx, wf)
	if err != nil {
		return false, err
	}
	next, err := c.Schedule(ctx, wf)
	if err != nil {
		return false, err
	}
	if a.jsonOut {
		return len(cards) > 0, a.printJSON(map[string]any{"workflow": map[string]any{"name": wf, "version": res.Version.Label(), "filesRoot": res.FilesRoot},
			"inputs": nonNil(inputs), "outputs": nonNil(outputs), "runs": nonNil(runs), "blocked": nonNil(cards), "next": next})
	}
	state := "idle"
	if len(cards) > 0 {
		state = "blocked"
	}
	fmt.Fprintf(a.out, "workflow %s (version %s): %s, %s\n\n", wf, res.Version.Label(), state, kt.Count(len(runs), "run"))
	a.printInputs(inputs)
	fmt.Fprintln(a.out)
	a.printOutputs(outputs, inputs)
	for _, c := range cards {
		fmt.Fprintln(a.out)
		a.printCard(c)
	}
	if len(next) > 0 {
		fmt.Fprintln(a.out)
	}
	for _, n := range next {
		fmt.Fprintf(a.out, "next: %s %s at %s (keep serve runs it then; keep run FILE runs it at once)\n", n.Type, n.Handler, n.NextRunAt)
	}
	return len(cards) > 0, nil
}
