package cli

import (
	"fmt"
	"strings"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/inproc"
	"github.com/spf13/cobra"
)

// connectorsCmd prints what the connectors declare: the reference of
// docs/scripts.md is generated from the same declarations.
func (a *app) connectorsCmd() *cobra.Command {
	var markdown bool
	c := &cobra.Command{
		Use:   "connectors",
		Short: "list the connectors scripts can call: each method's parameters, result, identity, reconcile and errors",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(a.config())
			if err != nil {
				return err
			}
			switch {
			case a.jsonOut:
				return a.printJSON(inproc.Connectors(cfg))
			case markdown:
				fmt.Fprint(a.out, inproc.ConnectorsMarkdown(cfg))
				return nil
			}
			infos := inproc.Connectors(cfg)
			w := a.table()
			fmt.Fprintln(w, "METHOD\tKIND\tIDENTITY\tRECONCILE\tWHAT IT DOES")
			for _, c := range infos {
				for _, m := range c.Methods {
					rec := "-"
					switch {
					case m.Reconcile == "":
					case len(m.Reconcile) > 5 && m.Reconcile[:5] == "none:":
						rec = "none"
					default:
						rec = "yes"
					}
					fmt.Fprintf(w, "ctx.%s.%s\t%s\t%s\t%s\t%s\n", c.Name, m.Name, crop(m.Kind, 24), identityText(m.Identity), rec, crop(m.Summary, 70))
				}
			}
			if err := w.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(a.out, "\nEverything about each method: keep connectors --markdown, or docs/scripts.md.")
			return nil
		},
	}
	c.Flags().BoolVar(&markdown, "markdown", false, "print the reference as docs/scripts.md has it")
	a.addJSON(c)
	return c
}

func identityText(names []string) string {
	if len(names) == 0 {
		return "-"
	}
	return strings.Join(names, ", ")
}
