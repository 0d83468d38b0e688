package google

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	gmail "google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

var (
	gmailRead   = []string{Scope("gmail.readonly"), Scope("gmail.modify"), "https://mail.google.com/"}
	gmailSend   = []string{Scope("gmail.send"), Scope("gmail.compose"), Scope("gmail.modify"), "https://mail.google.com/"}
	gmailModify = []string{Scope("gmail.modify"), "https://mail.google.com/"}
	// gmailHeaders reads headers only: what gmail.send's reconcile and a
	// reply's threading need. Gmail refuses searches (q) and bodies to a
	// token that carries it, even beside broader scopes, so keep asks for
	// it only when no broader Gmail scope is asked (ScopesFor).
	gmailHeaders = []string{Scope("gmail.metadata"), Scope("gmail.readonly"), Scope("gmail.modify"), "https://mail.google.com/"}
)

// keyHeader carries a sent message's idempotency key, so reconcile can
// recognise it in Sent even if a relay rewrote the Message-ID.
const keyHeader = "X-Keep-Idempotency-Key"

type gmailConn struct{ auth *Auth }

func (g *gmailConn) service(ctx context.Context, hc *http.Client) (*gmail.Service, error) {
	return gmail.NewService(ctx, g.auth.options(hc, "")...)
}

func newGmail(auth *Auth) *connector.Connector {
	g := &gmailConn{auth: auth}
	return &connector.Connector{
		Name: "gmail",
		Doc: "A Gmail mailbox, through the Gmail API with the account of `keep connect google`. " +
			"Try it without a Google account against `keep-fake google` (see the README).",
		Sources: map[string][]string{"gmail": {"email", "thread"}},
		Methods: map[string]*connector.Method{
			"search": {Name: "search", Kind: connector.KindRead, Scopes: gmailRead, Validate: validateSearch, Do: g.search, Doc: connector.MethodDoc{
				Summary: "Finds messages with Gmail's search syntax and, from one poll to the next, the messages that came into the mailbox since: Gmail's history (messages added), whatever their date, so mail Gmail delivers or indexes late is seen too.",
				Params: []connector.Param{
					{Name: "query", Type: "string", Doc: "Gmail search, e.g. `from:alice has:attachment` or `in:inbox invoice` (default: all mail but spam and trash)"},
					{Name: "after", Type: "string", Doc: "a cursor: a previous result's `lastCursor`; only messages that came in since come back (a number of milliseconds since 1970 starts from that date)"},
					{Name: "max", Type: "number", Doc: "at most this many messages, 1 to 500 (default 100)"},
				},
				ResultTS: "Array<{ id: string; threadId: string; from: string; to: string; subject: string; snippet: string; date: string; labels: string[] }> & { lastCursor: string }",
				Result: "an array of `{ id, threadId, from, to, subject, snippet, date, labels }` (`date` RFC 3339, `labels` by name) with a property `lastCursor` to pass as the next `after` " +
					"(so `return { cursor: emails.lastCursor }` never goes back, and more than `max` new messages are read over the next polls, none skipped). " +
					"The first polls read the mailbox oldest first, `max` at a time; then each poll returns the messages Gmail added since, in the order they came. " +
					"A message may come twice (one received in the cursor's millisecond during the first polls; every message after Gmail forgot the history id, typically a week without a poll, when keep reads the mailbox again as on the first poll): register it by `id`, which keeps one.",
				Errors: "401 after a refresh, a revoked grant, a missing scope: a permission error (the run waits for Reconnect); 403 `accessNotConfigured`: permission, enable the Gmail API in the OAuth client's Cloud project; 429, 403 usage limits and 5xx: transient, retried.",
				Limits: "Gmail allows 250 quota units a second per user: a list page costs 5 (history or search), each message read 5, so a poll of 100 new messages costs about 500 units (two seconds' worth). A poll reads at most `max` messages Gmail added since the last (with a `query`, one search more, from the oldest one's date: Gmail's history cannot search); the first polls list every match (ids only, 500 a page) and read at most `max` (plus those in the cursor's millisecond). A 429 or 403 usage limit is retried after Google's Retry-After.",
			}},
			"get": {Name: "get", Kind: connector.KindReadByID, Scopes: gmailRead, Validate: func(a map[string]any) error { return need("gmail.get", a, "id") }, Do: g.get, Doc: connector.MethodDoc{
				Summary:  "Reads one message with its body.",
				Params:   []connector.Param{{Name: "id", Type: "string", Required: true, Doc: "the message's id (from search)"}},
				ResultTS: "{ id: string; threadId: string; from: string; to: string; cc: string; subject: string; snippet: string; date: string; labels: string[]; text: string; html: string }",
				Result:   "`{ id, threadId, from, to, cc, subject, snippet, date, labels, text, html }`: `text` the plain body (or the HTML's text when there is none), `html` the HTML body or \"\"",
				Errors:   "an id that does not exist is a logic error; otherwise as search.",
				Limits:   "one message read (5 quota units of Gmail's 250 a second per user) and the label names (1).",
			}},
			"send": {Name: "send", Kind: connector.KindMutate, Scopes: gmailSend, ReconcileScopes: gmailHeaders, Identity: []string{"to", "threadId"},
				Validate: validateSend, Do: g.send, Reconcile: g.reconcileSend, ComparePayload: connector.ComparePayloadOf("subject", "text", "html", "cc"),
				Target: func(a map[string]any) string { return "gmail.send to " + str(a["to"]) }, Doc: connector.MethodDoc{
					Summary: "Sends a message from the connected account. Its Message-ID is made from the write's idempotency key (the same for every attempt of the same write), and the key travels in the header `X-Keep-Idempotency-Key` (Gmail may replace the Message-ID; the header stays). " +
						"A reply (`threadId`) carries `In-Reply-To` and `References` naming the thread's last message, which keep reads first: Gmail puts a sent message in the thread only with them and a matching subject (`Re: ` + the thread's subject).",
					Params: []connector.Param{
						{Name: "to", Type: "string or array of strings", Required: true, Doc: "recipients (identity: with `threadId`, what the write is to)"},
						{Name: "subject", Type: "string", Required: true, Doc: "the subject"},
						{Name: "text", Type: "string", Required: true, Doc: "the plain-text body"},
						{Name: "html", Type: "string", Doc: "an HTML body sent beside the text"},
						{Name: "cc", Type: "string or array of strings", Doc: "copies"},
						{Name: "threadId", Type: "string", Doc: "the thread to reply in (from search or get); give the thread's subject, `Re: …`"},
						{Name: "subkey", Type: "string", Doc: "tells apart two sends of one run to the same recipients"},
					},
					ResultTS:  "{ id: string; threadId: string; messageId: string; reconciled?: boolean }",
					Result:    "`{ id, threadId, messageId }`; a reconciled send adds `reconciled: true`",
					Reconcile: fmt.Sprintf("reads the headers of the latest %d messages in Sent, looking for the key header `X-Keep-Idempotency-Key` (or the Message-ID keep gave): found means sent; not found (seen twice, after the settle time) means not sent, and keep sends it. With a scope that may search (not `gmail.metadata`), it first asks Gmail for the Message-ID (`rfc822msgid:`).", sentWindow),
					Errors:    "429 and 403 usage limits (`rateLimitExceeded`, `userRateLimitExceeded`, `dailyLimitExceeded`): transient, nothing sent (a daily quota is tried again after midnight Pacific time); 403 `accessNotConfigured`: permission, enable the Gmail API in the OAuth client's Cloud project; 401 after a refresh or a revoked grant: permission (Reconnect Google); a missing scope names it; 400 (bad address): logic; 5xx or no answer after the request went out: unknown, settled by reconcile.",
					Limits:    "Gmail allows 250 quota units a second per user (a send costs 100, so about 2 sends a second) and a daily sending limit (500 recipients a day for a personal account, 2,000 for Workspace); above them Google answers 429 or 403, which keep retries after Google's Retry-After. A reply reads its thread first (one `threads.get`).",
				}},
			"modifyLabels": {Name: "modifyLabels", Kind: connector.KindMutate, Scopes: gmailModify, Identity: []string{"id"},
				Validate: validateLabels, Do: g.modifyLabels, Reconcile: g.reconcileLabels, ComparePayload: connector.ComparePayloadOf("add", "remove"),
				Target: func(a map[string]any) string { return "gmail.modifyLabels of " + str(a["id"]) }, Doc: connector.MethodDoc{
					Summary: "Adds and removes labels of a message. Labels are names (`Processed`) or Gmail's system labels (`INBOX`, `UNREAD`, `STARRED`, `IMPORTANT`); a label to add that does not exist is created.",
					Params: []connector.Param{
						{Name: "id", Type: "string", Required: true, Doc: "the message's id (identity)"},
						{Name: "add", Type: "string or array of strings", Doc: "labels to add"},
						{Name: "remove", Type: "string or array of strings", Doc: "labels to remove"},
						{Name: "subkey", Type: "string", Doc: "tells apart two label changes of one run on the same message"},
					},
					Result:    "`{ id, labels }` (by name)",
					ResultTS:  "{ id: string; labels: string[]; reconciled?: boolean }",
					Reconcile: "reads the message's labels: every `add` present and every `remove` absent means applied, else not.",
					Errors:    "a message that does not exist: precondition (nothing to label); otherwise as send.",
					Limits:    "a modify costs 5 quota units of Gmail's 250 a second per user, a label to create 5 more; usage limits are retried.",
				}},
		},
	}
}

