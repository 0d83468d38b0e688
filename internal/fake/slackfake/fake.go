// Package slackfake is a faithful fake of the Slack Web API methods keep's
// slack connector uses (auth.test, chat.postMessage with metadata,
// conversations.history, reactions.add, reactions.get): the same form
// parameters, the same {"ok": …} answers and error strings, 429 with
// Retry-After. An admin API seeds messages and arms faults. `keep-fake
// slack` serves it; tests start it in process. Not linked into keep.
package slackfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Token is the bot token the fake accepts (any token starting xoxb- works).
const Token = "xoxb-keep-fake"

// BotUser is the user id of the fake's bot.
const BotUser = "UKEEPBOT"

type message struct {
	TS        string         `json:"ts"`
	User      string         `json:"user"`
	Text      string         `json:"text"`
	ThreadTS  string         `json:"thread_ts,omitempty"`
	Type      string         `json:"type"`
	Metadata  map[string]any `json:"metadata,omitempty"`
	Reactions []*reaction    `json:"reactions,omitempty"`
}

type reaction struct {
	Name  string   `json:"name"`
	Users []string `json:"users"`
	Count int      `json:"count"`
}

type fault struct {
	Method     string `json:"method"`
	Fault      string `json:"fault"`
	Count      int    `json:"count"`
	RetryAfter int    `json:"retryAfter"`
}

// Server is one fake Slack workspace.
type Server struct {
	mu       sync.Mutex
	channels map[string][]*message
	revoked  bool
	faults   map[string][]*fault
	writes   map[string]int
	seq      int64
}

// New returns an empty workspace; any channel exists from its first use.
func New() *Server {
	return &Server{channels: map[string][]*message{}, faults: map[string][]*fault{}, writes: map[string]int{}}
}

// Handler serves the API (/api/…) and the admin routes (/_admin/…).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/auth.test", s.api("", s.authTest))
	mux.HandleFunc("POST /api/chat.postMessage", s.api("slack.postMessage", s.postMessage))
	mux.HandleFunc("POST /api/conversations.history", s.api("slack.history", s.history))
	mux.HandleFunc("POST /api/reactions.add", s.api("slack.addReaction", s.addReaction))
	mux.HandleFunc("POST /api/reactions.get", s.api("slack.getReactions", s.getReactions))
	mux.HandleFunc("POST /_admin/messages", s.adminPost)
	mux.HandleFunc("GET /_admin/channels/{id}", s.adminChannel)
	mux.HandleFunc("POST /_admin/faults", s.adminFault)
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
		var f *fault
		if fs := s.faults[method]; method != "" && len(fs) > 0 {
			f = fs[0]
			if f.Count--; f.Count <= 0 {
				s.faults[method] = fs[1:]
			}
		}
		if f == nil || !strings.HasSuffix(f.Fault, "_after_apply") {
			if f != nil {
				s.mu.Unlock()
				before(w, r, f)
				return
			}
			defer s.mu.Unlock()
			h(w, r)
			return
		}
		h(discard{}, r)
		s.mu.Unlock()
		switch f.Fault {
		case "timeout_after_apply":
			<-r.Context().Done()
		case "drop_after_apply":
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		default: // 500_after_apply
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	}
}

