// Package slackfake is a faithful fake of the Slack Web API methods keep's
// slack connector uses (auth.test, chat.postMessage with metadata,
// conversations.history, conversations.replies, conversations.list,
// reactions.add, reactions.get), as Slack's reference defines them: the
// same form parameters, the same {"ok": …} answers and error strings, 429
// with Retry-After; channels with an ID and a name (chat.postMessage takes
// either, the other methods only the ID); history that lists a thread's
// parent and never its replies (conversations.replies has them); pages cut
// short with a next_cursor (at most PageMax items, fewer than asked, as
// Slack may). An admin API seeds messages and arms faults. `keep-fake
// slack` serves it; tests start it in process. Not linked into keep.
package slackfake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keep-run/keep/internal/fake/fault"
)

// Token is the bot token the fake accepts (any token starting xoxb- works).
const Token = "xoxb-keep-fake"

// BotUser is the user id of the fake's bot.
const BotUser = "UKEEPBOT"

// PageMax is the most items one page holds by default, whatever limit
// asks: Slack's limit for conversations.history and .replies of apps
// outside its Marketplace (15), and a page that is shorter than asked
// while more exist, which every paginated Slack method may answer.
const PageMax = 15

type message struct {
	TS         string         `json:"ts"`
	User       string         `json:"user"`
	Text       string         `json:"text"`
	ThreadTS   string         `json:"thread_ts,omitempty"`
	ReplyCount int            `json:"reply_count,omitempty"`
	Subtype    string         `json:"subtype,omitempty"`
	Type       string         `json:"type"`
	Metadata   map[string]any `json:"metadata,omitempty"`
	Reactions  []*reaction    `json:"reactions,omitempty"`
	// posted are the options of chat.postMessage that change how Slack
	// shows the text (mrkdwn, unfurl_links, unfurl_media) as they were
	// sent ("" when not): shown by the admin view only, as Slack's API
	// does not answer them.
	posted map[string]string
}

// channel is a conversation: an ID (C…, G… for a private one) and a name.
type channel struct {
	ID, Name string
	Private  bool
	msgs     []*message // parents and replies, oldest first
}

type reaction struct {
	Name  string   `json:"name"`
	Users []string `json:"users"`
	Count int      `json:"count"`
}

// Server is one fake Slack workspace.
type Server struct {
	mu       sync.Mutex
	channels map[string]*channel // by ID
	revoked  bool
	faults   *fault.Set
	writes   map[string]int
	seq      int64
	pageMax  int
	calls    map[string]int
	// limits are the rate limits armed per API method
	// (conversations.history …), counted on now; limited counts the calls
	// each answered 429.
	limits  map[string]*rateLimit
	limited map[string]int
	now     func() time.Time
}

// rateLimit is Slack's limit of one method: at most calls in any window.
type rateLimit struct {
	calls  int
	window time.Duration
	used   []time.Time
}

// New returns an empty workspace. A channel exists from its first use: by
// ID (C1, G7: a private one), or, in chat.postMessage and the admin
// routes, by name (#ops), which gives it an ID.
func New() *Server {
	return &Server{channels: map[string]*channel{}, writes: map[string]int{}, pageMax: PageMax, calls: map[string]int{},
		limits: map[string]*rateLimit{}, limited: map[string]int{}, now: time.Now,
		faults: &fault.Set{Example: `{"method": "slack.postMessage", "fault": "drop_after_apply", "count": 1}`, Extra: slackError.MatchString}}
}

// idRe is a conversation ID: Slack's are upper case (names never are).
var idRe = regexp.MustCompile(`^[CGD][A-Z0-9]+$`)

// byID finds a channel by its ID, creating it on first use; a name is
// not an ID (nil: Slack answers channel_not_found).
func (s *Server) byID(id string) *channel {
	if !idRe.MatchString(id) {
		return nil
	}
	c, ok := s.channels[id]
	if !ok {
		c = &channel{ID: id, Name: strings.ToLower(id), Private: strings.HasPrefix(id, "G")}
		s.channels[id] = c
	}
	return c
}

