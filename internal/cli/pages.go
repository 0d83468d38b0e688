package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/apiclient"
)

// pageFlags are a list command's paging (issue 44): it shows the newest
// page (--limit rows), the page a --cursor names, or every row (--all,
// following the API's cursors), and says how many more there are and how
// to see them.
type pageFlags struct {
	limit  int
	all    bool
	cursor string
	search string
}

func (p *pageFlags) add(c *cobra.Command, what string, search bool) {
	c.Flags().IntVar(&p.limit, "limit", 50, "how many "+what+" to show, newest first (1 to 1000; 0: every one, as --all)")
	c.Flags().BoolVar(&p.all, "all", false, "show every one of the "+what+", reading page after page")
	c.Flags().StringVar(&p.cursor, "cursor", "", "show the page this cursor names (printed below a page that has more)")
	if search {
		c.Flags().StringVar(&p.search, "search", "", "only those whose id, key or title contains this")
	}
}

// read reads what the flags ask for with page.
func (p *pageFlags) read(page func(apiclient.ListOptions) (int, apiclient.PageInfo, error)) (apiclient.PageInfo, error) {
	// --limit 0 meant every run before lists were paged (keep runs WF
	// --limit 0): it still does, read page after page as --all.
	if p.limit == 0 {
		p.all = true
	}
	if !p.all && (p.limit < 1 || p.limit > 1000) {
		return apiclient.PageInfo{}, &exitError{code: exitUsageCode, err: fmt.Errorf("--limit %d: use a number from 1 to 1000, or --all (or --limit 0) for every one", p.limit)}
	}
	o := apiclient.ListOptions{Limit: p.limit, Cursor: p.cursor, Search: p.search}
	if p.all {
		o.Limit = 1000
	}
	for {
		_, info, err := page(o)
		if err != nil || !p.all || info.Next == "" {
			return info, err
		}
		o.Cursor = info.Next
	}
}

// listed says what a paged list command lists (its rows' name, for the
// flags' help) and whether it takes --search.
type listed struct {
	what   string
	search bool
}

// pagedReader makes c a paged list command: page reads one page and
// appends its rows to *rows (so --all gathers every page), show prints
// them as text; --json prints them as the JSON array the API answers.
// Either way what is not shown is said below (on stderr with --json, so
// that stdout stays one document).
func pagedReader[T any](a *app, c *cobra.Command, l listed, page func(ctx context.Context, k *keepAPI, args []string, o apiclient.ListOptions) ([]T, apiclient.PageInfo, error), show func(ctx context.Context, k *keepAPI, rows []T) error) *cobra.Command {
	var pf pageFlags
	c.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		return a.read(ctx, func(k *keepAPI) error {
			rows := []T{}
			info, err := pf.read(func(o apiclient.ListOptions) (int, apiclient.PageInfo, error) {
				got, info, err := page(ctx, k, args, o)
				rows = append(rows, got...)
				return len(got), info, err
			})
			if err != nil {
				return err
			}
			if a.jsonOut {
				if err := a.printJSON(rows); err != nil {
					return err
				}
				pf.more(a.errOut, listCommand(c, args), len(rows), info)
				return nil
			}
			if err := show(ctx, k, rows); err != nil {
				return err
			}
			pf.more(a.out, listCommand(c, args), len(rows), info)
			return nil
		})
	}
	a.addJSON(c)
	pf.add(c, l.what, l.search)
	return c
}

// listCommand is the list command as typed again to see more: keep, its
// name and its arguments.
func listCommand(c *cobra.Command, args []string) string {
	return "keep " + c.Name() + " " + strings.Join(args, " ")
}

// more says how many rows a page left out, and the commands (cmd, with
// the flags that chose the rows) that show them.
func (pf pageFlags) more(w io.Writer, cmd string, shown int, info apiclient.PageInfo) {
	if info.Next == "" {
		return
	}
	if pf.search != "" {
		cmd += fmt.Sprintf(" --search %q", pf.search)
	}
	left := "more"
	if info.Total >= 0 && pf.cursor == "" {
		left = fmt.Sprintf("%d more", info.Total-shown)
		fmt.Fprintf(w, "showing the newest %d of %d; %s: %s --all, or the next page: %s --limit %d --cursor %s\n", shown, info.Total, left, cmd, cmd, pf.limit, info.Next)
		return
	}
	fmt.Fprintf(w, "showing %d; %s: %s --all, or the next page: %s --limit %d --cursor %s\n", shown, left, cmd, cmd, pf.limit, info.Next)
}
