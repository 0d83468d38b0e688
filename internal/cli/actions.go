package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/daemon"
	kt "github.com/keep-run/keep/internal/keeptype"
)

func (a *app) resolveCmd() *cobra.Command {
	var tryAgain, didnt, skip, reprocess bool
	c := &cobra.Command{
		Use:   "resolve RUN --try-again|--didnt-happen|--skip|--reprocess",
		Short: "decide what happens to a blocked run",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var what kt.Resolution
			n := 0
			if tryAgain {
				what, n = kt.ResolveTryAgain, n+1
			}
			if didnt {
				what, n = kt.ResolveDidntHappen, n+1
			}
			if skip {
				what, n = kt.ResolveSkip, n+1
			}
			if reprocess {
				what, n = kt.ResolveReprocess, n+1
			}
			if n != 1 {
				return &exitError{code: exitUsageCode, err: errors.New("choose exactly one of --try-again, --didnt-happen, --skip, --reprocess")}
			}
			return a.act(cmd.Context(), args[0], what)
		},
	}
	c.Flags().BoolVar(&tryAgain, "try-again", false, "check again whether the write happened (or retry a failed run)")
	c.Flags().BoolVar(&didnt, "didnt-happen", false, "you verified the write did not happen: send it again")
	c.Flags().BoolVar(&skip, "skip", false, "give up this write: next runs with {status:'skipped'} and its inputs are skipped")
	c.Flags().BoolVar(&reprocess, "reprocess", false, "the run is blocked on an item (one that needs attention, or one already done): start a new attempt of that item and retry")
	return c
}

func (a *app) approveCmd() *cobra.Command {
	return &cobra.Command{
		Use: "approve RUN", Short: "approve the mutation a run is waiting for", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.act(cmd.Context(), args[0], kt.ResolveApprove)
		},
	}
}

func (a *app) act(ctx context.Context, runID string, what kt.Resolution) error {
	return a.perform(ctx, func(c *keepAPI) (string, string, error) {
		var r apitype.RunActionReply
		var err error
		if what == kt.ResolveApprove {
			r, err = c.Approve(ctx, runID)
		} else {
			r, err = c.Resolve(ctx, runID, string(what))
		}
		return r.Message, r.Workflow, err
	})
}

// perform carries out a person's action through keep's API (apiFor): the
// keep serve running on the data directory acts at once and open pages
// update; with the API served in this process, the workflow the action
// touched is then stepped at once by an engine of its own (carryOut), so
// that a decision never waits silently for the next keep run (issue 12
// #6). do returns the API's message and the workflow to carry out ("" for
// pause, revoke and skip-pending, which leave nothing to carry out).
func (a *app) perform(ctx context.Context, do func(c *keepAPI) (msg, wf string, err error)) error {
	c, err := a.actionAPI(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return a.performOn(ctx, c, do)
}

// performOn is perform on the API the command opened already: the action,
// the engine that carries it out and the read after share its one store
// (issue 41: a command opened it three times).
func (a *app) performOn(ctx context.Context, c *keepAPI, do func(c *keepAPI) (msg, wf string, err error)) error {
	msg, wf, err := do(c)
	if err != nil {
		return err
	}
	fmt.Fprintln(a.out, msg)
	if c.local == nil {
		return nil
	}
	return a.carryOut(ctx, c, wf)
}

// carryOut steps a workflow with an engine of this process, over the
// store c opened, until it is idle, blocked, or waiting for a time, and
// says where it stands.
func (a *app) carryOut(ctx context.Context, c *keepAPI, wf string) error {
	if wf == "" {
		return nil
	}
	// The workflow's own policy, recorded at its deploy (the connectors:
	// the data directory's recorded config, which actionAPI gave c), never
	// the caller's folder's.
	k, err := c.local.Engine(wf)
	if errors.Is(err, daemon.ErrBusy) {
		fmt.Fprintln(a.out, "another keep process runs this data directory's workflows; it carries this out at its next step")
		return nil
	}
	if err != nil {
		return err
	}
	defer k.Close()
	if _, err := k.Recover(ctx); err != nil {
		return err
	}
	// Through the scheduler: on a store several nodes share, under the
	// workflow's lease like any node (or not at all while another holds it).
	if err := k.Scheduler.StepWorkflow(ctx, wf); err != nil {
		return err
	}
	return a.printWhereItStands(ctx, c, wf)
}

// printWhereItStands says what a workflow is doing now: idle, waiting for
// a retry (and when), or blocked (its card).
func (a *app) printWhereItStands(ctx context.Context, c *keepAPI, wf string) error {
	v, err := c.Workflow(ctx, wf)
	if err != nil {
		return err
	}
	s := v.Status
	switch {
	case s.Card != nil:
		fmt.Fprintf(a.out, "carried out; %s is blocked again:\n\n", wf)
		a.printCard(*s.Card)
		return &exitError{code: ExitBlocked, err: errors.New("")}
	case s.Reason != "":
		fmt.Fprintf(a.out, "carried out; %s is %s: %s\n", wf, s.Status, s.Reason)
	default:
		fmt.Fprintf(a.out, "carried out; %s is %s\n", wf, s.Status)
	}
	return nil
}

func (a *app) workflowActionCmd(verb string) *cobra.Command {
	short := map[string]string{"pause": "stop scheduling a workflow", "resume": "let a paused workflow run again", "run-now": "run every producer of a workflow now"}[verb]
	return &cobra.Command{
		Use: verb + " WORKFLOW", Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.perform(cmd.Context(), func(c *keepAPI) (string, string, error) {
				r, err := c.WorkflowAction(cmd.Context(), args[0], verb)
				if verb == string(kt.ActPause) {
					return r.Message, "", err
				}
				return r.Message, args[0], err
			})
		},
	}
}
