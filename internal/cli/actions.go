package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/maintainer"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
)

func (a *app) resolveCmd() *cobra.Command {
	var tryAgain, didnt, skip, reprocess bool
	c := &cobra.Command{
		Use:   "resolve RUN --try-again|--didnt-happen|--skip|--reprocess",
		Short: "decide what happens to a blocked run",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var what engine.Resolution
			n := 0
			if tryAgain {
				what, n = engine.ResolveTryAgain, n+1
			}
			if didnt {
				what, n = engine.ResolveDidntHappen, n+1
			}
			if skip {
				what, n = engine.ResolveSkip, n+1
			}
			if reprocess {
				what, n = engine.ResolveReprocess, n+1
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
			return a.act(cmd.Context(), args[0], engine.ResolveApprove)
		},
	}
}

func (a *app) act(ctx context.Context, runID string, what engine.Resolution) error {
	path, body := "/api/v1/runs/"+url.PathEscape(runID)+"/resolve", any(map[string]string{"action": string(what)})
	if what == engine.ResolveApprove {
		path, body = "/api/v1/runs/"+url.PathEscape(runID)+"/approve", nil
	}
	return a.perform(ctx, path, body, engine.Request{Action: engine.Action(what), Run: runID})
}

// perform carries out a person's action: through the API of the keep serve
// running on the data directory (it acts at once, open pages update), or,
// when none runs, by the same engine.Control on the store itself and then
// at once by an engine of its own (carryOut), so that a decision never
// waits silently for the next keep run (issue 12 #6). Pause, revoke and
// skip-pending leave nothing to carry out.
func (a *app) perform(ctx context.Context, path string, body any, req engine.Request) error {
	var reply api.ActionReply
	if handled, err := a.viaAPI("POST", path, body, &reply); handled {
		if err != nil {
			return err
		}
		fmt.Fprintln(a.out, reply.Message)
		return nil
	}
	var wf string
	if err := a.withStore(func(st store.Store) error {
		rep, err := a.control(st).Do(ctx, req)
		if err != nil {
			return err
		}
		fmt.Fprintln(a.out, rep.Message)
		if req.Action != engine.ActPause && req.Action != engine.ActSkipPending && req.Action != engine.ActRevoke {
			wf = rep.Workflow
		}
		return nil
	}); err != nil {
		return err
	}
	return a.carryOut(ctx, wf)
}

// carryOut steps a workflow with an engine of this process until it is
// idle, blocked, or waiting for a time, and says where it stands.
func (a *app) carryOut(ctx context.Context, wf string) error {
	if wf == "" {
		return nil
	}
	k, err := daemon.Open(daemon.Options{DataDir: a.dataDir, Store: a.storeURL, ConfigFile: a.decisionConfig()})
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
	return a.printWhereItStands(ctx, k.Store, wf)
}

// printWhereItStands says what a workflow is doing now: idle, waiting for
// a retry (and when), or blocked (its card).
func (a *app) printWhereItStands(ctx context.Context, st store.Store, wf string) error {
	ss, err := report.Statuses(ctx, st, wf)
	if err != nil || len(ss) == 0 {
		return err
	}
	s := ss[0]
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
			return a.perform(cmd.Context(), "/api/v1/workflows/"+url.PathEscape(args[0])+"/"+verb, nil, engine.Request{Action: engine.Action(verb), Workflow: args[0]})
		},
	}
}

// control is the CLI's own engine.Control on st (no keep serve): the same
// actions as the API's, and a repair approved is deployed with the
// connectors of the data directory's recorded config, never the caller's
// folder's.
func (a *app) control(st store.Store) *engine.Control {
	return &engine.Control{Store: st, DecideRepair: func(ctx context.Context, wf, id string, approve bool, now time.Time) (string, error) {
		cfg, err := config.Load(a.decisionConfig())
		if err != nil {
			return "", err
		}
		eng := engine.New(engine.Options{Store: st, Registry: daemon.RegistryOf(cfg, ".")})
		return maintainer.Decide(ctx, st, eng, wf, id, approve, now)
	}}
}