func validateSearch(a map[string]any) error {
	if q, ok := a["query"]; ok && q != nil {
		if _, isStr := q.(string); !isStr {
			return fmt.Errorf("gmail.search: query must be a string, like \"in:inbox invoice\"")
		}
	}
	if v, ok := a["after"]; ok && v != nil {
		if _, err := cursorOf(v); err != nil {
			return err
		}
	}
	if m, ok := a["max"]; ok && m != nil {
		if f, isNum := m.(float64); !isNum || f < 1 || f > 500 || f != float64(int(f)) {
			return fmt.Errorf("gmail.search: max must be a whole number from 1 to 500")
		}
	}
	return nil
}

// searchCursor is where gmail.search goes on from: either Gmail's history
// after a history id (mail added to the mailbox since, whatever its date,
// so mail Gmail indexes or delivers late is seen), or a sync by date
// under way (the first polls, or after Gmail forgot the history id),
// which goes on to the history from the id taken when it began.
type searchCursor struct {
	history uint64 // Gmail's history id; 0: none yet (take the profile's)
	syncing bool   // a sync by date under way
	date    int64  // the sync's progress: internalDate, ms since 1970
}

// String is the cursor as lastCursor carries it: "h<historyId>" or
// "s<historyId>.<ms>".
func (c searchCursor) String() string {
	if c.syncing {
		return "s" + strconv.FormatUint(c.history, 10) + "." + strconv.FormatInt(c.date, 10)
	}
	return "h" + strconv.FormatUint(c.history, 10)
}

