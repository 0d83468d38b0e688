// Package slackconn is the slack connector, on github.com/slack-go/slack,
// with the bot token `keep connect slack --token …` stored (sealed, package
// account). A posted message carries the write's idempotency key in its
// metadata, so reconcile finds it in the channel's history.
package slackconn

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/keep-run/keep/internal/account"
	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// Provider is the name the token is stored under.
const Provider = "slack"

// metaEvent is the metadata event type of keep's messages.
const metaEvent = "keep_write"

// ReconcileWindow is how many of a channel's latest messages reconcile reads.
const ReconcileWindow = 1000

// Slack reaches one workspace.
type Slack struct {
	// Endpoint is a stand-in's base URL (keep-fake slack); "" is Slack.
	Endpoint string
	Accounts connector.Accounts

	mu  sync.Mutex
	ids map[string]string // channel name → ID, as conversations.list answered
}

// New returns the slack connector (s nil: no token; every call says so).
func New(s *Slack) *connector.Connector {
	c := &conn{s: s}
	chParam := connector.Param{Name: "channel", Type: "string", Required: true, Doc: "a channel id (`C0123…`) or name (`#ops`; keep resolves a name to its ID once, with `conversations.list`, and keeps it)"}
	nameNeeds := "a channel given by name also needs `channels:read` (`groups:read` for a private channel) to resolve it; an ID needs neither."
	return &connector.Connector{
		Name: "slack",
		Doc:  "A Slack workspace, as the bot whose token `keep connect slack --token xoxb-…` stored. Invite the bot to the channels it reads and writes.",
		Sources: map[string][]string{
			"slack": {"message", "reaction"},
		},
		Methods: map[string]*connector.Method{
			"history": {Name: "history", Kind: connector.KindRead, Validate: validate("slack.history", "channel"), Do: c.history, Doc: connector.MethodDoc{
				Summary: "Reads a channel's messages, oldest first. A thread's replies are not among them (Slack's `conversations.history` lists a thread's parent only; a reply also sent to the channel is listed).",
				Params: []connector.Param{chParam, {Name: "after", Type: "string", Doc: "a cursor: a previous result's `lastCursor` (a message `ts`); only later messages come back, the oldest first. `\"0\"` starts at the channel's first message; without it, the latest `limit` messages come back"},
					{Name: "limit", Type: "number", Doc: "at most this many, 1 to 999 (default 100)"}},
				ResultTS: "Array<{ ts: string; user: string; text: string; threadTs: string }> & { lastCursor: string }",
				Result:   "an array of `{ ts, user, text, threadTs }` (`ts` is the message's id: register inputs by it) with a property `lastCursor`: the last message returned (or `after` again when nothing came), so more than `limit` new messages are read over the next polls, none skipped",
				Errors:   "a channel that does not exist or the bot is not in, or a name no channel has: logic; a revoked token: permission (reconnect); rate limits: transient, after Slack's Retry-After.",
				Needs:    "the bot scope `channels:history` (`groups:history` for a private channel, `im:history`, `mpim:history` for direct messages), and the bot invited to the channel; " + nameNeeds,
				Limits:   "Slack answers in pages, which may hold fewer messages than asked while more exist (`has_more`, `next_cursor`); keep reads every page after `after` and returns the oldest `limit`. `conversations.history` is Tier 3 (about 50 requests a minute) — but 1 a minute with pages of 15 for apps distributed outside the Slack Marketplace (an app made for one workspace is not); a poll reads one page per 200 messages (per 15 there). A 429 (or any failure) after some pages keeps them and where the read stopped: the retry, after Slack's Retry-After, goes on from there, and a retry that read a page further is not counted among the policy's `transient_retries`, so a backlog of many pages completes at 1 call a minute (kept in keep's memory: a restart reads again from the first page).",
			}},
			"postMessage": {Name: "postMessage", Kind: connector.KindMutate, Identity: []string{"channel", "threadTs"}, Validate: validate("slack.postMessage", "channel", "text"),
				Do: c.post, Reconcile: c.reconcilePost, ComparePayload: connector.ComparePayloadOf("text"), Target: func(a map[string]any) string { return "slack.postMessage to " + str(a["channel"]) },
				Doc: connector.MethodDoc{
					Summary: "Posts a message as the bot. The message's metadata carries the write's idempotency key (`event_type: keep_write`).",
					Params: []connector.Param{chParam, {Name: "text", Type: "string", Required: true, Doc: "the message (Slack's mrkdwn)"},
						{Name: "threadTs", Type: "string", Doc: "reply in this message's thread"}, {Name: "subkey", Type: "string", Doc: "tells apart two posts of one run to the same channel"}},
					ResultTS:  "{ channel: string; ts: string; reconciled?: boolean }",
					Result:    "`{ channel, ts }`; a reconciled post adds `reconciled: true`",
					Reconcile: fmt.Sprintf("reads the channel's latest %d messages with their metadata (`conversations.history`), or, for a reply, the thread's (`conversations.replies`: a reply is never in the channel's history), looking for the key: found means posted; not found (seen twice, after the settle time) means not, and keep posts it.", ReconcileWindow),
					Errors:    "`channel_not_found`, `not_in_channel`, `is_archived`: precondition, nothing posted; a revoked or invalid token: permission (Reconnect Slack); `ratelimited`: transient, nothing posted; 5xx or no answer after the request went out: unknown, settled by reconcile.",
					Needs:     "the bot scope `chat:write` (`chat:write.public` to post in a public channel the bot was not invited to); its reconcile reads the channel with `channels:history` (`groups:history` for a private one), so grant that too; " + nameNeeds,
					Limits:    "about one message a second per channel (Slack's special tier for `chat.postMessage`; bursts are tolerated); a 429 is transient and retried after Slack's Retry-After, nothing posted.",
				}},
			"addReaction": {Name: "addReaction", Kind: connector.KindMutate, Identity: []string{"channel", "ts", "name"}, Validate: validate("slack.addReaction", "channel", "ts", "name"),
				Do: c.react, Reconcile: c.reconcileReaction, Target: func(a map[string]any) string {
					return "slack.addReaction :" + str(a["name"]) + ": on " + str(a["channel"]) + " " + str(a["ts"])
				},
				Doc: connector.MethodDoc{
					Summary: "Adds the bot's reaction to a message (a reaction the bot already gave counts as done).",
					Params: []connector.Param{chParam, {Name: "ts", Type: "string", Required: true, Doc: "the message's ts"},
						{Name: "name", Type: "string", Required: true, Doc: "the emoji's name, without colons (`white_check_mark`)"}},
					Result:    "`{ channel, ts, name }`",
					ResultTS:  "{ channel: string; ts: string; name: string; reconciled?: boolean }",
					Reconcile: "reads the message's reactions: the bot among the users of `name` means applied.",
					Errors:    "a message that does not exist: precondition; otherwise as postMessage.",
					Needs:     "the bot scope `reactions:write`; its reconcile `reactions:read` (and `auth.test`, which needs none); " + nameNeeds,
					Limits:    "`reactions.add` is Tier 3 (about 50 a minute); a 429 is transient, retried after Slack's Retry-After.",
				}},
		},
	}
}

