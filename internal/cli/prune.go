package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/inproc"
)

// pruneCmd is keep prune [--dry-run]: finished work's history past
// [retention] is pruned now, through keep's API (POST /api/v1/prune) as
// every action: by the keep serve running on the data directory (under
// its own [retention]), or in this process (under this keep.toml's).
func (a *app) pruneCmd() *cobra.Command {
	var dryRun bool
	c := &cobra.Command{
		Use:   "prune [--dry-run]",
		Short: "drop the traces and payloads of work finished before [retention] days (keep serve does it every hour)",
		Long: "prune drops the bodies of finished work older than keep.toml's [retention] days: the traces and results of done and skipped runs, " +
			"the payloads of consumed events, the params of applied writes (their results stay), the requests of settled webhook deliveries. " +
			"What makes work idempotent stays (input ids, messageIds, item keys, write identities and outcomes, the decision log), " +
			"as does every unfinished run and the newest done runs the Maintainer replays. keep.db then gives the freed pages back to the disk.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := a.apiFor(cmd.Context(), inproc.APIOptions{ConfigFile: a.config(), MustExist: true})
			if err != nil {
				return err
			}
			defer k.Close()
			rep, err := k.Prune(cmd.Context(), dryRun)
			if err != nil {
				return err
			}
			a.printPrune(rep)
			return nil
		},
	}
	c.Flags().BoolVar(&dryRun, "dry-run", false, "say what would be pruned, and prune nothing")
	return c
}

func (a *app) printPrune(rep apitype.PruneReply) {
	verb := "pruned"
	if rep.DryRun {
		verb = "would prune"
	}
	if rep.Before == 0 {
		fmt.Fprintln(a.out, "nothing to prune: [retention] days = 0 keeps history forever")
		return
	}
	fmt.Fprintf(a.out, "%s the bodies of work finished before %s:\n", verb, time.UnixMilli(rep.Before).UTC().Format("2006-01-02 15:04 UTC"))
	for _, c := range rep.Kinds {
		fmt.Fprintf(a.out, "  %-11s %8d rows  %s\n", c.Kind, c.Rows, byteText(c.Bytes))
	}
	fmt.Fprintf(a.out, "kept whole: %d old runs (the newest done runs of each version, the last retried run)\n", rep.Spared)
	if rep.DryRun {
		return
	}
	if rep.SizeBefore > 0 {
		fmt.Fprintf(a.out, "keep.db: %s before, %s after (%s given back to the disk)\n", byteText(rep.SizeBefore), byteText(rep.SizeAfter), byteText(rep.Freed))
	} else {
		fmt.Fprintln(a.out, "the database reuses the space freed (PostgreSQL's autovacuum)")
	}
}

// byteText writes a size the way a person reads it.
func byteText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