// byIDOrName finds a channel by ID or by name (with or without #),
// creating a named one with a new ID on first use.
func (s *Server) byIDOrName(ref string) *channel {
	if c := s.byID(ref); c != nil {
		return c
	}
	name := strings.TrimPrefix(ref, "#")
	for _, c := range s.channels {
		if c.Name == name {
			return c
		}
	}
	c := &channel{ID: fmt.Sprintf("C%08X", len(s.channels)+1), Name: name}
	s.channels[c.ID] = c
	return c
}

// Handler serves the API (/api/…) and the admin routes (/_admin/…).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/auth.test", s.api("", s.authTest))
	mux.HandleFunc("POST /api/chat.postMessage", s.api("slack.postMessage", s.postMessage))
	mux.HandleFunc("POST /api/conversations.history", s.api("slack.history", s.history))
	mux.HandleFunc("POST /api/conversations.replies", s.api("slack.replies", s.replies))
	mux.HandleFunc("POST /api/conversations.list", s.api("slack.list", s.list))
	mux.HandleFunc("POST /api/reactions.add", s.api("slack.addReaction", s.addReaction))
	mux.HandleFunc("POST /api/reactions.get", s.api("slack.getReactions", s.getReactions))
	mux.HandleFunc("POST /_admin/messages", s.adminPost)
	mux.HandleFunc("GET /_admin/channels/{id}", s.adminChannel)
	mux.HandleFunc("POST /_admin/faults", s.faults.AdminArm)
	mux.HandleFunc("GET /_admin/faults", s.faults.AdminList)
	mux.HandleFunc("POST /_admin/page_max", s.adminPageMax)
	mux.HandleFunc("POST /_admin/rate_limit", s.adminRateLimit)
	mux.HandleFunc("GET /_admin/ratelimited", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		answer(w, s.limited)
	})
	mux.HandleFunc("GET /_admin/calls", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		answer(w, s.calls)
	})
	mux.HandleFunc("POST /_admin/revoke", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.revoked = true
		s.mu.Unlock()
		answer(w, map[string]any{"ok": true})
	})
	mux.HandleFunc("GET /_admin/writes", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		answer(w, s.writes)
	})
	return mux
}

func answer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code string) { answer(w, map[string]any{"ok": false, "error": code}) }

// api checks the token (the Authorization header, as slack-go sends it,
// or the token form field), applies an armed fault, then the method.
func (s *Server) api(method string, h func(w http.ResponseWriter, r *http.Request) bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if tok == "" {
			tok = r.Form.Get("token")
		}
		s.mu.Lock()
		switch {
		case tok == "":
			s.mu.Unlock()
			fail(w, "not_authed")
			return
		case !strings.HasPrefix(tok, "xoxb-"):
			s.mu.Unlock()
			fail(w, "invalid_auth")
			return
		case s.revoked:
			s.mu.Unlock()
			fail(w, "token_revoked")
			return
		}
		name := strings.TrimPrefix(r.URL.Path, "/api/")
		s.calls[name]++
		if wait, over := s.overLimit(name); over {
			s.limited[name]++
			s.mu.Unlock()
			w.Header().Set("Retry-After", strconv.Itoa(wait))
			s.Error(w, r, http.StatusTooManyRequests)
			return
		}
		fault.Serve(w, r, &s.mu, s.faults.Take(method), s, func(w http.ResponseWriter) { h(w, r) },
			func(w http.ResponseWriter, r *http.Request, f *fault.Fault) { fail(w, f.Fault) })
	}
}

// overLimit counts a call of method against its armed rate limit; over
// when the window already holds its calls, with the seconds until the
// oldest of them leaves it: Slack's Retry-After (s.mu is held).
func (s *Server) overLimit(method string) (wait int, over bool) {
	l := s.limits[method]
	if l == nil {
		return 0, false
	}
	now := s.now()
	for len(l.used) > 0 && !now.Before(l.used[0].Add(l.window)) {
		l.used = l.used[1:]
	}
	if len(l.used) < l.calls {
		l.used = append(l.used, now)
		return 0, false
	}
	left := l.used[0].Add(l.window).Sub(now)
	return max(1, int((left+time.Second-1)/time.Second)), true
}

// SetClock replaces the clock the rate limits count on (tests that wait
// by a clock of their own).
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	s.now = now
	s.mu.Unlock()
}