type conn struct {
	s *Slack

	mu    sync.Mutex
	pages map[string]*paging // by historyKey
}

// paging is a conversations.history read a failure cut short (a rate
// limit, most often): where it stopped and what it had read, so the
// retry of the same call goes on from there instead of from page 1 — at
// Slack's 1 call a minute for apps outside its Marketplace, a backlog of
// more than one page a retry would otherwise never end. It lives in this
// process only: after a restart the read starts again.
type paging struct {
	cursor string
	msgs   []slack.Message
	at     time.Time
}

// Bounds of the pagings kept: a retry that never comes (the script
// changed) leaves one behind.
const (
	maxPagings = 64
	pagingTTL  = time.Hour
)

// historyQuery is what a slack.history call reads: the messages of the
// channel (its id) later than after (a message's ts; "" for the latest),
// at most limit.
type historyQuery struct {
	channel, after string
	limit          int
}

// key is the query's, under which a failed attempt's paging is kept.
func (q historyQuery) key() string {
	return q.channel + "\x00" + q.after + "\x00" + strconv.Itoa(q.limit)
}

// resume takes the paging kept for key, if any and not stale.
func (c *conn) resume(key string) *paging {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pages[key]
	delete(c.pages, key)
	if p == nil || time.Since(p.at) > pagingTTL {
		return nil
	}
	return p
}

