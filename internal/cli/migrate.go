package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/store/backend"
	"github.com/keep-run/keep/internal/store/transfer"
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
			src, err := backend.Parse(from, a.dataDir)
			if err != nil {
				return err
			}
			dst, err := backend.Parse(to, a.dataDir)
			if err != nil {
				return err
			}
			if _, err := os.Stat(src.Path); src.Kind == backend.SQLite && err != nil {
				return fmt.Errorf("no keep data at %s to copy (pass --data or --from)", src.Path)
			}
			if src.Show() == dst.Show() {
				return &exitError{code: exitUsageCode, err: fmt.Errorf("--from and --to name the same store (%s)", src.Show())}
			}
			// The source's engine lock: no keep serve may change it meanwhile.
			source, release, err := daemon.HoldStore(a.dataDir, src)
			if err != nil {
				return err
			}
			defer func() { release(); source.Close() }()
			dest, err := dst.Open()
			if err != nil {
				return err
			}
			defer dest.Close()
			n, err := transfer.Copy(cmd.Context(), source, dest)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(n)
			}
			fmt.Fprintf(a.out, "copied %d workflows from %s to %s: %d versions, %d handlers, %d items (%d attempts), %d events, %d runs, %d mutations, %d decisions, %d grants, %d repairs, %d connected accounts, %d secrets, %d notices sent\n",
				n.Workflows, src.Show(), dst.Show(), n.Versions, n.Handlers, n.Items, n.Attempts, n.Events, n.Runs, n.Mutations, n.Decisions, n.Grants, n.Repairs, n.Connections, n.Secrets, n.Notices)
			fmt.Fprintf(a.out, "from now on, pass --store %s (or set KEEP_STORE) to every command; the old store is left as it was\n", dst.Show())
			return nil
		},
	}
	c.Flags().StringVar(&from, "from", "", "the store to copy from (default: keep.db in the data directory)")
	c.Flags().StringVar(&to, "to", "", "the empty store to copy into, e.g. postgres://user@host/db")
	a.addJSON(c)
	return c
}
