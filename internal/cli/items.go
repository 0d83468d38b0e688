package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/apiclient"
	"github.com/keep-run/keep/internal/apitype"
)

func (a *app) itemsCmd() *cobra.Command {
	var orphaned bool
	c := pagedReader(a, &cobra.Command{Use: "items WORKFLOW", Short: "list a workflow's newest items (inputs and task items) with status and attempt", Args: cobra.ExactArgs(1)}, listed{"items", false},
		func(ctx context.Context, k *keepAPI, args []string, o apiclient.ListOptions) ([]apitype.Item, apiclient.PageInfo, error) {
			return k.ItemsPage(ctx, args[0], orphaned, o)
		},
		func(_ context.Context, _ *keepAPI, items []apitype.Item) error {
			if len(items) == 0 {
				fmt.Fprintln(a.out, "no items")
				return nil
			}
			w := a.table()
			fmt.Fprintln(w, "STATUS\tATTEMPT\tKIND\tKEY\tTITLE")
			for _, it := range items {
				status := string(it.Status)
				if it.Orphaned {
					status += " (orphaned)"
				}
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", status, it.Attempt, it.Kind, crop(it.Key, 40), crop(it.Title, 60))
			}
			return w.Flush()
		})
	c.Flags().BoolVar(&orphaned, "orphaned", false, "only items a new major version left behind")
	return c
}

func (a *app) showItemCmd() *cobra.Command {
	var wf string
	c := reader(a, &cobra.Command{Use: "item ID|KEY", Short: "show an item and its attempts, each with its mutations", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, k *keepAPI, args []string) (apitype.ItemDetail, error) {
			return k.Item(ctx, args[0], wf)
		},
		func(_ context.Context, _ *keepAPI, d apitype.ItemDetail) error { a.printItem(d); return nil })
	c.Flags().StringVar(&wf, "workflow", "", "the workflow, when the key exists in several")
	return c
}

// printItem draws an item as a tree: its attempts, each with its writes.
func (a *app) printItem(d apitype.ItemDetail) {
	fmt.Fprintf(a.out, "Item: %s\n  key: %s (%s, workflow %s)\n  status: %s\n", d.Item.Title, d.Item.Key, d.Item.Kind, d.Item.Workflow, d.Item.Status)
	for i, at := range d.Attempts {
		branch, under := "├─", "│  "
		if i == len(d.Attempts)-1 {
			branch, under = "└─", "   "
		}
		cur := ""
		if at.Current {
			cur = "  ← current"
		}
		fmt.Fprintf(a.out, "%s Attempt %d (%s, script v%s, %s)%s\n", branch, at.Attempt, at.Status, at.Version, at.StartedAt, cur)
		for j, m := range at.Mutations {
			leaf := "├─"
			if j == len(at.Mutations)-1 {
				leaf = "└─"
			}
			fmt.Fprintf(a.out, "%s%s %s.%s %s — %s\n", under, leaf, m.Tool, m.Method, m.Target, m.Status)
		}
	}
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
			return a.perform(cmd.Context(), func(c *keepAPI) (string, string, error) {
				r, err := c.ItemAction(cmd.Context(), args[0], verb, wf)
				return r.Message, r.Workflow, err
			})
		},
	}
	c.Flags().StringVar(&wf, "workflow", "", "the workflow, when the key exists in several")
	return c
}