// keep saves where a read stopped, for its retry.
func (c *conn) keep(key string, p *paging) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pages == nil {
		c.pages = map[string]*paging{}
	}
	for k, old := range c.pages {
		if len(c.pages) < maxPagings && time.Since(old.at) <= pagingTTL {
			break
		}
		delete(c.pages, k)
	}
	c.pages[key] = p
}

func str(v any) string { s, _ := v.(string); return s }

func validate(method string, required ...string) func(map[string]any) error {
	return func(a map[string]any) error {
		for _, k := range required {
			if strings.TrimSpace(str(a[k])) == "" {
				return fmt.Errorf("%s needs %s (a non-empty string)", method, k)
			}
		}
		for _, k := range []string{"threadTs", "after"} {
			if v, ok := a[k]; ok && v != nil {
				if _, isStr := v.(string); !isStr {
					return fmt.Errorf("%s: %s must be a string (a message's ts)", method, k)
				}
			}
		}
		if l, ok := a["limit"]; ok && l != nil {
			if f, isNum := l.(float64); !isNum || f < 1 || f > 999 {
				return fmt.Errorf("%s: limit must be a number from 1 to 999", method)
			}
		}
		return nil
	}
}

// wire notes whether a request reached the network.
type wire struct{ wrote bool }

// client returns a Slack client with the stored token, tracing whether
// its requests were written.
func (c *conn) client(ctx context.Context, what string) (*slack.Client, *wire, *kt.Error) {
	w := &wire{}
	if c.s == nil || c.s.Accounts == nil {
		return nil, w, notConnected(what)
	}
	conn, tok, err := c.s.Accounts.Get(ctx, Provider)
	switch {
	case errors.Is(err, kt.ErrNotFound):
		return nil, w, notConnected(what)
	case errors.Is(err, account.ErrWrongKey):
		return nil, w, kt.Errorf(kt.ClassPermission, "%s: %v (set %s to the key of the node that connected Slack, or connect it again)%s", what, err, account.KeyEnv, reconnect())
	case err != nil:
		return nil, w, kt.Errorf(kt.ClassTransient, "%s: reading the Slack token: %v", what, err)
	case conn.Broken != "":
		return nil, w, kt.Errorf(kt.ClassPermission, "%s: Slack refused the bot's token (%s)%s", what, conn.Broken, reconnect())
	}
	hc := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		r = r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { w.wrote = true }}))
		return http.DefaultTransport.RoundTrip(r)
	}), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	opts := []slack.Option{slack.OptionHTTPClient(hc)}
	if c.s.Endpoint != "" {
		opts = append(opts, slack.OptionAPIURL(c.s.Endpoint+"/api/"))
	}
	return slack.New(tok.AccessToken, opts...), w, nil
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func reconnect() string { return kt.ReconnectSuffix(Provider + " --token xoxb-…") }

func notConnected(what string) *kt.Error {
	return kt.Errorf(kt.ClassPermission, "%s: no Slack bot token is stored%s", what, reconnect())
}

