package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/apitype"
)

// webhooksCmd shows a workflow's webhooks and their last deliveries, as
// GET /api/v1/workflows/{wf}/webhooks answers them (issue 26).
//
// --take and --drop act on the deliveries keep holds for a reason of its
// own (issue 40): the ones --delivery names, or all of them.
func (a *app) webhooksCmd() *cobra.Command {
	var limit int
	var take, drop, yes bool
	var ids []int64
	c := reader(a, &cobra.Command{Use: "webhooks WORKFLOW", Short: "show a workflow's webhooks (URL, verification, secret's name) and their last deliveries: accepted, duplicate, held, refused, failed; --take or --drop the held ones", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, k *keepAPI, args []string) (apitype.WebhooksReply, error) {
			return k.Webhooks(ctx, args[0], limit)
		},
		func(_ context.Context, _ *keepAPI, r apitype.WebhooksReply) error { a.printWebhooks(r); return nil })
	read := c.RunE
	c.RunE = func(cmd *cobra.Command, args []string) error {
		switch {
		case take && drop:
			return fmt.Errorf("--take and --drop: choose one")
		case !take && !drop:
			if len(ids) > 0 {
				return fmt.Errorf("--delivery names held deliveries to --take or --drop: add one of them")
			}
			return read(cmd, args)
		}
		wf := args[0]
		which := "every held delivery"
		if len(ids) > 0 {
			which = fmt.Sprintf("the held deliveries %v", ids)
		}
		if drop {
			if err := a.confirm(yes, fmt.Sprintf("Drop %s of %s? Each is recorded refused and its request forgotten; its sender will not send it again.", which, wf)); err != nil {
				return err
			}
		}
		var sel []int64
		if len(ids) > 0 {
			sel = ids
		}
		return a.perform(cmd.Context(), func(c *keepAPI) (string, string, error) {
			var r apitype.WorkflowActionReply
			var err error
			if take {
				r, err = c.TakeHeld(cmd.Context(), wf, sel)
			} else {
				r, err = c.DropHeld(cmd.Context(), wf, sel)
			}
			return r.Message, "", err
		})
	}
	c.Flags().IntVar(&limit, "limit", 20, "how many of the last deliveries to show (1 to 1000)")
	c.Flags().BoolVar(&take, "take", false, "take the held deliveries now, whatever they wait for (keep serve takes them within a second; one still blocked is held again, saying why)")
	c.Flags().BoolVar(&drop, "drop", false, "drop the held deliveries: each is recorded refused and its request forgotten")
	c.Flags().Int64SliceVar(&ids, "delivery", nil, "with --take or --drop: the held deliveries' records (RECORD in the list; repeat or comma-separate), instead of all")
	c.Flags().BoolVar(&yes, "yes", false, "with --drop: do not ask for a confirmation")
	return c
}

func (a *app) printWebhooks(r apitype.WebhooksReply) {
	if len(r.Webhooks) == 0 {
		fmt.Fprintf(a.out, "%s declares no webhooks\n", r.Workflow)
		return
	}
	if !r.Served {
		fmt.Fprintf(a.out, "no keep serve serves webhooks for this data directory: start one with --webhooks-addr ADDR, then each is POST http://ADDR/hooks/%s/NAME\n\n", r.Workflow)
	}
	w := a.table()
	fmt.Fprintln(w, "WEBHOOK\tURL\tVERIFY\tSECRET\tDELIVERY ID\tPUBLISHES\tACCEPTED\tDUPLICATE\tHELD\tREFUSED\tFAILED")
	for _, h := range r.Webhooks {
		url := h.URL
		if url == "" {
			url = h.Path
		}
		verify := h.Verify
		if h.Header != "" {
			verify += " (" + h.Header + ")"
		}
		fmt.Fprintf(w, "%s\tPOST %s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", h.Name, url, verify, h.Secret, h.Dedupe, strings.Join(h.Publishes, ", "),
			h.Counts["accepted"], h.Counts["duplicate"], h.Counts["held"], h.Counts["refused"], h.Counts["failed"])
	}
	w.Flush()
	if len(r.Held) > 0 {
		fmt.Fprintf(a.out, "\nHELD (%d): kept for a reason of keep's own, each taken once it is gone; keep webhooks %s --take or --drop [--delivery RECORD]\n", len(r.Held), r.Workflow)
		w = a.table()
		fmt.Fprintln(w, "  RECEIVED\tRECORD\tWEBHOOK\tDELIVERY\tWAITS FOR\tREASON")
		for _, d := range r.Held {
			fmt.Fprintf(w, "  %s\t%d\t%s\t%s\t%s\t%s\n", d.ReceivedAt, d.Record, d.Webhook, crop(d.DeliveryID, 40), d.HeldFor, crop(d.Reason, 160))
		}
		w.Flush()
	}
	fmt.Fprintf(a.out, "\nLAST DELIVERIES (%d)\n", len(r.Deliveries))
	if len(r.Deliveries) == 0 {
		fmt.Fprintln(a.out, "  none yet")
		return
	}
	w = a.table()
	fmt.Fprintln(w, "  RECEIVED\tRECORD\tWEBHOOK\tDELIVERY\tSTATUS\tREASON")
	for _, d := range r.Deliveries {
		fmt.Fprintf(w, "  %s\t%d\t%s\t%s\t%s\t%s\n", d.ReceivedAt, d.Record, d.Webhook, crop(d.DeliveryID, 40), d.Status, crop(d.Reason, 160))
	}
	w.Flush()
}
