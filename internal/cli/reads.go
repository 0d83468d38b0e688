package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/api"
	kt "github.com/keep-run/keep/internal/keeptype"
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
				var health api.HealthReply
				if handled, err := a.viaAPI("GET", "/api/v1/health", nil, &health); handled && err == nil {
					problem = health.Problem
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
				fmt.Fprintln(w, "WORKFLOW\tVERSION\tSTATUS\tPENDING\tBLOCKED RUN")
				for _, s := range ss {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", s.Name, s.Version, s.Status, s.PendingEvents, s.BlockedRunID)
				}
				w.Flush()
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

func (a *app) inputsCmd() *cobra.Command {
	c := &cobra.Command{
		Use: "inputs WORKFLOW", Short: "list a workflow's inputs and their status", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				ins, err := report.Inputs(cmd.Context(), st, args[0])
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(nonNil(ins))
				}
				a.printInputs(ins)
				return nil
			})
		},
	}
	a.addJSON(c)
	return c
}

func (a *app) outputsCmd() *cobra.Command {
	c := &cobra.Command{
		Use: "outputs WORKFLOW", Short: "list a workflow's outputs: one line per mutation", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				outs, err := report.Outputs(cmd.Context(), st, args[0])
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(nonNil(outs))
				}
				ins, err := report.Inputs(cmd.Context(), st, args[0])
				if err != nil {
					return err
				}
				a.printOutputs(outs, ins)
				return nil
			})
		},
	}
	a.addJSON(c)
	return c
}

func (a *app) runsCmd() *cobra.Command {
	var limit int
	c := &cobra.Command{
		Use: "runs WORKFLOW", Short: "list a workflow's runs, newest first", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				rs, err := report.Runs(cmd.Context(), st, args[0], limit)
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(nonNil(rs))
				}
				w := a.table()
				fmt.Fprintln(w, "RUN\tHANDLER\tPHASE\tSTATUS\tCREATED\tERROR")
				for _, r := range rs {
					msg := ""
					if r.Error != nil {
						msg = crop(r.Error.Message, 60)
					}
					fmt.Fprintf(w, "%s\t%s %s\t%s\t%s\t%s\t%s\n", r.ID, r.HandlerType, r.Handler, r.Phase, r.Status, r.CreatedAt, msg)
				}
				w.Flush()
				return nil
			})
		},
	}
	c.Flags().IntVar(&limit, "limit", 50, "how many runs to list (0 = all)")
	a.addJSON(c)
	return c
}

func (a *app) showCmd() *cobra.Command {
	show := &cobra.Command{Use: "show", Short: "show one run or input in full"}
	runC := &cobra.Command{
		Use: "run ID", Short: "show a run: phases, every tool call, logs, the error, and what you can do", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				d, err := report.ShowRun(cmd.Context(), st, args[0])
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(d)
				}
				a.printRun(d)
				return nil
			})
		},
	}
	inputC := &cobra.Command{
		Use: "input ID", Short: "show an input and what it caused", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				return st.View(cmd.Context(), func(tx store.Tx) error {
					in, err := tx.InputGet(args[0])
					if errors.Is(err, kt.ErrNotFound) {
						return fmt.Errorf("there is no input %q (see `keep inputs WORKFLOW`)", args[0])
					}
					if err != nil {
						return err
					}
					status, err := report.InputStatus(tx, in)
					if err != nil {
						return err
					}
					ms, err := tx.MutationList(in.Workflow)
					if err != nil {
						return err
					}
					var outs []report.Output
					for _, m := range ms {
						for _, id := range m.ItemKeys {
							if id == in.ID {
								outs = append(outs, report.OutputRow(m))
							}
						}
					}
					row := report.Input{ID: in.ID, Key: in.Key, Source: in.Source, Type: in.Type, ExternalID: in.ExternalID, Title: in.Title,
						Status: status, Attempt: in.CurrentAttempt, CreatedAt: report.Time(in.CreatedAt), UpdatedAt: report.Time(in.UpdatedAt)}
					if a.jsonOut {
						return a.printJSON(map[string]any{"input": row, "outputs": nonNil(outs)})
					}
					fmt.Fprintf(a.out, "input %s\n  title:  %s\n  source: %s/%s id %s\n  status: %s\n  attempt: %d\n\n", in.ID, in.Title, in.Source, in.Type, in.ExternalID, status, in.CurrentAttempt)
					a.printOutputs(outs, []report.Input{row})
					return nil
				})
			})
		},
	}
	a.addJSON(runC)
	inputC.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	show.AddCommand(runC, inputC, a.showItemCmd())
	return show
}