// classify says what a Slack error means for a read or a write.
func (c *conn) classify(ctx context.Context, what string, write bool, w *wire, err error) connector.Result {
	var rl *slack.RateLimitedError
	var se slack.SlackErrorResponse
	var sc slack.StatusCodeError
	var nc errNoChannel
	failed := func(class kt.ErrorClass, format string, args ...any) connector.Result {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: kt.Errorf(class, "%s: "+format, append([]any{what}, args...)...)}
	}
	switch {
	case errors.As(err, &nc) && write:
		return failed(kt.ClassPrecondition, "%v", nc)
	case errors.As(err, &nc):
		return failed(kt.ClassLogic, "%v", nc)
	case errors.As(err, &rl):
		r := failed(kt.ClassTransient, "Slack is rate limiting the bot")
		r.Err.RetryAfter = rl.RetryAfter
		return r
	case errors.As(err, &se):
		switch se.Err {
		case "invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive":
			if c.s != nil && c.s.Accounts != nil {
				c.s.Accounts.MarkBroken(ctx, Provider, se.Err)
			}
			return failed(kt.ClassPermission, "Slack refused the bot's token (%s)%s", se.Err, reconnect())
		case "missing_scope", "not_allowed_token_type":
			return failed(kt.ClassPermission, "the bot lacks a scope (%s; needed: %s)", se.Err, se.Needed)
		case "channel_not_found", "not_in_channel", "is_archived", "message_not_found", "thread_not_found":
			if !write {
				return failed(kt.ClassLogic, "%s (invite the bot to the channel, or fix its name)", se.Err)
			}
			return failed(kt.ClassPrecondition, "%s (invite the bot to the channel, or fix its name)", se.Err)
		case "internal_error", "fatal_error", "service_unavailable", "request_timeout":
			if write {
				return connector.Result{Outcome: connector.OutcomeUncertain, Err: kt.Errorf(kt.ClassIndeterminate, "%s: Slack answered %s; it may have applied the write", what, se.Err)}
			}
			return failed(kt.ClassTransient, "Slack answered %s", se.Err)
		}
		return failed(kt.ClassLogic, "Slack answered %s", se.Err)
	case errors.As(err, &sc):
		if sc.Code >= 500 && write {
			return connector.Result{Outcome: connector.OutcomeUncertain, Err: kt.Errorf(kt.ClassIndeterminate, "%s: Slack answered %s; it may have applied the write", what, sc.Status)}
		}
		if sc.Code >= 500 || sc.Code == 429 {
			return failed(kt.ClassTransient, "Slack answered %s", sc.Status)
		}
		return failed(kt.ClassLogic, "Slack answered %s", sc.Status)
	}
	if !write {
		return failed(kt.ClassTransient, "%v", connector.CleanErr(err))
	}
	if !w.wrote && !connector.IsTimeout(err) {
		return failed(kt.ClassTransient, "not sent: %v", connector.CleanErr(err))
	}
	return connector.Result{Outcome: connector.OutcomeUncertain, Err: kt.Errorf(kt.ClassIndeterminate, "%s: the request was sent but no complete answer came back (%v); Slack may have applied it", what, connector.CleanErr(err))}
}

func (c *conn) history(ctx context.Context, call connector.Call) connector.Result {
	a := call.Args
	what := "slack.history of " + str(a["channel"])
	api, w, kerr := c.client(ctx, what)
	if kerr != nil {
		return connector.Result{Err: kerr}
	}
	id, err := c.s.channelID(ctx, api, str(a["channel"]))
	if err != nil {
		return connector.Result{Err: c.classify(ctx, what, false, w, err).Err}
	}
	limit := 100
	if f, ok := a["limit"].(float64); ok {
		limit = int(f)
	}
	q := historyQuery{channel: id, after: str(a["after"]), limit: limit}
	key := q.key()
	msgs, stopped, err := readHistory(ctx, api, q, c.resume(key))
	if err != nil {
		kerr := c.classify(ctx, what, false, w, err).Err
		if stopped != nil {
			c.keep(key, stopped.paging)
			if kerr.Class == kt.ClassTransient && stopped.progressed {
				kerr.Progressed = true
				kerr.Message += fmt.Sprintf(" (after %d messages read; the retry goes on from there)", len(stopped.msgs))
			}
		}
		return connector.Result{Err: kerr}
	}
	items := []any{}
	cursor := str(a["after"])
	for _, m := range msgs {
		items = append(items, map[string]any{"ts": m.Timestamp, "user": m.User, "text": m.Text, "threadTs": m.ThreadTimestamp})
		cursor = m.Timestamp
	}
	props := map[string]any{}
	if cursor != "" {
		props["lastCursor"] = cursor
	}
	return connector.Result{Value: connector.ListWith(items, props)}
}

