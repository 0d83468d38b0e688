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
func (a *app) webhooksCmd() *cobra.Command {
	var limit int
	c := reader(a, &cobra.Command{Use: "webhooks WORKFLOW", Short: "show a workflow's webhooks (URL, verification, secret's name) and their last deliveries: accepted, duplicate, refused, failed", Args: cobra.ExactArgs(1)},
		func(ctx context.Context, k *keepAPI, args []string) (apitype.WebhooksReply, error) {
			return k.Webhooks(ctx, args[0], limit)
		},
		func(_ context.Context, _ *keepAPI, r apitype.WebhooksReply) error { a.printWebhooks(r); return nil })
	c.Flags().IntVar(&limit, "limit", 20, "how many of the last deliveries to show (1 to 1000)")
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
	fmt.Fprintln(w, "WEBHOOK\tURL\tVERIFY\tSECRET\tDELIVERY ID\tPUBLISHES\tACCEPTED\tDUPLICATE\tREFUSED\tFAILED")
	for _, h := range r.Webhooks {
		url := h.URL
		if url == "" {
			url = h.Path
		}
		verify := h.Verify
		if h.Header != "" {
			verify += " (" + h.Header + ")"
		}
		fmt.Fprintf(w, "%s\tPOST %s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", h.Name, url, verify, h.Secret, h.Dedupe, strings.Join(h.Publishes, ", "),
			h.Counts["accepted"], h.Counts["duplicate"], h.Counts["refused"], h.Counts["failed"])
	}
	w.Flush()
	fmt.Fprintf(a.out, "\nLAST DELIVERIES (%d)\n", len(r.Deliveries))
	if len(r.Deliveries) == 0 {
		fmt.Fprintln(a.out, "  none yet")
		return
	}
	w = a.table()
	fmt.Fprintln(w, "  RECEIVED\tWEBHOOK\tDELIVERY\tSTATUS\tREASON")
	for _, d := range r.Deliveries {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", d.ReceivedAt, d.Webhook, crop(d.DeliveryID, 40), d.Status, crop(d.Reason, 160))
	}
	w.Flush()
}
