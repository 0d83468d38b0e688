package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/apitype"
)

// graphCmd prints a workflow drawn (issue 42), as the page draws it: each
// node by column with its live counts, and what it sends work to.
func (a *app) graphCmd() *cobra.Command {
	return reader(a, &cobra.Command{Use: "graph WORKFLOW", Short: "show a workflow as its page draws it: producers, webhooks → topics → consumers → connectors, with live counts", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, k *keepAPI, args []string) (apitype.Graph, error) {
			return k.Graph(ctx, args[0])
		},
		func(_ context.Context, _ *keepAPI, g apitype.Graph) error { a.printGraph(g); return nil })
}

func (a *app) printGraph(g apitype.Graph) {
	fmt.Fprintf(a.out, "%s version %s (done today: %s UTC)\n", g.Workflow, g.Version, g.Day)
	to := map[string][]string{}
	for _, e := range g.Edges {
		t := e.To
		if e.Kind != "" { // a connector method: written to or read from
			t += " (" + e.Kind + "s)"
		}
		to[e.From] = append(to[e.From], t)
	}
	w := a.table()
	fmt.Fprintln(w, "NODE\tPENDING\tRESERVED\tBLOCKED\tDONE TODAY\tTO")
	for col := 0; col <= 3; col++ {
		for _, n := range g.Nodes {
			if n.Column != col {
				continue
			}
			name := n.Kind + " " + n.Name
			if n.Kind == "api" {
				name = "the event API: " + n.Name
			}
			blocked := fmt.Sprint(n.Blocked)
			if n.BlockedRun != "" {
				blocked += " (run " + n.BlockedRun + ")"
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%s\n", name, n.Pending, n.Reserved, blocked, n.DoneToday, strings.Join(to[n.ID], ", "))
			if len(n.Targets) > 0 {
				fmt.Fprintf(w, "  → %s\t\t\t\t\t\n", crop(strings.Join(n.Targets, ", "), 80))
			}
			if n.Intake != nil {
				fmt.Fprintf(w, "  today: %s\t\t\t\t\t\n", intakeLine(n.Kind, *n.Intake))
			}
		}
	}
	w.Flush()
}

// intakeLine says what a webhook or the event API took in today.
func intakeLine(kind string, x apitype.GraphIntake) string {
	if kind == "api" {
		return fmt.Sprintf("%d posted", x.Received)
	}
	last := "never"
	if x.LastReceived != "" {
		last = x.LastReceived
	}
	return fmt.Sprintf("%d received (%d accepted, %d duplicate, %d refused, %d failed), %d held now, last %s",
		x.Received, x.Accepted, x.Duplicate, x.Refused, x.Failed, x.Held, last)
}

// activityCmd prints what a workflow did per hour (issue 42), as the
// page's chart draws it.
func (a *app) activityCmd() *cobra.Command {
	var hours int
	c := reader(a, &cobra.Command{Use: "activity WORKFLOW", Short: "show what a workflow did per hour: inputs registered, writes applied, failures, minutes blocked", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, k *keepAPI, args []string) (apitype.Activity, error) {
			return k.Activity(ctx, args[0], hours)
		},
		func(_ context.Context, _ *keepAPI, v apitype.Activity) error { a.printActivity(v); return nil })
	c.Flags().IntVar(&hours, "hours", 24, "how many hours back (168 for a week)")
	return c
}

func (a *app) printActivity(v apitype.Activity) {
	fmt.Fprintf(a.out, "%s from %s to %s\n", v.Workflow, v.From, v.To)
	w := a.table()
	fmt.Fprintln(w, "HOUR\tINPUTS\tWRITES\tFAILURES\tBLOCKED MIN")
	for _, h := range v.Hours {
		if h.Inputs == 0 && h.Writes == 0 && h.Failures == 0 && h.BlockedMinutes == 0 {
			continue
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\n", h.Start, h.Inputs, h.Writes, h.Failures, h.BlockedMinutes)
	}
	w.Flush()
}