// readHistory reads a channel's messages oldest first: with after, the
// oldest limit messages later than it, read through every page (Slack
// answers newest first, in pages that may be short while has_more is
// set), so that a burst larger than limit is taken from its start and the
// next poll goes on where this one stopped; without after, the latest
// limit messages. It goes on from a paging a failed attempt kept (from),
// and when a page fails after others were read it returns where it
// stopped (progressed: this attempt read a page), for the retry.
func readHistory(ctx context.Context, api *slack.Client, q historyQuery, from *paging) ([]slack.Message, *stopped, error) {
	id, after, limit := q.channel, q.after, q.limit
	params := &slack.GetConversationHistoryParameters{ChannelID: id, Oldest: after, Limit: min(limit, 200)}
	var msgs []slack.Message
	if from != nil {
		params.Cursor, msgs = from.cursor, from.msgs
	}
	pages := 0
	for {
		resp, err := api.GetConversationHistoryContext(ctx, params)
		if err != nil {
			if params.Cursor == "" {
				return nil, nil, err
			}
			return nil, &stopped{paging: &paging{cursor: params.Cursor, msgs: msgs, at: time.Now()}, progressed: pages > 0}, err
		}
		pages++
		for _, m := range resp.Messages {
			if after == "" || laterThan(m.Timestamp, after) {
				msgs = append(msgs, m)
			}
		}
		if !resp.HasMore || resp.ResponseMetaData.NextCursor == "" || (after == "" && len(msgs) >= limit) {
			break
		}
		params.Cursor = resp.ResponseMetaData.NextCursor
	}
	sort.SliceStable(msgs, func(i, j int) bool { return laterThan(msgs[j].Timestamp, msgs[i].Timestamp) })
	if len(msgs) > limit {
		if after == "" {
			return msgs[len(msgs)-limit:], nil, nil
		}
		return msgs[:limit], nil, nil
	}
	return msgs, nil, nil
}

// stopped is where a read stopped, and whether the attempt got anywhere.
type stopped struct {
	*paging
	progressed bool
}

// laterThan compares two Slack timestamps ("1700000000.000100") exactly:
// seconds, then the fraction (a float64 would round microseconds away).
func laterThan(a, b string) bool {
	as, af, _ := strings.Cut(a, ".")
	bs, bf, _ := strings.Cut(b, ".")
	x, _ := strconv.ParseInt(as, 10, 64)
	y, _ := strconv.ParseInt(bs, 10, 64)
	if x != y {
		return x > y
	}
	for len(af) < len(bf) {
		af += "0"
	}
	for len(bf) < len(af) {
		bf += "0"
	}
	return af > bf
}

// channelIDRe is a conversation ID (C…, G…, D…: upper case; names never are).
var channelIDRe = regexp.MustCompile(`^[CGD][A-Z0-9]+$`)

// errNoChannel is a channel name conversations.list does not know.
type errNoChannel struct{ name string }

func (e errNoChannel) Error() string {
	return fmt.Sprintf("no channel named #%s that the bot can see (invite the bot to it, or give the channel's ID, C0123…)", e.name)
}

