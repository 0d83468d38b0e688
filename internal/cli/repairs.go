package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// repairsCmd shows the Maintainer's repairs of a workflow and lets a person
// approve or reject one it held.
func (a *app) repairsCmd() *cobra.Command {
	var approve, reject string
	var full bool
	c := &cobra.Command{
		Use:   "repairs WORKFLOW [--approve ID | --reject ID]",
		Short: "the Maintainer's repairs of a workflow's failed runs: each attempt, why it was refused, held or activated, and its cost",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			wf := args[0]
			if approve != "" && reject != "" {
				return fmt.Errorf("give --approve or --reject, not both")
			}
			if id := approve + reject; id != "" {
				verb := "approve"
				if reject != "" {
					verb = "reject"
				}
				return a.perform(cmd.Context(), func(c *keepAPI) (string, string, error) {
					r, err := c.DecideRepair(cmd.Context(), wf, id, verb)
					return r.Message, wf, err
				})
			}
			return a.read(cmd.Context(), func(k *keepAPI) error {
				rs, err := k.Repairs(cmd.Context(), wf)
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(rs)
				}
				if len(rs) == 0 {
					fmt.Fprintf(a.out, "the Maintainer has not repaired %s\n", wf)
					return nil
				}
				total := 0
				for _, r := range rs {
					total += r.Tokens
					fmt.Fprintf(a.out, "repair %s  run %s  attempt %d  %s  %d tokens  %s\n  %s\n", shortRepair(r.ID), r.RunID, r.Attempt, strings.ToUpper(r.Status), r.Tokens, r.At, r.Reason)
					if r.Explanation != "" {
						fmt.Fprintf(a.out, "  the model said: %s\n", crop(r.Explanation, 400))
					}
					if full && r.Script != "" {
						fmt.Fprintf(a.out, "  script:\n%s\n", indent(r.Script))
					}
					if r.Diff != "" && (full || r.Status == "held" || r.Status == "activated") {
						fmt.Fprintf(a.out, "  diff against the version it repairs:\n%s\n", indent(r.Diff))
					}
					if b := r.BlastRadius; b != nil {
						fmt.Fprintf(a.out, "  blast radius: version %s applied %d writes, for %d inputs and items", b.Version, b.Writes, len(b.Inputs)+b.More)
						if len(b.Inputs) > 0 {
							fmt.Fprintf(a.out, ": %s", strings.Join(b.Inputs, "; "))
						}
						if b.More > 0 {
							fmt.Fprintf(a.out, " and %d more", b.More)
						}
						fmt.Fprintln(a.out)
					}
					if r.Status == "held" {
						fmt.Fprintf(a.out, "  decide: keep repairs %s --approve %s   or   --reject %s\n", wf, shortRepair(r.ID), shortRepair(r.ID))
					}
				}
				fmt.Fprintf(a.out, "%d tokens in all\n", total)
				return nil
			})
		},
	}
	c.Flags().StringVar(&approve, "approve", "", "activate a held repair as the next minor version (the failed run retries on it)")
	c.Flags().StringVar(&reject, "reject", "", "reject a held repair")
	c.Flags().BoolVar(&full, "script", false, "print each proposed script")
	a.addJSON(c)
	return c
}

func shortRepair(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
