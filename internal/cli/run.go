package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/apiclient"
	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/daemon"
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
			k, ctx, done, err := a.startEngine(daemon.Options{ConfigFile: a.config(), FilesRoot: root, Notify: a.printNotice}, "")
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
			res, err := k.DeployToRun(ctx, daemon.RunDeploy{File: args[0], Src: src, Name: name, Kind: kind, FilesRoot: root, Test: test})
			if err != nil {
				return a.deployError(args[0], err)
			}
			a.printDeployed(args[0], res)
			// The development loop: every producer runs now, due or not.
			if err := k.QueueProducers(ctx, res.Workflow); err != nil {
				return err
			}
			if abandoned, err := k.RunUntilIdle(ctx); err != nil {
				if errors.Is(err, context.DeadlineExceeded) && timeout > 0 {
					err = a.stoppedAt(ctx, k, res, timeout, args[0])
				} // else stopped (Ctrl-C)
				a.printAbandoned(abandoned, args[0])
				return err
			}
			if errs := k.Scheduler.Errors(); len(errs) > 0 {
				return fmt.Errorf("keep hit an internal error: %v", errs[0])
			}
			blocked, _, err := a.printRunSummary(ctx, apiclient.InProcess(k.API(), a.by), res, 0)
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

// printDeployed says on stderr what keep run's deploy found: the script's
// warnings, events left waiting, and what it granted — keep run is a
// person running this script: what it uses is theirs to allow.
func (a *app) printDeployed(file string, res kt.DeployResult) {
	a.printWarnings(file, res.Problems)
	for _, x := range res.Stranded {
		fmt.Fprintf(a.errOut, "waiting: %s\n", x.Message)
	}
	if len(res.Granted) > 0 {
		fmt.Fprintf(a.errOut, "granted %s: %s\n", res.Workflow, strings.Join(res.Granted, ", "))
	}
}

// stoppedAt says where keep run stopped after --timeout: what is done
// and what is still pending (the caller names each call it gave up on
// next); its error says it stopped.
func (a *app) stoppedAt(ctx context.Context, k *daemon.Keep, res kt.DeployResult, timeout time.Duration, file string) error {
	_, notDone, err := a.printRunSummary(context.WithoutCancel(ctx), apiclient.InProcess(k.API(), a.by), res, timeout)
	if err != nil {
		return err
	}
	what := "work is still under way"
	if notDone != "" {
		what = "inputs above are not done yet (" + notDone + ")"
	}
	return fmt.Errorf("still not idle after --timeout %s: %s; keep run %s again, or keep serve, goes on from here", timeout, what, file)
}

// notDoneText names the statuses of the inputs that are not settled, as
// the summary shows them ("checking: 1, pending: 2"); "" when none.
func notDoneText(inputs []apitype.Input) string {
	count := map[kt.ItemStatus]int{}
	var order []kt.ItemStatus
	for _, in := range inputs {
		switch in.Status {
		case kt.ItemDone, kt.ItemSkipped, kt.ItemFailed:
			continue
		}
		if count[in.Status] == 0 {
			order = append(order, in.Status)
		}
		count[in.Status]++
	}
	var parts []string
	for _, st := range order {
		parts = append(parts, fmt.Sprintf("%s: %d", st, count[st]))
	}
	return strings.Join(parts, ", ")
}

// printAbandoned names each call keep run gave up on, and what becomes of it.
func (a *app) printAbandoned(abandoned []kt.CallInFlight, file string) {
	for _, c := range abandoned {
		what := fmt.Sprintf("%s (%s, run %s), waited on for %s", c.Target, c.Call, c.RunID, time.Since(c.Since).Round(time.Millisecond))
		switch {
		case c.Write && c.CanReconcile:
			fmt.Fprintf(a.errOut, "gave up on the write %s: it may have happened. It is recorded in flight: the next keep run %s, or keep serve, asks the service whether it happened before anything is sent again\n", what, file)
		case c.Write:
			fmt.Fprintf(a.errOut, "gave up on the write %s: it may have happened. It is recorded in flight, and keep cannot ask the service: the next keep run %s, or keep serve, shows it for a person to say whether it happened\n", what, file)
		default:
			fmt.Fprintf(a.errOut, "gave up on the call %s: it writes nothing; it is made again when the run goes on\n", what)
		}
	}
}

// printNotice prints, while keep run waits, what keep does by itself (a
// retry scheduled): on stderr, so that --json stays one document.
func (a *app) printNotice(n kt.Notice) {
	fmt.Fprintf(a.errOut, "%s  %s: %s\n", time.Now().Format("15:04:05"), n.Workflow, n.Text)
}

// printRunSummary prints where keep run left the workflow, read through
// the API on the engine keep run holds (c).
//
// stoppedAfter is keep run's --timeout when it stopped there (0: it ran
// until idle or blocked): the summary then says "stopped", never "idle",
// and notDone names the statuses of the inputs not settled (issue 42: it
// said "idle" above inputs still checking).
func (a *app) printRunSummary(ctx context.Context, c *apiclient.Client, res kt.DeployResult, stoppedAfter time.Duration) (blocked bool, notDone string, err error) {
	wf := res.Workflow
	inputs, err := c.Inputs(ctx, wf)
	if err != nil {
		return false, "", err
	}
	outputs, err := c.Outputs(ctx, wf)
	if err != nil {
		return false, "", err
	}
	runs, err := c.Runs(ctx, wf, 0)
	if err != nil {
		return false, "", err
	}
	cards, err := c.Blocked(ctx, wf)
	if err != nil {
		return false, "", err
	}
	next, err := c.Schedule(ctx, wf)
	if err != nil {
		return false, "", err
	}
	notDone = notDoneText(inputs)
	state := "idle"
	switch {
	case stoppedAfter > 0 && len(cards) > 0:
		state = "blocked, and stopped at --timeout " + stoppedAfter.String() + " with work under way"
	case stoppedAfter > 0:
		state = "not idle: stopped at --timeout " + stoppedAfter.String() + " with work under way"
	case len(cards) > 0:
		state = "blocked"
	}
	if a.jsonOut {
		return len(cards) > 0, notDone, a.printJSON(map[string]any{"workflow": map[string]any{"name": wf, "version": res.Version.Label(), "filesRoot": res.FilesRoot},
			"inputs": nonNil(inputs), "outputs": nonNil(outputs), "runs": nonNil(runs), "blocked": nonNil(cards), "next": next})
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
	return len(cards) > 0, notDone, a.printRunWebhooks(ctx, c, wf)
}

// printRunWebhooks says where a workflow's webhooks are served: keep run
// serves none, and a workflow fed only by webhooks otherwise ends "idle, 0
// runs" with no word on how anything reaches it.
func (a *app) printRunWebhooks(ctx context.Context, c *apiclient.Client, wf string) error {
	hooks, err := c.Webhooks(ctx, wf, 1)
	if err != nil {
		return err
	}
	if len(hooks.Webhooks) > 0 {
		fmt.Fprintln(a.out)
	}
	for _, h := range hooks.Webhooks {
		fmt.Fprintf(a.out, "webhook: %s takes POST %s under keep serve --webhooks-addr ADDR, verified with the secret %s (keep secret set %s); keep run serves no webhook, keep test sends it requests\n", h.Name, h.Path, h.Secret, h.Secret)
	}
	return nil
}