// channelID resolves a channel name (#ops, ops) to its ID: Slack takes
// names in chat.postMessage only. Names are read from conversations.list
// (public, then private channels) once and kept; an ID is itself.
func (s *Slack) channelID(ctx context.Context, api *slack.Client, ref string) (string, error) {
	if channelIDRe.MatchString(ref) {
		return ref, nil
	}
	name := strings.TrimPrefix(ref, "#")
	s.mu.Lock()
	id, ok := s.ids[name]
	s.mu.Unlock()
	if ok {
		return id, nil
	}
	for _, typ := range []string{"public_channel", "private_channel"} {
		params := &slack.GetConversationsParameters{Types: []string{typ}, ExcludeArchived: true, Limit: 1000}
		for {
			chans, next, err := api.GetConversationsContext(ctx, params)
			var se slack.SlackErrorResponse
			if typ == "private_channel" && errors.As(err, &se) && se.Err == "missing_scope" {
				break // without groups:read: public channels only
			}
			if err != nil {
				return "", fmt.Errorf("resolving the channel name #%s to its ID (conversations.list, bot scope channels:read): %w", name, err)
			}
			s.mu.Lock()
			if s.ids == nil {
				s.ids = map[string]string{}
			}
			for _, ch := range chans {
				s.ids[ch.Name] = ch.ID
			}
			id, ok = s.ids[name]
			s.mu.Unlock()
			if ok {
				return id, nil
			}
			if next == "" {
				break
			}
			params.Cursor = next
		}
	}
	return "", errNoChannel{name}
}

func (c *conn) post(ctx context.Context, call connector.Call) connector.Result {
	a := call.Args
	what := "slack.postMessage to " + str(a["channel"])
	api, w, kerr := c.client(ctx, what)
	if kerr != nil {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: kerr}
	}
	opts := []slack.MsgOption{slack.MsgOptionText(str(a["text"]), false),
		slack.MsgOptionMetadata(slack.SlackMetadata{EventType: metaEvent, EventPayload: map[string]any{"idempotency_key": call.IdempotencyKey}})}
	if ts := str(a["threadTs"]); ts != "" {
		opts = append(opts, slack.MsgOptionTS(ts))
	}
	ch, ts, err := api.PostMessageContext(ctx, str(a["channel"]), opts...)
	if err != nil {
		return c.classify(ctx, what, true, w, err)
	}
	return connector.Result{Outcome: connector.OutcomeApplied, Value: map[string]any{"channel": ch, "ts": ts}}
}

func (c *conn) reconcilePost(ctx context.Context, call connector.Call) (connector.ReconcileStatus, any, error) {
	what := "slack.postMessage's reconcile"
	api, _, kerr := c.client(ctx, what)
	if kerr != nil {
		return connector.ReconcileRetry, nil, kerr
	}
	id, err := c.s.channelID(ctx, api, str(call.Args["channel"]))
	if err != nil {
		return connector.ReconcileRetry, nil, fmt.Errorf("%s: %w", what, err)
	}
	ours := func(msgs []slack.Message) string {
		for _, m := range msgs {
			if m.Metadata.EventType == metaEvent && fmt.Sprint(m.Metadata.EventPayload["idempotency_key"]) == call.IdempotencyKey {
				return m.Timestamp
			}
		}
		return ""
	}
	// A reply is in its thread (conversations.replies), never in the
	// channel's history, which lists a thread's parent only.
	next := func(cursor string) ([]slack.Message, string, error) {
		if ts := str(call.Args["threadTs"]); ts != "" {
			msgs, more, next, err := api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{ChannelID: id, Timestamp: ts, Limit: 200, Cursor: cursor, IncludeAllMetadata: true})
			if !more {
				next = ""
			}
			return msgs, next, err
		}
		resp, err := api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: id, Limit: 200, Cursor: cursor, IncludeAllMetadata: true})
		if err != nil {
			return nil, "", err
		}
		if !resp.HasMore {
			return resp.Messages, "", nil
		}
		return resp.Messages, resp.ResponseMetaData.NextCursor, nil
	}
	cursor := ""
	for read := 0; read < ReconcileWindow; {
		msgs, nextCursor, err := next(cursor)
		if err != nil {
			return connector.ReconcileRetry, nil, fmt.Errorf("%s: %w", what, err)
		}
		if ts := ours(msgs); ts != "" {
			return connector.ReconcileApplied, map[string]any{"channel": id, "ts": ts, "reconciled": true}, nil
		}
		read += len(msgs)
		if nextCursor == "" || len(msgs) == 0 {
			break
		}
		cursor = nextCursor
	}
	return connector.ReconcileFailed, nil, nil
}

