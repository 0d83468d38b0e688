package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
)

func (a *app) statusCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "status [WORKFLOW]",
		Short: "show each workflow's status and what is blocked",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			only := ""
			if len(args) == 1 {
				only = args[0]
			}
			return a.withReadStore(func(st store.Store) error {
				ss, err := report.Statuses(cmd.Context(), st, only)
				if err != nil {
					return err
				}
				// What the store shows cannot tell that keep serve is stuck
				// (a full disk: nothing it does is written); it can.
				problem := ""
				if c, found, _ := a.serveAPI(cmd.Context()); found {
					if health, err := c.Health(cmd.Context()); err == nil {
						problem = health.Problem
					}
				}
				for i := range ss {
					if problem != "" && ss[i].Status != "paused" {
						ss[i].Status, ss[i].Reason = "error", "keep serve cannot go on: "+problem
					}
				}
				if a.jsonOut {
					return a.printJSON(nonNil(ss))
				}
				if problem != "" {
					fmt.Fprintf(a.out, "keep serve cannot go on by itself: %s\n\n", problem)
				}
				if len(ss) == 0 {
					fmt.Fprintln(a.out, "no workflows deployed")
					return nil
				}
				w := a.table()
				fmt.Fprintln(w, "WORKFLOW\tVERSION\tSTATUS\tPENDING\tFILES\tBLOCKED RUN")
				for _, s := range ss {
					files := s.FilesRoot
					if files == "" {
						files = "(keep serve's --files-root)"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", s.Name, s.Version, s.Status, s.PendingEvents, files, s.BlockedRunID)
				}
				w.Flush()
				for _, s := range ss {
					if s.Status == "running" && s.Reason != "" {
						fmt.Fprintf(a.out, "%s: %s\n", s.Name, s.Reason)
					}
					if len(s.Ungranted) > 0 {
						fmt.Fprintf(a.out, "%s: not yet granted: %s (keep grant %s)\n", s.Name, strings.Join(s.Ungranted, ", "), s.Name)
					}
				}
				if err := a.printNodes(cmd.Context(), st); err != nil {
					return err
				}
				cards, err := report.Blocked(cmd.Context(), st, only)
				if err != nil {
					return err
				}
				for _, c := range cards {
					fmt.Fprintln(a.out)
					a.printCard(c)
				}
				return nil
			})
		},
	}
	a.addJSON(c)
	return c
}

// reader makes c a read command: fetch reads what report computes, which
// is printed as JSON with --json, else as text by show.
func reader[T any](a *app, c *cobra.Command, fetch func(ctx context.Context, st store.Store, args []string) (T, error), show func(ctx context.Context, st store.Store, v T) error) *cobra.Command {
	c.RunE = func(cmd *cobra.Command, args []string) error {
		return a.withReadStore(func(st store.Store) error {
			v, err := fetch(cmd.Context(), st, args)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(v)
			}
			return show(cmd.Context(), st, v)
		})
	}
	a.addJSON(c)
	return c
}

func (a *app) inputsCmd() *cobra.Command {
	return reader(a, &cobra.Command{Use: "inputs WORKFLOW", Short: "list a workflow's inputs and their status", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, st store.Store, args []string) ([]report.Input, error) {
			ins, err := report.Inputs(ctx, st, args[0])
			return nonNil(ins), err
		},
		func(_ context.Context, _ store.Store, ins []report.Input) error { a.printInputs(ins); return nil })
}

func (a *app) outputsCmd() *cobra.Command {
	var wf string
	return reader(a, &cobra.Command{Use: "outputs WORKFLOW", Short: "list a workflow's outputs: one line per mutation", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, st store.Store, args []string) ([]report.Output, error) {
			wf = args[0]
			outs, err := report.Outputs(ctx, st, wf)
			return nonNil(outs), err
		},
		func(ctx context.Context, st store.Store, outs []report.Output) error {
			ins, err := report.Inputs(ctx, st, wf)
			if err != nil {
				return err
			}
			a.printOutputs(outs, ins)
			return nil
		})
}

func (a *app) runsCmd() *cobra.Command {
	var limit int
	c := reader(a, &cobra.Command{Use: "runs WORKFLOW", Short: "list a workflow's runs, newest first", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, st store.Store, args []string) ([]report.Run, error) {
			rs, err := report.Runs(ctx, st, args[0], limit)
			return nonNil(rs), err
		},
		func(_ context.Context, _ store.Store, rs []report.Run) error {
			w := a.table()
			fmt.Fprintln(w, "RUN\tHANDLER\tABOUT\tPHASE\tSTATUS\tCREATED\tERROR")
			for _, r := range rs {
				msg := ""
				if r.Error != nil {
					msg = crop(r.Error.Message, 60)
				}
				fmt.Fprintf(w, "%s\t%s %s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.HandlerType, r.Handler, crop(r.Title, 40), r.Phase, r.Status, r.CreatedAt, msg)
			}
			return w.Flush()
		})
	c.Flags().IntVar(&limit, "limit", 50, "how many runs to list (0 = all)")
	return c
}

func (a *app) showCmd() *cobra.Command {
	show := &cobra.Command{Use: "show", Short: "show one run, input or item in full"}
	runC := reader(a, &cobra.Command{Use: "run ID", Short: "show a run: phases, every tool call, logs, the error, and what you can do", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, st store.Store, args []string) (report.RunDetail, error) {
			return report.ShowRun(ctx, st, args[0])
		},
		func(_ context.Context, _ store.Store, d report.RunDetail) error { a.printRun(d); return nil })
	inputC := reader(a, &cobra.Command{Use: "input ID|KEY", Short: "show an input and what it caused (by the id `keep inputs` prints, or its key source:type:id)", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, st store.Store, args []string) (report.InputDetail, error) {
			return report.ShowInput(ctx, st, args[0])
		},
		func(_ context.Context, _ store.Store, d report.InputDetail) error {
			in := d.Input
			fmt.Fprintf(a.out, "input %s\n  title:  %s\n  source: %s/%s id %s\n  status: %s\n  attempt: %d\n\n", in.ID, in.Title, in.Source, in.Type, in.ExternalID, in.Status, in.Attempt)
			a.printOutputs(d.Outputs, []report.Input{in})
			return nil
		})
	show.AddCommand(runC, inputC, a.showItemCmd())
	return show
}

// printNodes lists the keep serve nodes sharing the store (PostgreSQL) and
// the workflows each holds now.
func (a *app) printNodes(ctx context.Context, st store.Store) error {
	ns, err := report.Nodes(ctx, st, time.Now().UnixMilli())
	if err != nil || len(ns) == 0 {
		return err
	}
	fmt.Fprintln(a.out, "\nNODES")
	w := a.table()
	fmt.Fprintln(w, "  NODE\tADDRESS\tSEEN\tHOLDS")
	for _, n := range ns {
		seen := n.SeenAt
		if !n.Alive {
			seen += " (gone)"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", n.ID, n.Addr, seen, strings.Join(n.Holds, ", "))
	}
	return w.Flush()
}
