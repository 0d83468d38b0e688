package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/inproc"
)

// migrateCmd moves an installation's state to another store (issue 14):
// from the embedded SQLite file to PostgreSQL, typically.
func (a *app) migrateCmd() *cobra.Command {
	var from, to string
	c := &cobra.Command{
		Use:   "migrate --to postgres://… [--from sqlite:///path/keep.db]",
		Short: "copy everything keep stores (every workflow's versions, items, events, runs, mutations, decisions, grants and repairs; accounts; notices sent) into an empty store",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return &exitError{code: exitUsageCode, err: fmt.Errorf("--to names the store to copy into, e.g. --to postgres://user@host/db")}
			}
			m, err := inproc.Migrate(cmd.Context(), a.dataDir, from, to)
			if errors.Is(err, inproc.ErrSameStore) {
				return &exitError{code: exitUsageCode, err: err}
			}
			if err != nil {
				return err
			}
			n := m.Counts
			if a.jsonOut {
				return a.printJSON(n)
			}
			fmt.Fprintf(a.out, "copied %d workflows from %s to %s: %d versions, %d handlers, %d items (%d attempts), %d events, %d runs, %d mutations, %d decisions, %d grants, %d repairs, %d webhook deliveries, %d connected accounts, %d secrets, %d notices sent\n",
				n.Workflows, m.From, m.To, n.Versions, n.Handlers, n.Items, n.Attempts, n.Events, n.Runs, n.Mutations, n.Decisions, n.Grants, n.Repairs, n.Deliveries, n.Connections, n.Secrets, n.Notices)
			fmt.Fprintf(a.out, "from now on, pass --store %s (or set KEEP_STORE) to every command; the old store is left as it was\n", m.To)
			return nil
		},
	}
	c.Flags().StringVar(&from, "from", "", "the store to copy from (default: keep.db in the data directory)")
	c.Flags().StringVar(&to, "to", "", "the empty store to copy into, e.g. postgres://user@host/db")
	a.addJSON(c)
	return c
}
