package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/apiclient"
	"github.com/keep-run/keep/internal/apitype"
	kt "github.com/keep-run/keep/internal/keeptype"
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
			return a.read(cmd.Context(), func(k *keepAPI) error { return a.printStatus(cmd.Context(), k, only) })
		},
	}
	a.addJSON(c)
	return c
}

// printStatus prints every workflow's status (or only's), the nodes
// sharing the store, and the blocked runs' cards.
func (a *app) printStatus(ctx context.Context, k *keepAPI, only string) error {
	var ss []apitype.Status
	if only != "" {
		v, err := k.Workflow(ctx, only)
		if err != nil {
			return err
		}
		ss = []apitype.Status{v.Status}
	} else {
		var err error
		if ss, err = k.Statuses(ctx); err != nil {
			return err
		}
	}
	// What the store shows cannot tell that keep serve is stuck (a full
	// disk: nothing it does is written); it can.
	problem := ""
	if serve := k.serveClient(); serve != nil {
		if health, err := serve.Health(ctx); err == nil {
			problem = health.Problem
		}
	}
	for i := range ss {
		if problem != "" && ss[i].Status != "paused" && ss[i].Status != kt.StatusWordDamaged {
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
		if (s.Status == "running" || s.Status == kt.StatusWordDamaged || kt.IsDamagedMessage(s.Reason)) && s.Reason != "" {
			fmt.Fprintf(a.out, "%s: %s\n", s.Name, s.Reason)
		}
		if len(s.Ungranted) > 0 {
			fmt.Fprintf(a.out, "%s: not yet granted: %s (keep grant %s)\n", s.Name, strings.Join(s.Ungranted, ", "), s.Name)
		}
		for _, q := range s.QuietPolls {
			fmt.Fprintf(a.out, "%s: %s\n", s.Name, q)
		}
	}
	if err := a.printNodes(ctx, k); err != nil {
		return err
	}
	cards, err := k.Blocked(ctx, only)
	if err != nil {
		return err
	}
	for _, c := range cards {
		fmt.Fprintln(a.out)
		a.printCard(c)
	}
	return nil
}

// reader makes c a read command: fetch reads through keep's API
// (readAPI), which is printed as JSON with --json, else as text by show.
func reader[T any](a *app, c *cobra.Command, fetch func(ctx context.Context, k *keepAPI, args []string) (T, error), show func(ctx context.Context, k *keepAPI, v T) error) *cobra.Command {
	c.RunE = func(cmd *cobra.Command, args []string) error {
		return a.read(cmd.Context(), func(k *keepAPI) error {
			v, err := fetch(cmd.Context(), k, args)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(v)
			}
			return show(cmd.Context(), k, v)
		})
	}
	a.addJSON(c)
	return c
}

func (a *app) inputsCmd() *cobra.Command {
	return pagedReader(a, &cobra.Command{Use: "inputs WORKFLOW", Short: "list a workflow's newest inputs and their status", Args: cobra.ExactArgs(1)}, listed{"inputs", true},
		func(ctx context.Context, k *keepAPI, args []string, o apiclient.ListOptions) ([]apitype.Input, apiclient.PageInfo, error) {
			return k.InputsPage(ctx, args[0], o)
		},
		func(_ context.Context, _ *keepAPI, ins []apitype.Input) error { a.printInputs(ins); return nil })
}

func (a *app) outputsCmd() *cobra.Command {
	var wf string
	return pagedReader(a, &cobra.Command{Use: "outputs WORKFLOW", Short: "list a workflow's newest outputs: one line per mutation", Args: cobra.ExactArgs(1)}, listed{"outputs", false},
		func(ctx context.Context, k *keepAPI, args []string, o apiclient.ListOptions) ([]apitype.Output, apiclient.PageInfo, error) {
			wf = args[0]
			return k.OutputsPage(ctx, wf, o)
		},
		func(ctx context.Context, k *keepAPI, outs []apitype.Output) error {
			// The inputs named by their titles: those of the newest page
			// as long (the writes of a page are mostly for them); others
			// by their ids.
			ins, _, err := k.InputsPage(ctx, wf, apiclient.ListOptions{Limit: max(1, min(len(outs), 1000))})
			if err != nil {
				return err
			}
			a.printOutputs(outs, ins)
			return nil
		})
}

func (a *app) runsCmd() *cobra.Command {
	return pagedReader(a, &cobra.Command{Use: "runs WORKFLOW", Short: "list a workflow's runs, newest first", Args: cobra.ExactArgs(1)}, listed{"runs", false},
		func(ctx context.Context, k *keepAPI, args []string, o apiclient.ListOptions) ([]apitype.Run, apiclient.PageInfo, error) {
			return k.RunsPage(ctx, args[0], o)
		},
		func(_ context.Context, _ *keepAPI, rs []apitype.Run) error {
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
}

func (a *app) showCmd() *cobra.Command {
	show := &cobra.Command{Use: "show", Short: "show one run, input or item in full"}
	runC := reader(a, &cobra.Command{Use: "run ID", Short: "show a run: phases, every tool call, logs, the error, and what you can do", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, k *keepAPI, args []string) (apitype.RunDetail, error) {
			return k.Run(ctx, args[0])
		},
		func(_ context.Context, _ *keepAPI, d apitype.RunDetail) error { a.printRun(d); return nil })
	inputC := reader(a, &cobra.Command{Use: "input ID|KEY", Short: "show an input and what it caused (by the id `keep inputs` prints, or its key source:type:id)", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, k *keepAPI, args []string) (apitype.InputDetail, error) {
			return k.Input(ctx, args[0])
		},
		func(_ context.Context, _ *keepAPI, d apitype.InputDetail) error {
			in := d.Input
			fmt.Fprintf(a.out, "input %s\n  title:  %s\n  source: %s/%s id %s\n  status: %s\n  attempt: %d\n\n", in.ID, in.Title, in.Source, in.Type, in.ExternalID, in.Status, in.Attempt)
			a.printOutputs(d.Outputs, []apitype.Input{in})
			return nil
		})
	show.AddCommand(runC, inputC, a.showItemCmd())
	return show
}

// printNodes lists the keep serve nodes sharing the store (PostgreSQL) and
// the workflows each holds now.
func (a *app) printNodes(ctx context.Context, k *keepAPI) error {
	ns, err := k.Nodes(ctx)
	if err != nil || len(ns) == 0 {
		return err
	}
	fmt.Fprintln(a.out, "\nNODES")
	w := a.table()
	fmt.Fprintln(w, "  NODE\tADDRESS\tSEEN\tHOLDS")
	for _, n := range ns {
		seen := n.SeenAt
		switch {
		case n.StoppedAt != "":
			seen += " (stopped)"
		case !n.Alive:
			seen += " (gone)"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", n.ID, n.Addr, seen, strings.Join(n.Holds, ", "))
	}
	return w.Flush()
}