// adminRateLimit arms Slack's rate limit of one API method, as Slack
// applies it per method per app per workspace: {"method":
// "conversations.history", "calls": 1, "windowSeconds": 60} (1 a minute:
// conversations.history for apps outside the Marketplace). A call over
// it is answered 429 with Retry-After, {"ok": false, "error":
// "ratelimited"}; calls 0 takes the limit off.
func (s *Server) adminRateLimit(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Method        string
		Calls         int
		WindowSeconds int
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Method == "" || b.Calls < 0 || (b.Calls > 0 && b.WindowSeconds < 1) {
		http.Error(w, `give {"method": "conversations.history", "calls": 1, "windowSeconds": 60}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	if b.Calls == 0 {
		delete(s.limits, b.Method)
	} else {
		s.limits[b.Method] = &rateLimit{calls: b.Calls, window: time.Duration(b.WindowSeconds) * time.Second}
	}
	s.mu.Unlock()
	answer(w, map[string]any{"ok": true})
}

// slackError is a Slack error string a fault may answer (channel_not_found,
// not_in_channel, …), beside the common kinds.
var slackError = regexp.MustCompile(`^[a-z][a-z_]*$`)

// Error answers as Slack does: a rate limit is HTTP 429 with Retry-After,
// an error of the token is {"ok": false} with its error string, a 5xx a
// bare status.
func (s *Server) Error(w http.ResponseWriter, r *http.Request, code int) {
	switch code {
	case http.StatusTooManyRequests:
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "ratelimited"})
	case http.StatusUnauthorized:
		fail(w, "invalid_auth")
	case http.StatusForbidden:
		fail(w, "missing_scope")
	default:
		http.Error(w, "internal error", code)
	}
}

func (s *Server) authTest(w http.ResponseWriter, r *http.Request) bool {
	answer(w, map[string]any{"ok": true, "url": "https://keep-fake.slack.com/", "team": "keep-fake", "user": "keep", "team_id": "TKEEP", "user_id": BotUser, "bot_id": "BKEEP"})
	return false
}

// nextTS makes a Slack timestamp: seconds.micro-ish, unique and increasing.
func (s *Server) nextTS() string {
	s.seq++
	now := time.Now()
	return fmt.Sprintf("%d.%06d", now.Unix(), (int64(now.Nanosecond()/1000)+s.seq)%1000000)
}

// post adds a message; thread is the parent's ts of a reply ("" for none),
// broadcast a reply also sent to the channel (reply_broadcast).
func (s *Server) post(c *channel, user, text, thread string, broadcast bool, meta map[string]any) *message {
	m := &message{TS: s.nextTS(), User: user, Text: text, ThreadTS: thread, Type: "message", Metadata: meta}
	// Keep timestamps increasing even within one microsecond.
	if len(c.msgs) > 0 && !tsAfter(m.TS, c.msgs[len(c.msgs)-1].TS) {
		last, _ := strconv.ParseFloat(c.msgs[len(c.msgs)-1].TS, 64)
		m.TS = strconv.FormatFloat(last+0.000001, 'f', 6, 64)
	}
	if parent := c.find(thread); parent != nil {
		parent.ThreadTS = parent.TS
		parent.ReplyCount++
		if broadcast {
			m.Subtype = "thread_broadcast"
		}
	}
	c.msgs = append(c.msgs, m)
	return m
}

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request) bool {
	ch, text := r.Form.Get("channel"), r.Form.Get("text")
	switch {
	case ch == "":
		fail(w, "channel_not_found")
		return false
	case text == "" && r.Form.Get("blocks") == "":
		fail(w, "no_text")
		return false
	case strings.HasPrefix(ch, "#nope") || ch == "CNOPE":
		fail(w, "channel_not_found")
		return false
	}
	var meta map[string]any
	if raw := r.Form.Get("metadata"); raw != "" {
		if json.Unmarshal([]byte(raw), &meta) != nil {
			fail(w, "invalid_metadata_format")
			return false
		}
	}
	c := s.byIDOrName(ch)
	m := s.post(c, BotUser, text, r.Form.Get("thread_ts"), r.Form.Get("reply_broadcast") == "true", meta)
	m.posted = map[string]string{}
	for _, k := range []string{"mrkdwn", "unfurl_links", "unfurl_media"} {
		m.posted[k] = r.Form.Get(k)
	}
	s.writes["slack.postMessage"]++
	answer(w, map[string]any{"ok": true, "channel": c.ID, "ts": m.TS, "message": m})
	return true
}

// limitOf reads a page's limit: what was asked (def when not), never more
// than the fake's page size.
func (s *Server) limitOf(r *http.Request, def int) int {
	limit, _ := strconv.Atoi(r.Form.Get("limit"))
	if limit <= 0 || limit > 999 {
		limit = def
	}
	return min(limit, s.pageMax)
}

// page cuts items at the cursor (an opaque offset, as Slack's are opaque)
// and answers the page with has_more and response_metadata.next_cursor.
func page[T any](w http.ResponseWriter, r *http.Request, items []T, limit int, key string) {
	start := 0
	if c := r.Form.Get("cursor"); c != "" {
		b, err := base64.StdEncoding.DecodeString(c)
		n, err2 := strconv.Atoi(strings.TrimPrefix(string(b), "next:"))
		if err != nil || err2 != nil || n < 0 || n > len(items) {
			fail(w, "invalid_cursor")
			return
		}
		start = n
	}
	end := min(start+limit, len(items))
	next := ""
	if end < len(items) {
		next = base64.StdEncoding.EncodeToString([]byte("next:" + strconv.Itoa(end)))
	}
	out := map[string]any{"ok": true, key: items[start:end], "response_metadata": map[string]any{"next_cursor": next}}
	if key == "messages" {
		out["has_more"] = next != ""
	}
	answer(w, out)
}

// view is a message as a read answers it: metadata only when asked.
func view(m *message, withMeta bool) message {
	v := *m
	if !withMeta {
		v.Metadata = nil
	}
	return v
}

func withMeta(r *http.Request) bool {
	v := r.Form.Get("include_all_metadata")
	return v == "true" || v == "1"
}

// history answers conversations.history: a channel by ID, newest first,
// within oldest/latest (exclusive unless inclusive), parents only — a
// thread's replies are in conversations.replies (a reply sent to the
// channel too, thread_broadcast, is listed).
func (s *Server) history(w http.ResponseWriter, r *http.Request) bool {
	c := s.byID(r.Form.Get("channel"))
	if c == nil {
		fail(w, "channel_not_found")
		return false
	}
	oldest, latest := r.Form.Get("oldest"), r.Form.Get("latest")
	incl := r.Form.Get("inclusive") == "1" || r.Form.Get("inclusive") == "true"
	out := []message{}
	for i := len(c.msgs) - 1; i >= 0; i-- {
		m := c.msgs[i]
		if m.ThreadTS != "" && m.ThreadTS != m.TS && m.Subtype != "thread_broadcast" {
			continue
		}
		if !within(m.TS, oldest, latest, incl) {
			continue
		}
		out = append(out, view(m, withMeta(r)))
	}
	page(w, r, out, s.limitOf(r, 100), "messages")
	return false
}

func within(ts, oldest, latest string, incl bool) bool {
	if oldest != "" && !(tsAfter(ts, oldest) || (incl && ts == oldest)) {
		return false
	}
	return latest == "" || tsAfter(latest, ts) || (incl && ts == latest)
}

// replies answers conversations.replies: the parent first, then its
// replies oldest first; a message without replies comes alone.
func (s *Server) replies(w http.ResponseWriter, r *http.Request) bool {
	c := s.byID(r.Form.Get("channel"))
	if c == nil {
		fail(w, "channel_not_found")
		return false
	}
	ts := r.Form.Get("ts")
	parent := c.find(ts)
	if parent == nil {
		fail(w, "thread_not_found")
		return false
	}
	out := []message{view(parent, withMeta(r))}
	for _, m := range c.msgs {
		if m.ThreadTS == ts && m.TS != ts {
			out = append(out, view(m, withMeta(r)))
		}
	}
	page(w, r, out, s.limitOf(r, 1000), "messages")
	return false
}

// list answers conversations.list: types public_channel (the default)
// and private_channel, by ID.
func (s *Server) list(w http.ResponseWriter, r *http.Request) bool {
	types := r.Form.Get("types")
	if types == "" {
		types = "public_channel"
	}
	ids := make([]string, 0, len(s.channels))
	for id := range s.channels {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := []map[string]any{}
	for _, id := range ids {
		c := s.channels[id]
		if (c.Private && !strings.Contains(types, "private_channel")) || (!c.Private && !strings.Contains(types, "public_channel")) || strings.HasPrefix(id, "D") {
			continue
		}
		out = append(out, map[string]any{"id": c.ID, "name": c.Name, "name_normalized": c.Name, "is_channel": !c.Private, "is_group": c.Private,
			"is_private": c.Private, "is_member": true, "is_archived": false})
	}
	page(w, r, out, s.limitOf(r, 100), "channels")
	return false
}

func tsAfter(a, b string) bool {
	x, _ := strconv.ParseFloat(a, 64)
	y, _ := strconv.ParseFloat(b, 64)
	return x > y
}

func (c *channel) find(ts string) *message {
	if c == nil || ts == "" {
		return nil
	}
	for _, m := range c.msgs {
		if m.TS == ts {
			return m
		}
	}
	return nil
}

func (s *Server) addReaction(w http.ResponseWriter, r *http.Request) bool {
	c := s.byID(r.Form.Get("channel"))
	if c == nil {
		fail(w, "channel_not_found")
		return false
	}
	m := c.find(r.Form.Get("timestamp"))
	name := r.Form.Get("name")
	if m == nil {
		fail(w, "message_not_found")
		return false
	}
	if name == "" {
		fail(w, "invalid_name")
		return false
	}
	for _, x := range m.Reactions {
		if x.Name == name {
			for _, u := range x.Users {
				if u == BotUser {
					fail(w, "already_reacted")
					return false
				}
			}
			x.Users, x.Count = append(x.Users, BotUser), x.Count+1
			s.writes["slack.addReaction"]++
			answer(w, map[string]any{"ok": true})
			return true
		}
	}
	m.Reactions = append(m.Reactions, &reaction{Name: name, Users: []string{BotUser}, Count: 1})
	s.writes["slack.addReaction"]++
	answer(w, map[string]any{"ok": true})
	return true
}

func (s *Server) getReactions(w http.ResponseWriter, r *http.Request) bool {
	c := s.byID(r.Form.Get("channel"))
	if c == nil {
		fail(w, "channel_not_found")
		return false
	}
	m := c.find(r.Form.Get("timestamp"))
	if m == nil {
		fail(w, "message_not_found")
		return false
	}
	answer(w, map[string]any{"ok": true, "type": "message", "channel": c.ID, "message": m})
	return false
}

// adminPost adds a person's message: {channel (ID or name), user, text,
// threadTs (a reply)}; it answers {ts, channel (the ID)}.
func (s *Server) adminPost(w http.ResponseWriter, r *http.Request) {
	var b struct{ Channel, User, Text, ThreadTs string }
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Channel == "" {
		http.Error(w, `give {"channel": "C1", "user": "U1", "text": "…"}`, http.StatusBadRequest)
		return
	}
	if b.User == "" {
		b.User = "UPERSON"
	}
	s.mu.Lock()
	c := s.byIDOrName(b.Channel)
	m := s.post(c, b.User, b.Text, b.ThreadTs, false, nil)
	s.mu.Unlock()
	answer(w, map[string]any{"ts": m.TS, "channel": c.ID})
}

// adminChannel lists a channel's messages, replies included, oldest first
// (by ID or name).
func (s *Server) adminChannel(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.byIDOrName(r.PathValue("id"))
	msgs := append([]*message{}, c.msgs...)
	sort.SliceStable(msgs, func(i, j int) bool { return tsAfter(msgs[j].TS, msgs[i].TS) })
	// Each message as the API shows it, with how it was posted.
	views := make([]map[string]any, 0, len(msgs))
	for _, m := range msgs {
		var v map[string]any
		b, _ := json.Marshal(m)
		_ = json.Unmarshal(b, &v)
		if m.posted != nil {
			v["posted"] = m.posted
		}
		views = append(views, v)
	}
	answer(w, map[string]any{"id": c.ID, "name": c.Name, "messages": views})
}

// adminPageMax sets the most items a page holds: {"max": 3}.
func (s *Server) adminPageMax(w http.ResponseWriter, r *http.Request) {
	var b struct{ Max int }
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Max < 1 {
		http.Error(w, `give {"max": 3}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.pageMax = b.Max
	s.mu.Unlock()
	answer(w, map[string]any{"max": b.Max})
}
