package api

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
)

// A paged list (issue 44) answers ?limit= (1 to 1000, default 50) and
// ?cursor= (from the previous answer) with its rows newest first, as the
// JSON array it always was, and says where its neighbours are in headers:
// Link: <…>; rel="next" (older rows), rel="prev" (newer rows), and
// X-Total-Count (the whole list's size, absent when a search narrows it).
// See docs/design.md, "Reads paged and bounded (issue 44)".

// cursor writes a position as the opaque ?cursor= of the page from it:
// "o" for the rows older than it, "n" for the newer.
func cursor(dir byte, p *store.Pos) string {
	return base64.RawURLEncoding.EncodeToString([]byte(string(dir) + strconv.FormatInt(p.At, 10) + "." + p.ID))
}

// pageOf reads ?limit=, ?cursor= and ?q= of a paged list.
func pageOf(r *http.Request) (store.Page, error) {
	q := r.URL.Query()
	p := store.Page{Limit: report.DefaultLimit, Search: strings.TrimSpace(q.Get("q"))}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 || n > apitype.MaxPage {
			return p, fmt.Errorf("limit %q: use a number from 1 to %d and follow the Link rel=\"next\" header for more, or 0 for every row", l, apitype.MaxPage)
		}
		p.Limit = n
	}
	c := q.Get("cursor")
	if c == "" {
		return p, nil
	}
	bad := fmt.Errorf("cursor %q is not one keep gave: use the cursor of a Link header of the previous page, or leave it out for the newest page", c)
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(raw) < 4 {
		return p, bad
	}
	at, id, ok := strings.Cut(string(raw[1:]), ".")
	ms, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || id == "" || !isText(id) {
		return p, bad
	}
	pos := &store.Pos{At: ms, ID: id}
	switch raw[0] {
	case 'o':
		p.Older = pos
	case 'n':
		p.Newer = pos
	default:
		return p, bad
	}
	return p, nil
}

// isText says s is UTF-8 without NUL bytes: what a text parameter may be
// on every store (keep's ids and titles are).
func isText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// pageHeaders writes the Link and X-Total-Count headers of a page.
func pageHeaders(w http.ResponseWriter, r *http.Request, pg report.Page) {
	link := func(dir byte, p *store.Pos, rel string) string {
		q := r.URL.Query()
		q.Set("cursor", cursor(dir, p))
		u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
		return "<" + u.String() + `>; rel="` + rel + `"`
	}
	var links []string
	if pg.Older != nil {
		links = append(links, link('o', pg.Older, "next"))
	}
	if pg.Newer != nil {
		links = append(links, link('n', pg.Newer, "prev"))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	if pg.Total >= 0 {
		w.Header().Set(apitype.TotalHeader, strconv.Itoa(pg.Total))
	}
}

// paged answers one page of a list: its rows (an array, [] for none) and
// its headers, or the refusal of its query.
func paged[T any](w http.ResponseWriter, r *http.Request, read func(store.Page) ([]T, report.Page, error)) {
	p, err := pageOf(r)
	if err != nil {
		Error(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if p.Limit == 0 {
		every(w, p, read)
		return
	}
	rows, pg, err := read(p)
	if err != nil {
		fail(w, err)
		return
	}
	pageHeaders(w, r, pg)
	reply(w, nonNil(rows))
}

// everyPage is the size of the pages every reads (a test makes it small).
var everyPage = apitype.MaxPage

// every answers ?limit=0, every row of the list (what it meant before lists
// were paged, and what clients written then still ask: the peerbench driver
// reads a workflow's runs so). It is read page by page along the keyset
// from the newest row when the request came, each page written out before
// the next is read, so keep holds one page in memory however long the list:
// the read is unbounded in time, never in memory. Rows made meanwhile are
// newer than the first page and left out; none repeats or vanishes. A page
// that fails after the first is written ends the answer without its closing
// bracket (the connection is cut), so a client never takes a cut list for
// the whole one.
func every[T any](w http.ResponseWriter, p store.Page, read func(store.Page) ([]T, report.Page, error)) {
	p.Limit = everyPage
	rows, pg, err := read(p)
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if pg.Total >= 0 {
		w.Header().Set(apitype.TotalHeader, strconv.Itoa(pg.Total))
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	bw.WriteString("[")
	first := true
	for {
		for _, row := range rows {
			if !first {
				bw.WriteString(",")
			}
			first = false
			if err := enc.Encode(row); err != nil {
				panic(http.ErrAbortHandler)
			}
		}
		if pg.Older == nil {
			break
		}
		p.Older, p.Newer = pg.Older, nil
		if rows, pg, err = read(p); err != nil {
			panic(http.ErrAbortHandler)
		}
	}
	bw.WriteString("]\n")
	if err := bw.Flush(); err != nil {
		panic(http.ErrAbortHandler)
	}
}
