// Package googlefake is a faithful fake of the parts of Google's REST APIs
// that keep's gmail, sheets and calendar connectors use: the same paths,
// JSON shapes and error bodies as Google's published API (Gmail v1, Sheets
// v4, Calendar v3, OAuth 2.0 with PKCE), an admin API for tests and people
// trying keep, and fault injection. `keep-fake google` serves it; tests
// start it in process. It holds everything in memory.
//
// It is not linked into keep.
package googlefake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/keep-run/keep/internal/fake/fault"
)

// PageMax is the most items one page of a list holds by default.
const PageMax = 100

// Server is one fake Google.
type Server struct {
	mu sync.Mutex
	// now stamps received mail; tests may replace it.
	now func() time.Time

	codes    map[string]grant // authorization code → what it grants
	access   map[string]grant // access token → grant
	refresh  map[string]grant // refresh token → grant
	account  string
	messages []*message
	labels   []label
	nextMsg  int
	// history lists the mailbox's changes (users.history.list); historyID
	// is the latest's id, historyFloor the oldest startHistoryId still
	// answered (an older one is answered 404, as an expired one is).
	history      []historyRecord
	historyID    uint64
	historyFloor uint64
	sheets       map[string]*spreadsheet
	calendar     map[string]map[string]*event // calendar id → event id → event
	faults       *fault.Set
	notified     []string // "eventId address": invitations Calendar would have mailed
	// sheetsUse holds the times of the Sheets requests of the last minute,
	// reads and writes apart (Google's per-user quotas).
	sheetsUse map[bool][]time.Time
	// pageMax is the most items a page of a list holds, whatever was
	// asked (Google's lists may answer short pages with a nextPageToken).
	pageMax int

	// Writes counts the writes each method applied, for tests (sink counts).
	writes map[string]int
}

type grant struct {
	scopes    []string
	challenge string
	redirect  string
	refresh   string
	revoked   bool
}

// New returns an empty fake with one account, me@example.com.
func New() *Server {
	return &Server{
		now: time.Now, codes: map[string]grant{}, access: map[string]grant{}, refresh: map[string]grant{},
		account: "me@example.com", sheets: map[string]*spreadsheet{}, calendar: map[string]map[string]*event{},
		faults: newFaults(), writes: map[string]int{}, pageMax: PageMax, sheetsUse: map[bool][]time.Time{}, historyID: 1000,
		labels: []label{
			{ID: "INBOX", Name: "INBOX", Type: "system"}, {ID: "SENT", Name: "SENT", Type: "system"},
			{ID: "UNREAD", Name: "UNREAD", Type: "system"}, {ID: "STARRED", Name: "STARRED", Type: "system"},
			{ID: "IMPORTANT", Name: "IMPORTANT", Type: "system"}, {ID: "TRASH", Name: "TRASH", Type: "system"},
			{ID: "SPAM", Name: "SPAM", Type: "system"},
		},
	}
}

// Handler serves the fake's whole API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /o/oauth2/auth", s.authorize)
	mux.HandleFunc("POST /token", s.token)
	mux.HandleFunc("GET /v1/userinfo", s.api("", s.userinfo))

	mux.HandleFunc("GET /gmail/v1/users/{user}/profile", s.api("", s.gmailProfile))
	mux.HandleFunc("GET /gmail/v1/users/{user}/messages", s.api("gmail.search", s.gmailList))
	mux.HandleFunc("GET /gmail/v1/users/{user}/history", s.api("gmail.history", s.gmailHistory))
	mux.HandleFunc("GET /gmail/v1/users/{user}/messages/{id}", s.api("gmail.get", s.gmailGet))
	mux.HandleFunc("POST /gmail/v1/users/{user}/messages/send", s.api("gmail.send", s.gmailSend))
	mux.HandleFunc("POST /gmail/v1/users/{user}/messages/{id}/modify", s.api("gmail.modifyLabels", s.gmailModify))
	mux.HandleFunc("GET /gmail/v1/users/{user}/threads/{id}", s.api("gmail.getThread", s.gmailThread))
	mux.HandleFunc("GET /gmail/v1/users/{user}/labels", s.api("", s.gmailLabels))
	mux.HandleFunc("POST /gmail/v1/users/{user}/labels", s.api("gmail.createLabel", s.gmailCreateLabel))

	mux.HandleFunc("GET /v4/spreadsheets/{id}", s.api("sheets.get", s.sheetsGet))
	mux.HandleFunc("POST /v4/spreadsheets/{idop}", s.api("sheets.appendRow", s.sheetsBatchUpdate))
	mux.HandleFunc("GET /v4/spreadsheets/{id}/values/{range}", s.api("sheets.getRows", s.sheetsValuesGet))
	mux.HandleFunc("PUT /v4/spreadsheets/{id}/values/{range}", s.api("sheets.updateRow", s.sheetsValuesUpdate))

	mux.HandleFunc("GET /calendar/v3/calendars/{cal}/events", s.api("calendar.listEvents", s.calList))
	mux.HandleFunc("GET /calendar/v3/calendars/{cal}/events/{id}", s.api("calendar.getEvent", s.calGet))
	mux.HandleFunc("POST /calendar/v3/calendars/{cal}/events", s.api("calendar.createEvent", s.calInsert))
	mux.HandleFunc("PATCH /calendar/v3/calendars/{cal}/events/{id}", s.api("calendar.updateEvent", s.calPatch))

	mux.HandleFunc("POST /_admin/gmail/messages", s.adminAddMessage)
	mux.HandleFunc("GET /_admin/gmail/messages", s.adminMessages)
	mux.HandleFunc("POST /_admin/gmail/expire_history", s.adminExpireHistory)
	mux.HandleFunc("GET /_admin/sheets/{id}", s.adminSheet)
	mux.HandleFunc("POST /_admin/sheets/{id}/rows", s.adminAddRow)
	mux.HandleFunc("GET /_admin/calendar/{cal}", s.adminCalendar)
	mux.HandleFunc("POST /_admin/faults", s.faults.AdminArm)
	mux.HandleFunc("POST /_admin/page_max", s.adminPageMax)
	mux.HandleFunc("GET /_admin/faults", s.faults.AdminList)
	mux.HandleFunc("POST /_admin/revoke", s.adminRevoke)
	mux.HandleFunc("POST /_admin/expire", s.adminExpire)
	mux.HandleFunc("GET /_admin/writes", s.adminWrites)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "notFound", "keep-fake google does not serve "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// api wraps one API route: the bearer token, then any fault armed for
