package cli

import (
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
)

func (a *app) itemsCmd() *cobra.Command {
	var orphaned bool
	c := &cobra.Command{
		Use: "items WORKFLOW", Short: "list a workflow's items (inputs and task items) with status and attempt", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				items, err := report.Items(cmd.Context(), st, args[0], orphaned)
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(nonNil(items))
				}
				if len(items) == 0 {
					fmt.Fprintln(a.out, "no items")
					return nil
				}
				w := a.table()
				fmt.Fprintln(w, "STATUS\tATTEMPT\tKIND\tKEY\tTITLE")
				for _, it := range items {
					status := it.Status
					if it.Orphaned {
						status += " (orphaned)"
					}
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", status, it.Attempt, it.Kind, crop(it.Key, 40), crop(it.Title, 60))
				}
				w.Flush()
				return nil
			})
		},
	}
	c.Flags().BoolVar(&orphaned, "orphaned", false, "only items a new major version left behind")
	a.addJSON(c)
	return c
}

func (a *app) showItemCmd() *cobra.Command {
	var wf string
	c := &cobra.Command{
		Use: "item KEY", Short: "show an item and its attempts, each with its mutations", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				d, err := report.ShowItem(cmd.Context(), st, wf, args[0])
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(d)
				}
				fmt.Fprintf(a.out, "Item: %s\n  key: %s (%s, workflow %s)\n  status: %s\n", d.Item.Title, d.Item.Key, d.Item.Kind, d.Item.Workflow, d.Item.Status)
				for i, at := range d.Attempts {
					branch := "├─"
					if i == len(d.Attempts)-1 {
						branch = "└─"
					}
					cur := ""
					if at.Current {
						cur = "  ← current"
					}
					fmt.Fprintf(a.out, "%s Attempt %d (%s, script v%s, %s)%s\n", branch, at.Attempt, at.Status, at.Version, at.StartedAt, cur)
					for _, m := range at.Mutations {
						fmt.Fprintf(a.out, "│  ├─ %s.%s %s — %s\n", m.Tool, m.Method, m.Target, m.Status)
					}
				}
				return nil
			})
		},
	}
	c.Flags().StringVar(&wf, "workflow", "", "the workflow, when the key exists in several")
	c.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	return c
}

func (a *app) itemActionCmd(verb string) *cobra.Command {
	var wf string
	short := map[string]string{
		"skip":      "skip an item: its pending work is dropped, visibly (an input's pending events, a task item)",
		"reprocess": "start a new attempt of an item (also when done or skipped); its writes really run again",
	}[verb]
	c := &cobra.Command{
		Use: verb + " ITEM", Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.perform("/api/v1/items/"+url.PathEscape(args[0])+"/"+verb+"?workflow="+url.QueryEscape(wf), nil, func(st store.Store) (string, error) {
				return engine.ItemAction(cmd.Context(), st, engine.ItemRef{Workflow: wf, Ref: args[0]}, verb, time.Now())
			})
		},
	}
	c.Flags().StringVar(&wf, "workflow", "", "the workflow, when the key exists in several")
	return c
}