func (c *conn) react(ctx context.Context, call connector.Call) connector.Result {
	a := call.Args
	what := "slack.addReaction :" + str(a["name"]) + ":"
	api, w, kerr := c.client(ctx, what)
	if kerr != nil {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: kerr}
	}
	id, err := c.s.channelID(ctx, api, str(a["channel"]))
	if err != nil {
		return c.classify(ctx, what, true, w, err)
	}
	err = api.AddReactionContext(ctx, strings.Trim(str(a["name"]), ":"), slack.NewRefToMessage(id, str(a["ts"])))
	var se slack.SlackErrorResponse
	if err != nil && !(errors.As(err, &se) && se.Err == "already_reacted") {
		return c.classify(ctx, what, true, w, err)
	}
	return connector.Result{Outcome: connector.OutcomeApplied, Value: map[string]any{"channel": str(a["channel"]), "ts": str(a["ts"]), "name": str(a["name"])}}
}

func (c *conn) reconcileReaction(ctx context.Context, call connector.Call) (connector.ReconcileStatus, any, error) {
	a := call.Args
	api, _, kerr := c.client(ctx, "slack.addReaction's reconcile")
	if kerr != nil {
		return connector.ReconcileRetry, nil, kerr
	}
	id, err := c.s.channelID(ctx, api, str(a["channel"]))
	if err != nil {
		return connector.ReconcileRetry, nil, err
	}
	me, err := api.AuthTestContext(ctx)
	if err != nil {
		return connector.ReconcileRetry, nil, err
	}
	item, err := api.GetReactionsContext(ctx, slack.NewRefToMessage(id, str(a["ts"])), slack.GetReactionsParameters{Full: true})
	if err != nil {
		return connector.ReconcileRetry, nil, err
	}
	for _, r := range item.Reactions {
		if r.Name == strings.Trim(str(a["name"]), ":") {
			for _, u := range r.Users {
				if u == me.UserID {
					return connector.ReconcileApplied, map[string]any{"channel": str(a["channel"]), "ts": str(a["ts"]), "name": str(a["name"]), "reconciled": true}, nil
				}
			}
		}
	}
	return connector.ReconcileFailed, nil, nil
}

// Notify posts a plain message as the bot (keep's notices, package
// notify); it carries no idempotency key: a notice may go twice after a crash.
func (s *Slack) Notify(ctx context.Context, channel, text string) error {
	c := &conn{s: s}
	api, _, kerr := c.client(ctx, "a notice to Slack")
	if kerr != nil {
		return kerr
	}
	// A notice quotes outside data (a title, an error): escaped by Slack's
	// rules (&, <, >), so "<!channel>" or "<http://x|a forged link>" in it
	// arrives as text, never as a mention or a link; posted with mrkdwn
	// off, so *bold*, _italic_, ~strike~, `code`, ```blocks``` and a "> "
	// quote show as the characters they are (mrkdwn has no escape for
	// them); and with unfurling off, so a URL in a title makes Slack fetch
	// nothing and shows no preview of the title's choosing.
	_, _, err := api.PostMessageContext(ctx, channel, slack.MsgOptionText(text, true), slack.MsgOptionDisableMarkdown(),
		slack.MsgOptionDisableLinkUnfurl(), slack.MsgOptionDisableMediaUnfurl())
	return err
}