// cursorOf reads gmail.search's after: the lastCursor of a previous
// result, or milliseconds since 1970 (as a string or a number: a cursor
// of keep before history ids, or a date to start from).
func cursorOf(v any) (searchCursor, error) {
	bad := fmt.Errorf("gmail.search: after must be a previous result's lastCursor, like \"h123456\" (got %v)", v)
	switch t := v.(type) {
	case nil:
		return searchCursor{syncing: true}, nil
	case float64:
		if t < 0 || t != float64(int64(t)) {
			return searchCursor{}, bad
		}
		return searchCursor{syncing: true, date: int64(t)}, nil
	case string:
		if t == "" {
			return searchCursor{syncing: true}, nil
		}
		if n, err := strconv.ParseInt(t, 10, 64); err == nil && n >= 0 {
			return searchCursor{syncing: true, date: n}, nil
		}
		switch t[0] {
		case 'h':
			if h, err := strconv.ParseUint(t[1:], 10, 64); err == nil && h > 0 {
				return searchCursor{history: h}, nil
			}
		case 's':
			hs, ds, ok := strings.Cut(t[1:], ".")
			h, err1 := strconv.ParseUint(hs, 10, 64)
			d, err2 := strconv.ParseInt(ds, 10, 64)
			if ok && err1 == nil && err2 == nil && h > 0 && d >= 0 {
				return searchCursor{history: h, syncing: true, date: d}, nil
			}
		}
	}
	return searchCursor{}, bad
}

func header(p *gmail.MessagePart, name string) string {
	if p == nil {
		return ""
	}
	for _, h := range p.Headers {
		if strings.EqualFold(h.Name, name) {
			return h.Value
		}
	}
	return ""
}

// labelNames maps label ids to names (one call per search).
func labelNames(svc *gmail.Service, ctx context.Context) (map[string]string, error) {
	ls, err := svc.Users.Labels.List("me").Context(ctx).Do()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range ls.Labels {
		out[l.Id] = l.Name
	}
	return out, nil
}

