package googlefake

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Faults, armed with POST /_admin/faults {"method", "fault", "count"}.
// method is a connector method ("sheets.appendRow", "gmail.send", …) or
// "token" (the OAuth token endpoint).
var faultKinds = map[string]string{
	"timeout_after_apply": "apply the write, then answer nothing until the client gives up",
	"drop_after_apply":    "apply the write, then close the connection without an answer",
	"500_after_apply":     "apply the write, then answer 500 backendError",
	"timeout":             "answer nothing until the client gives up; apply nothing",
	"429":                 "answer 429 rateLimitExceeded with Retry-After (retryAfter seconds, default 1); apply nothing",
	"500":                 "answer 500 backendError; apply nothing",
	"503":                 "answer 503 backendError; apply nothing",
	"401":                 "expire the access token and answer 401; apply nothing (a refresh fixes it)",
	"revoke":              "revoke the grant (refresh fails with invalid_grant) and answer 401",
	"403_scope":           "answer 403 insufficientPermissions; apply nothing",
}

type fault struct {
	Method     string `json:"method"`
	Fault      string `json:"fault"`
	Count      int    `json:"count"`
	RetryAfter int    `json:"retryAfter"`
}

func (f *fault) afterApply() bool {
	switch f.Fault {
	case "timeout_after_apply", "drop_after_apply", "500_after_apply":
		return true
	}
	return false
}

// takeFault uses up one armed fault of method (the caller holds s.mu).
func (s *Server) takeFault(method string) *fault {
	fs := s.faults[method]
	if method == "" || len(fs) == 0 {
		return nil
	}
	f := fs[0]
	f.Count--
	if f.Count <= 0 {
		s.faults[method] = fs[1:]
	}
	return f
}

// hang answers nothing until the client gives up (at most two minutes).
func hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(2 * time.Minute):
	}
}

func drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func backendError(w http.ResponseWriter, code int) {
	apiError(w, code, "UNAVAILABLE", "backendError", "The service is currently unavailable.")
}

// before answers a fault that applies nothing (s.mu is not held).
func (f *fault) before(w http.ResponseWriter, r *http.Request, s *Server) {
	switch f.Fault {
	case "timeout":
		hang(r)
	case "429":
		ra := f.RetryAfter
		if ra <= 0 {
			ra = 1
		}
		w.Header().Set("Retry-After", strconv.Itoa(ra))
		apiError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", "rateLimitExceeded", "Quota exceeded for quota metric 'Requests' and limit 'Requests per minute per user'.")
	case "500":
		backendError(w, http.StatusInternalServerError)
	case "503":
		backendError(w, http.StatusServiceUnavailable)
	case "401":
		s.mu.Lock()
		s.access = map[string]grant{}
		s.mu.Unlock()
		apiError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "authError", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
	case "revoke":
		s.revokeAll()
		apiError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "authError", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
	case "403_scope":
		apiError(w, http.StatusForbidden, "PERMISSION_DENIED", "insufficientPermissions", "Request had insufficient authentication scopes.")
	default:
		apiError(w, http.StatusInternalServerError, "INTERNAL", "internal", fmt.Sprintf("keep-fake: fault %q cannot happen before a write", f.Fault))
	}
}

// after answers a fault once the write was applied (s.mu is not held).
func (f *fault) after(w http.ResponseWriter, r *http.Request) {
	switch f.Fault {
	case "timeout_after_apply":
		hang(r)
	case "drop_after_apply":
		drop(w)
	default:
		backendError(w, http.StatusInternalServerError)
	}
}

func (s *Server) revokeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, g := range s.refresh {
		g.revoked = true
		s.refresh[k] = g
	}
	s.access = map[string]grant{}
}
