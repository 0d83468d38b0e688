package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/engine"
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
	c.Flags().BoolVar(&reprocess, "reprocess", false, "the run tried to change an item that is already done: start a new attempt of that item and retry")
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
	return a.perform(path, body, func(st store.Store) (string, error) {
		return engine.Resolve(ctx, st, runID, what, time.Now())
	})
}

// perform carries out a person's action: through the API of the keep serve
// running on the data directory (it acts at once, open pages update), or,
// when none runs, on the store itself (local); either way it prints what
// will happen.
func (a *app) perform(path string, body any, local func(st store.Store) (string, error)) error {
	var reply api.ActionReply
	if handled, err := a.viaAPI("POST", path, body, &reply); handled {
		if err != nil {
			return err
		}
		fmt.Fprintln(a.out, reply.Message)
		return nil
	}
	return a.withStore(func(st store.Store) error {
		msg, err := local(st)
		if err != nil {
			return err
		}
		fmt.Fprintln(a.out, msg)
		return nil
	})
}

func (a *app) workflowActionCmd(verb string) *cobra.Command {
	short := map[string]string{"pause": "stop scheduling a workflow", "resume": "let a paused workflow run again", "run-now": "run every producer of a workflow now"}[verb]
	return &cobra.Command{
		Use: verb + " WORKFLOW", Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.perform("/api/v1/workflows/"+url.PathEscape(args[0])+"/"+verb, nil, func(st store.Store) (string, error) {
				msg, _, err := engine.WorkflowAction(cmd.Context(), st, args[0], verb, time.Now())
				return msg, err
			})
		},
	}
}