func summary(m *gmail.Message, names map[string]string) map[string]any {
	labels := []any{}
	for _, id := range m.LabelIds {
		if n, ok := names[id]; ok {
			labels = append(labels, n)
		} else {
			labels = append(labels, id)
		}
	}
	return map[string]any{"id": m.Id, "threadId": m.ThreadId, "from": header(m.Payload, "From"), "to": header(m.Payload, "To"),
		"subject": header(m.Payload, "Subject"), "snippet": m.Snippet, "date": time.UnixMilli(m.InternalDate).UTC().Format(time.RFC3339), "labels": labels}
}

func (g *gmailConn) search(ctx context.Context, c connector.Call) connector.Result {
	a := c.Args
	cur, _ := cursorOf(a["after"])
	max := 100
	if f, ok := a["max"].(float64); ok {
		max = int(f)
	}
	query := strings.TrimSpace(str(a["query"]))
	var found []*gmail.Message
	var names map[string]string
	var next searchCursor
	err := g.auth.read(ctx, "gmail.search", gmailRead, func(ctx context.Context, hc *http.Client) error {
		svc, err := g.service(ctx, hc)
		if err != nil {
			return err
		}
		if names, err = labelNames(svc, ctx); err != nil {
			return err
		}
		found, next, err = poll(ctx, svc, query, cur, max)
		return err
	})
	if err != nil {
		return connector.Result{Err: err}
	}
	items := []any{}
	for _, m := range found {
		items = append(items, summary(m, names))
	}
	return connector.Result{Value: connector.ListWith(items, map[string]any{"lastCursor": next.String()})}
}

// poll reads what came into the mailbox since cur: with a history id,
// the messages Gmail's history says were added since (historyTypes
// messageAdded), whatever their date — mail Gmail delivers or indexes
// after a later one is seen all the same; during a sync, by date (below).
// A history id Gmail no longer keeps (404: "perform a full sync") starts a
// sync from the mailbox's first message: mail seen before comes again,
// and registering inputs by id keeps one of each.
func poll(ctx context.Context, svc *gmail.Service, query string, cur searchCursor, max int) ([]*gmail.Message, searchCursor, error) {
	if !cur.syncing {
		found, next, err := added(ctx, svc, query, cur.history, max)
		var ge *googleapi.Error
		if !errors.As(err, &ge) || ge.Code != http.StatusNotFound {
			return found, next, err
		}
		cur = searchCursor{syncing: true} // the history id expired
	}
	if cur.history == 0 {
		// The history goes on from here: mail added while the sync reads
		// is in it (and may come twice).
		p, err := svc.Users.GetProfile("me").Context(ctx).Do()
		if err != nil {
			return nil, cur, err
		}
		cur.history = p.HistoryId
	}
	q := query
	if cur.date > 0 {
		// after: is in seconds; a second earlier, so the cursor's own
		// second is never cut off by how Gmail rounds.
		q = strings.TrimSpace(q + " after:" + strconv.FormatInt(cur.date/1000-1, 10))
	}
	found, more, err := oldestAfter(ctx, svc, q, cur.date, max)
	if err != nil {
		return nil, cur, err
	}
	for _, m := range found {
		cur.date = max64(cur.date, m.InternalDate)
	}
	if !more {
		cur.syncing = false // caught up: the history from here on
	}
	return found, cur, nil
}

// added returns the messages added to the mailbox after history id from
// that match query (all mail but spam and trash when query is ""), in the
// order Gmail added them, and the history id to go on from. It reads the
// messages of at most max added (a history record is taken whole): the
// id to go on from is the last record read, or the mailbox's current id
// when every record was. Gmail's history cannot search, so with a query
// the messages read are matched by one search from the oldest one's date.
func added(ctx context.Context, svc *gmail.Service, query string, from uint64, max int) ([]*gmail.Message, searchCursor, error) {
	records, current, err := historyAdded(ctx, svc, from)
	if err != nil {
		return nil, searchCursor{history: from}, err
	}
	next := searchCursor{history: current}
	msgs := map[string]*gmail.Message{}
	var order []string
	oldest := int64(-1)
	for i, r := range records {
		if len(order) > 0 && len(order)+len(r.ids) > max {
			next = searchCursor{history: records[i-1].id}
			break
		}
		for _, id := range r.ids {
			if _, ok := msgs[id]; ok {
				continue
			}
			m, err := svc.Users.Messages.Get("me", id).Format("metadata").MetadataHeaders("From", "To", "Subject", "Date").Context(ctx).Do()
			var ge *googleapi.Error
			if errors.As(err, &ge) && ge.Code == http.StatusNotFound {
				msgs[id] = nil // deleted since
				continue
			}
			if err != nil {
				return nil, searchCursor{history: from}, err
			}
			msgs[id] = m
			order = append(order, id)
			if oldest < 0 || m.InternalDate < oldest {
				oldest = m.InternalDate
			}
		}
	}
	matches := notSpamOrTrash
	if query != "" && len(order) > 0 {
		if matches, err = searchedSince(ctx, svc, query, oldest); err != nil {
			return nil, searchCursor{history: from}, err
		}
	}
	var found []*gmail.Message
	for _, id := range order {
		if m := msgs[id]; m != nil && matches(m) {
			found = append(found, m)
		}
	}
	return found, next, nil
}

