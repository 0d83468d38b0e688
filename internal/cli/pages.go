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

// pagedReader makes c a paged list command: page reads one page and
// appends its rows to *rows (so --all gathers every page), show prints
// them as text; --json prints them as the JSON array the API answers.
// Either way what is not shown is said below (on stderr with --json, so
// that stdout stays one document).
func pagedReader[T any](a *app, c *cobra.Command, what string, search bool, page func(ctx context.Context, k *keepAPI, args []string, o apiclient.ListOptions) ([]T, apiclient.PageInfo, error), show func(ctx context.Context, k *keepAPI, rows []T) error) *cobra.Command {
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
				a.more(a.errOut, c, args, pf, len(rows), info)
				return nil
			}
			if err := show(ctx, k, rows); err != nil {
				return err
			}
			a.more(a.out, c, args, pf, len(rows), info)
			return nil
		})
	}
	a.addJSON(c)
	pf.add(c, what, search)
	return c
}

// more says how many rows a page left out, and the commands that show them.
func (a *app) more(w io.Writer, c *cobra.Command, args []string, pf pageFlags, shown int, info apiclient.PageInfo) {
	if info.Next == "" {
		return
	}
	cmd := "keep " + c.Name() + " " + strings.Join(args, " ")
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