// method, then the route itself under the lock.
func (s *Server) api(method string, h func(w http.ResponseWriter, r *http.Request) (applied bool)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		g, ok := s.access[tok]
		if !ok || g.revoked {
			s.mu.Unlock()
			w.Header().Set("WWW-Authenticate", `Bearer realm="https://accounts.google.com/", error="invalid_token"`)
			apiError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "authError",
				"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
			return
		}
		if need := scopesFor(r); len(need) > 0 && !hasAny(g.scopes, need) {
			s.mu.Unlock()
			w.Header().Set("WWW-Authenticate", `Bearer realm="https://accounts.google.com/", error="insufficient_scope", scope="`+need[0]+`"`)
			apiError(w, http.StatusForbidden, "PERMISSION_DENIED", "insufficientPermissions", "Request had insufficient authentication scopes.")
			return
		}
		if msg := metadataOnly(r, g.scopes); msg != "" {
			s.mu.Unlock()
			apiError(w, http.StatusForbidden, "PERMISSION_DENIED", "forbidden", msg)
			return
		}
		if s.overSheetsQuota(r) {
			s.mu.Unlock()
			kind := map[bool]string{true: "Write", false: "Read"}[r.Method != http.MethodGet]
			w.Header().Set("Retry-After", "60")
			apiError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", "rateLimitExceeded",
				fmt.Sprintf("Quota exceeded for quota metric '%s requests' and limit '%s requests per minute per user' of service 'sheets.googleapis.com'.", kind, kind))
			return
		}
		// A fault after the write applies it and loses its answer.
		fault.Serve(w, r, &s.mu, s.faults.Take(method), s, func(w http.ResponseWriter) { h(w, r) }, s.ownFault)
	}
}

// SheetsPerMinute is what Sheets allows each user per minute, of reads
// and of writes apart.
const SheetsPerMinute = 60

// overSheetsQuota counts a Sheets request against the user's quota of the
// last minute (by the fake's clock); true when it is over (s.mu is held).
func (s *Server) overSheetsQuota(r *http.Request) bool {
	if !strings.HasPrefix(r.URL.Path, "/v4/") {
		return false
	}
	write, now := r.Method != http.MethodGet, s.now()
	use := s.sheetsUse[write]
	for len(use) > 0 && !now.Before(use[0].Add(time.Minute)) {
		use = use[1:]
	}
	if len(use) >= SheetsPerMinute {
		s.sheetsUse[write] = use
		return true
	}
	s.sheetsUse[write] = append(use, now)
	return false
}

// SetClock replaces the clock that stamps mail and counts the Sheets
// quota (tests that pace by a clock of their own).
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	s.now = now
	s.mu.Unlock()
}

func newToken(prefix string) string {
	b := make([]byte, 16)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// apiError answers in Google's error format (the JSON googleapi.CheckResponse reads).
func apiError(w http.ResponseWriter, code int, status, reason, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{
		"code": code, "message": msg, "status": status,
		"errors": []map[string]any{{"message": msg, "domain": "global", "reason": reason}},
	}})
}

func decode(r *http.Request, v any) error {
	return json.NewDecoder(http.MaxBytesReader(nil, r.Body, 8<<20)).Decode(v)
}