func before(w http.ResponseWriter, r *http.Request, f *fault) {
	switch f.Fault {
	case "429":
		ra := f.RetryAfter
		if ra <= 0 {
			ra = 1
		}
		w.Header().Set("Retry-After", strconv.Itoa(ra))
		w.WriteHeader(http.StatusTooManyRequests)
		answer(w, map[string]any{"ok": false, "error": "ratelimited"})
	case "500":
		http.Error(w, "internal error", http.StatusInternalServerError)
	case "timeout":
		<-r.Context().Done()
	default:
		fail(w, f.Fault) // any Slack error string: channel_not_found, not_in_channel, …
	}
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

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

func (s *Server) post(channel, user, text, thread string, meta map[string]any) *message {
	m := &message{TS: s.nextTS(), User: user, Text: text, ThreadTS: thread, Type: "message", Metadata: meta}
	// Keep timestamps increasing even within one microsecond.
	if msgs := s.channels[channel]; len(msgs) > 0 && m.TS <= msgs[len(msgs)-1].TS {
		last, _ := strconv.ParseFloat(msgs[len(msgs)-1].TS, 64)
		m.TS = strconv.FormatFloat(last+0.000001, 'f', 6, 64)
	}
	s.channels[channel] = append(s.channels[channel], m)
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
	m := s.post(ch, BotUser, text, r.Form.Get("thread_ts"), meta)
	s.writes["slack.postMessage"]++
	answer(w, map[string]any{"ok": true, "channel": ch, "ts": m.TS, "message": m})
	return true
}

func (s *Server) history(w http.ResponseWriter, r *http.Request) bool {
	ch := r.Form.Get("channel")
	oldest, latest := r.Form.Get("oldest"), r.Form.Get("latest")
	limit, _ := strconv.Atoi(r.Form.Get("limit"))
	if limit <= 0 || limit > 999 {
		limit = 100
	}
	withMeta := r.Form.Get("include_all_metadata") == "true" || r.Form.Get("include_all_metadata") == "1"
	var out []message
	msgs := s.channels[ch]
	for i := len(msgs) - 1; i >= 0 && len(out) < limit; i-- { // newest first, as Slack answers
		m := *msgs[i]
		if (oldest != "" && !tsAfter(m.TS, oldest)) || (latest != "" && !tsAfter(latest, m.TS)) {
			continue
		}
		if !withMeta {
			m.Metadata = nil
		}
		out = append(out, m)
	}
	answer(w, map[string]any{"ok": true, "messages": out, "has_more": false, "response_metadata": map[string]any{"next_cursor": ""}})
	return false
}

func tsAfter(a, b string) bool {
	x, _ := strconv.ParseFloat(a, 64)
	y, _ := strconv.ParseFloat(b, 64)
	return x > y
}

func (s *Server) find(ch, ts string) *message {
	for _, m := range s.channels[ch] {
		if m.TS == ts {
			return m
		}
	}
	return nil
}

func (s *Server) addReaction(w http.ResponseWriter, r *http.Request) bool {
	m := s.find(r.Form.Get("channel"), r.Form.Get("timestamp"))
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
	ch := r.Form.Get("channel")
	m := s.find(ch, r.Form.Get("timestamp"))
	if m == nil {
		fail(w, "message_not_found")
		return false
	}
	answer(w, map[string]any{"ok": true, "type": "message", "channel": ch, "message": m})
	return false
}

func (s *Server) adminPost(w http.ResponseWriter, r *http.Request) {
	var b struct{ Channel, User, Text string }
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Channel == "" {
		http.Error(w, `give {"channel": "C1", "user": "U1", "text": "…"}`, http.StatusBadRequest)
		return
	}
	if b.User == "" {
		b.User = "UPERSON"
	}
	s.mu.Lock()
	m := s.post(b.Channel, b.User, b.Text, "", nil)
	s.mu.Unlock()
	answer(w, map[string]any{"ts": m.TS})
}

func (s *Server) adminChannel(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	msgs := append([]*message{}, s.channels[r.PathValue("id")]...)
	sort.SliceStable(msgs, func(i, j int) bool { return tsAfter(msgs[j].TS, msgs[i].TS) })
	answer(w, map[string]any{"messages": msgs})
}

func (s *Server) adminFault(w http.ResponseWriter, r *http.Request) {
	var f fault
	if err := json.NewDecoder(r.Body).Decode(&f); err != nil || f.Method == "" || f.Fault == "" {
		http.Error(w, `give {"method": "slack.postMessage", "fault": "drop_after_apply", "count": 1}`, http.StatusBadRequest)
		return
	}
	if f.Count <= 0 {
		f.Count = 1
	}
	s.mu.Lock()
	s.faults[f.Method] = append(s.faults[f.Method], &f)
	s.mu.Unlock()
	answer(w, f)
}