// historyRecord is one record of Gmail's history: its id, and the ids of
// the messages it added.
type historyRecord struct {
	id  uint64
	ids []string
}

// historyAdded reads the mailbox's history of messages added after
// history id from, and its current history id.
func historyAdded(ctx context.Context, svc *gmail.Service, from uint64) ([]historyRecord, uint64, error) {
	var records []historyRecord
	var current uint64
	err := svc.Users.History.List("me").StartHistoryId(from).HistoryTypes("messageAdded").MaxResults(500).Pages(ctx, func(p *gmail.ListHistoryResponse) error {
		for _, h := range p.History {
			r := historyRecord{id: h.Id}
			for _, a := range h.MessagesAdded {
				if a.Message != nil {
					r.ids = append(r.ids, a.Message.Id)
				}
			}
			records = append(records, r)
		}
		current = p.HistoryId
		return nil
	})
	return records, current, err
}

// notSpamOrTrash matches a message as a search without in:spam or
// in:trash does.
func notSpamOrTrash(m *gmail.Message) bool {
	for _, l := range m.LabelIds {
		if l == "SPAM" || l == "TRASH" {
			return false
		}
	}
	return true
}

// searchedSince matches the messages that query finds, searched from the
// date of the oldest (ms) on: one search for the messages the history
// gave, which it cannot search.
func searchedSince(ctx context.Context, svc *gmail.Service, query string, oldest int64) (func(*gmail.Message) bool, error) {
	hits := map[string]bool{}
	q := strings.TrimSpace(query + " after:" + strconv.FormatInt(oldest/1000-1, 10))
	err := svc.Users.Messages.List("me").Q(q).MaxResults(500).Pages(ctx, func(p *gmail.ListMessagesResponse) error {
		for _, m := range p.Messages {
			hits[m.Id] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return func(m *gmail.Message) bool { return hits[m.Id] }, nil
}

// oldestAfter returns, oldest first, the max oldest messages matching q
// received after the cursor (ms), and every one received in the cursor's
// own millisecond (counted apart: a poll always moves on, and none of
// that millisecond is lost); more says matches newer than those were left
// for the next poll. Gmail lists newest first, in pages that may be
// short: every page is read (ids only, 500 a page), then messages are
// read from the oldest end until max are found — so a burst larger than
// max between two polls, or a first poll, is taken from its start and
// the cursor never passes mail it did not return.
func oldestAfter(ctx context.Context, svc *gmail.Service, q string, after int64, max int) (found []*gmail.Message, more bool, err error) {
	var ids []string
	err = svc.Users.Messages.List("me").Q(q).MaxResults(500).Pages(ctx, func(p *gmail.ListMessagesResponse) error {
		for _, m := range p.Messages {
			ids = append(ids, m.Id)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	counted := 0
	i := len(ids) - 1
	for ; i >= 0 && counted < max; i-- {
		m, err := svc.Users.Messages.Get("me", ids[i]).Format("metadata").MetadataHeaders("From", "To", "Subject", "Date").Context(ctx).Do()
		if err != nil {
			return nil, false, err
		}
		switch {
		case m.InternalDate < after:
		case m.InternalDate == after:
			found = append(found, m)
		default:
			found = append(found, m)
			counted++
		}
	}
	// Oldest first, as mail came in (within one millisecond too).
	sort.SliceStable(found, func(i, j int) bool { return found[i].InternalDate < found[j].InternalDate })
	return found, i >= 0, nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// message reads one message (format full, metadata or minimal) and the
// account's label names, which summary shows labels by.
func (g *gmailConn) message(ctx context.Context, hc *http.Client, id, format string) (*gmail.Message, map[string]string, error) {
	svc, err := g.service(ctx, hc)
	if err != nil {
		return nil, nil, err
	}
	names, err := labelNames(svc, ctx)
	if err != nil {
		return nil, nil, err
	}
	m, err := svc.Users.Messages.Get("me", id).Format(format).Context(ctx).Do()
	return m, names, err
}

func (g *gmailConn) get(ctx context.Context, c connector.Call) connector.Result {
	var out map[string]any
	err := g.auth.read(ctx, "gmail.get "+str(c.Args["id"]), gmailRead, func(ctx context.Context, hc *http.Client) error {
		m, names, err := g.message(ctx, hc, str(c.Args["id"]), "full")
		if err != nil {
			return err
		}
		out = summary(m, names)
		out["cc"] = header(m.Payload, "Cc")
		text, html := bodies(m.Payload)
		if text == "" && html != "" {
			text = stripTags(html)
		}
		out["text"], out["html"] = text, html
		return nil
	})
	if err != nil {
		return connector.Result{Err: err}
	}
	return connector.Result{Value: out}
}

// bodies finds the text/plain and text/html parts of a message.
func bodies(p *gmail.MessagePart) (text, html string) {
	if p == nil {
		return "", ""
	}
	decode := func(b *gmail.MessagePartBody) string {
		if b == nil || b.Data == "" {
			return ""
		}
		d, err := base64.URLEncoding.DecodeString(b.Data)
		if err != nil {
			d, _ = base64.RawURLEncoding.DecodeString(b.Data)
		}
		return string(d)
	}
	switch {
	case strings.HasPrefix(p.MimeType, "text/plain"):
		text = decode(p.Body)
	case strings.HasPrefix(p.MimeType, "text/html"):
		html = decode(p.Body)
	}
	for _, part := range p.Parts {
		t, h := bodies(part)
		if text == "" {
			text = t
		}
		if html == "" {
			html = h
		}
	}
	return text, html
}

func stripTags(h string) string {
	var b strings.Builder
	in := false
	for _, r := range h {
		switch {
		case r == '<':
			in = true
		case r == '>':
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return strings.TrimSpace(b.String())
}

func validateSend(a map[string]any) error {
	if err := need("gmail.send", a, "subject"); err != nil {
		return err
	}
	for _, k := range []string{"to", "cc"} {
		l, ok := strList(a[k])
		if !ok || (k == "to" && len(l) == 0) {
			return fmt.Errorf("gmail.send: %s must be an address or an array of addresses, like \"bob@example.com\"", k)
		}
		for _, addr := range l {
			if !strings.Contains(addr, "@") || strings.ContainsAny(addr, "\r\n") {
				return fmt.Errorf("gmail.send: %s %q is not an email address", k, addr)
			}
		}
	}
	if _, ok := a["text"].(string); !ok {
		return fmt.Errorf("gmail.send needs text (the plain-text body, a string)")
	}
	if h, ok := a["html"]; ok && h != nil {
		if _, isStr := h.(string); !isStr {
			return fmt.Errorf("gmail.send: html must be a string")
		}
	}
	if strings.ContainsAny(str(a["subject"]), "\r\n") {
		return fmt.Errorf("gmail.send: subject must be one line")
	}
	return nil
}

// messageID is the Message-ID of a send: the same for every attempt of one write.
func messageID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "<keep." + hex.EncodeToString(sum[:16]) + "@keep.run>"
}

// rfc822 builds the message a send hands Gmail; inReplyTo and references
// thread a reply ("" for none).
func rfc822(a map[string]any, key, inReplyTo, references string) string {
	to, _ := strList(a["to"])
	cc, _ := strList(a["cc"])
	var b strings.Builder
	h := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	h("To", strings.Join(to, ", "))
	if len(cc) > 0 {
		h("Cc", strings.Join(cc, ", "))
	}
	h("Subject", mime.QEncoding.Encode("utf-8", str(a["subject"])))
	h("Message-ID", messageID(key))
	h(keyHeader, key)
	if inReplyTo != "" {
		h("In-Reply-To", inReplyTo)
		h("References", strings.TrimSpace(references+" "+inReplyTo))
	}
	h("MIME-Version", "1.0")
	text, html := str(a["text"]), str(a["html"])
	if html == "" {
		h("Content-Type", "text/plain; charset=UTF-8")
		h("Content-Transfer-Encoding", "base64")
		b.WriteString("\r\n" + wrap(base64.StdEncoding.EncodeToString([]byte(text))))
		return b.String()
	}
	boundary := "keep-" + hex.EncodeToString([]byte(key))[:16]
	h("Content-Type", `multipart/alternative; boundary="`+boundary+`"`)
	for _, part := range []struct{ typ, body string }{{"text/plain", text}, {"text/html", html}} {
		b.WriteString("\r\n--" + boundary + "\r\nContent-Type: " + part.typ + "; charset=UTF-8\r\nContent-Transfer-Encoding: base64\r\n\r\n")
		b.WriteString(wrap(base64.StdEncoding.EncodeToString([]byte(part.body))))
	}
	b.WriteString("\r\n--" + boundary + "--\r\n")
	return b.String()
}

func wrap(s string) string {
	var b strings.Builder
	for len(s) > 76 {
		b.WriteString(s[:76] + "\r\n")
		s = s[76:]
	}
	b.WriteString(s + "\r\n")
	return b.String()
}

func (g *gmailConn) send(ctx context.Context, c connector.Call) connector.Result {
	what := "gmail.send to " + str(c.Args["to"])
	return g.auth.write(ctx, what, gmailSend, func(ctx context.Context, hc *http.Client) (any, error) {
		svc, err := g.service(ctx, hc)
		if err != nil {
			return nil, err
		}
		inReplyTo, refs := "", ""
		if t := str(c.Args["threadId"]); t != "" {
			if inReplyTo, refs, err = lastOfThread(ctx, svc, t); err != nil {
				return nil, err
			}
		}
		raw := rfc822(c.Args, c.IdempotencyKey, inReplyTo, refs)
		m, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(raw)), ThreadId: str(c.Args["threadId"])}).Context(ctx).Do()
		if err != nil {
			return nil, err
		}
		return map[string]any{"id": m.Id, "threadId": m.ThreadId, "messageId": messageID(c.IdempotencyKey)}, nil
	})
}

// lastOfThread reads the Message-ID and References of a thread's last
// message, which a reply's In-Reply-To and References name (RFC 5322).
func lastOfThread(ctx context.Context, svc *gmail.Service, thread string) (msgID, refs string, err error) {
	t, err := svc.Users.Threads.Get("me", thread).Format("metadata").MetadataHeaders("Message-ID", "References").Context(ctx).Do()
	if err != nil {
		return "", "", err
	}
	if len(t.Messages) == 0 {
		return "", "", nil
	}
	last := t.Messages[len(t.Messages)-1].Payload
	return header(last, "Message-ID"), header(last, "References"), nil
}

// sentWindow is how many of the latest messages in Sent gmail.send's
// reconcile reads.
const sentWindow = 200

func (g *gmailConn) reconcileSend(ctx context.Context, c connector.Call) (connector.ReconcileStatus, any, error) {
	var found *gmail.Message
	mid := messageID(c.IdempotencyKey)
	search := g.auth.granted(ctx, gmailRead) && !g.auth.granted(ctx, gmailHeaders[:1])
	err := g.auth.read(ctx, "gmail.send's reconcile", gmailHeaders, func(ctx context.Context, hc *http.Client) error {
		svc, err := g.service(ctx, hc)
		if err != nil {
			return err
		}
		if search {
			l, err := svc.Users.Messages.List("me").Q("rfc822msgid:" + strings.Trim(mid, "<>")).MaxResults(5).Context(ctx).Do()
			if err != nil {
				return err
			}
			if len(l.Messages) > 0 {
				found = l.Messages[0]
				return nil
			}
		}
		// Gmail may have replaced the Message-ID: read the headers of the
		// latest mail in Sent (no search: gmail.metadata allows none).
		read := 0
		err = svc.Users.Messages.List("me").LabelIds("SENT").MaxResults(100).Pages(ctx, func(p *gmail.ListMessagesResponse) error {
			for _, ref := range p.Messages {
				m, err := svc.Users.Messages.Get("me", ref.Id).Format("metadata").MetadataHeaders(keyHeader, "Message-ID").Context(ctx).Do()
				if err != nil {
					return err
				}
				if header(m.Payload, keyHeader) == c.IdempotencyKey || header(m.Payload, "Message-ID") == mid {
					found = m
					return errEnough
				}
				if read++; read >= sentWindow {
					return errEnough
				}
			}
			return nil
		})
		if errors.Is(err, errEnough) {
			return nil
		}
		return err
	})
	if err != nil {
		return connector.ReconcileRetry, nil, err
	}
	if found == nil {
		return connector.ReconcileFailed, nil, nil
	}
	return connector.ReconcileApplied, map[string]any{"id": found.Id, "threadId": found.ThreadId, "messageId": mid, "reconciled": true}, nil
}

// errEnough stops a listing that found what it looked for.
var errEnough = errors.New("enough")

func validateLabels(a map[string]any) error {
	if err := need("gmail.modifyLabels", a, "id"); err != nil {
		return err
	}
	add, ok1 := strList(a["add"])
	rm, ok2 := strList(a["remove"])
	if !ok1 || !ok2 {
		return fmt.Errorf("gmail.modifyLabels: add and remove must be label names or arrays of them")
	}
	if len(add)+len(rm) == 0 {
		return fmt.Errorf("gmail.modifyLabels needs add or remove, like { id, add: [\"Processed\"] }")
	}
	return nil
}

// labelIDs maps names to ids, creating the labels to add that are missing.
func labelIDs(ctx context.Context, svc *gmail.Service, names []string, create bool) ([]string, error) {
	ls, err := svc.Users.Labels.List("me").Context(ctx).Do()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		id := ""
		for _, l := range ls.Labels {
			if strings.EqualFold(l.Name, n) || l.Id == n {
				id = l.Id
			}
		}
		if id == "" && create {
			l, err := svc.Users.Labels.Create("me", &gmail.Label{Name: n, LabelListVisibility: "labelShow", MessageListVisibility: "show"}).Context(ctx).Do()
			if err != nil {
				return nil, err
			}
			id = l.Id
		}
		if id != "" {
			out = append(out, id)
		}
	}
	return out, nil
}

func (g *gmailConn) modifyLabels(ctx context.Context, c connector.Call) connector.Result {
	add, _ := strList(c.Args["add"])
	rm, _ := strList(c.Args["remove"])
	id := str(c.Args["id"])
	return g.auth.write(ctx, "gmail.modifyLabels of "+id, gmailModify, func(ctx context.Context, hc *http.Client) (any, error) {
		svc, err := g.service(ctx, hc)
		if err != nil {
			return nil, err
		}
		addIDs, err := labelIDs(ctx, svc, add, true)
		if err != nil {
			return nil, err
		}
		rmIDs, err := labelIDs(ctx, svc, rm, false)
		if err != nil {
			return nil, err
		}
		m, err := svc.Users.Messages.Modify("me", id, &gmail.ModifyMessageRequest{AddLabelIds: addIDs, RemoveLabelIds: rmIDs}).Context(ctx).Do()
		if err != nil {
			return nil, err
		}
		names, err := labelNames(svc, ctx)
		if err != nil {
			return nil, err
		}
		return map[string]any{"id": m.Id, "labels": summary(m, names)["labels"]}, nil
	})
}

func (g *gmailConn) reconcileLabels(ctx context.Context, c connector.Call) (connector.ReconcileStatus, any, error) {
	add, _ := strList(c.Args["add"])
	rm, _ := strList(c.Args["remove"])
	var have []any
	err := g.auth.read(ctx, "gmail.modifyLabels's reconcile", gmailRead, func(ctx context.Context, hc *http.Client) error {
		m, names, err := g.message(ctx, hc, str(c.Args["id"]), "minimal")
		if err != nil {
			return err
		}
		have = summary(m, names)["labels"].([]any)
		return nil
	})
	if err != nil {
		return connector.ReconcileRetry, nil, err
	}
	has := func(n string) bool {
		for _, h := range have {
			if strings.EqualFold(h.(string), n) {
				return true
			}
		}
		return false
	}
	for _, n := range add {
		if !has(n) {
			return connector.ReconcileFailed, nil, nil
		}
	}
	for _, n := range rm {
		if has(n) {
			return connector.ReconcileFailed, nil, nil
		}
	}
	return connector.ReconcileApplied, map[string]any{"id": str(c.Args["id"]), "labels": have, "reconciled": true}, nil
}

// comparePayload compares the named payload params of two calls: the same
// is equivalent, anything else significant (a person looks).

var _ = kt.ClassLogic
