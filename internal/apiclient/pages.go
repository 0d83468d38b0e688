package apiclient

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/keep-run/keep/internal/apitype"
)

// ListOptions asks for one page of a paged list (issue 44): at most Limit
// rows (0: the API's default, 50), from Cursor (a PageInfo's Next or
// Prev; "" for the newest), whose id, key or title contains Search.
type ListOptions struct {
	Limit  int
	Cursor string
	Search string
	extra  url.Values
}

// PageInfo is where a page stands, as its answer's headers say: the
// cursors of the older page (Next) and the newer one (Prev), "" when there
// is none, and how many rows the whole list has (-1: not said).
type PageInfo struct {
	Next, Prev string
	Total      int
}

// getPage reads one page of the list at path.
func getPage[T any](ctx context.Context, c *Client, path string, o ListOptions) ([]T, PageInfo, error) {
	q := url.Values{}
	for k, v := range o.extra {
		q[k] = v
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.Search != "" {
		q.Set("q", o.Search)
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var rows []T
	h, err := c.do(ctx, http.MethodGet, path, nil, &rows)
	if err != nil {
		return nil, PageInfo{}, err
	}
	return rows, pageInfo(h), nil
}

// pageInfo reads a page's Link and X-Total-Count headers.
func pageInfo(h http.Header) PageInfo {
	pi := PageInfo{Total: -1}
	if t, err := strconv.Atoi(h.Get(apitype.TotalHeader)); err == nil {
		pi.Total = t
	}
	for _, l := range h.Values("Link") {
		for _, part := range strings.Split(l, ",") {
			target, params, ok := strings.Cut(strings.TrimSpace(part), ";")
			target = strings.TrimSpace(target)
			if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			u, err := url.Parse(target[1 : len(target)-1])
			if err != nil {
				continue
			}
			switch strings.TrimSpace(params) {
			case `rel="next"`:
				pi.Next = u.Query().Get("cursor")
			case `rel="prev"`:
				pi.Prev = u.Query().Get("cursor")
			}
		}
	}
	return pi
}

// every follows a list's Next cursors to its end, a page of the largest
// size at a time.
func every[T any](page func(ListOptions) ([]T, PageInfo, error)) ([]T, error) {
	var all []T
	o := ListOptions{Limit: apitype.MaxPage}
	for {
		rows, pi, err := page(o)
		if err != nil {
			return nil, err
		}
		all = append(all, rows...)
		if pi.Next == "" {
			if all == nil {
				all = []T{}
			}
			return all, nil
		}
		o.Cursor = pi.Next
	}
}
