package googlefake

import (
	"net/http"

	"github.com/keep-run/keep/internal/fake/fault"
)

// Faults are armed with POST /_admin/faults {"method", "fault", "count"}
// (package fault). method is a connector method ("sheets.appendRow",
// "gmail.send", …) or "token" (the OAuth token endpoint). Beside the
// common kinds Google's fake knows these of its own.
var ownFaults = map[string]string{
	"revoke":    "revoke the grant (refresh fails with invalid_grant) and answer 401",
	"403_scope": "answer 403 insufficientPermissions; apply nothing",
}

func newFaults() *fault.Set {
	return &fault.Set{Example: `{"method": "sheets.appendRow", "fault": "timeout_after_apply", "count": 1}`,
		Extra: func(k string) bool { _, ok := ownFaults[k]; return ok }}
}

// Error answers as Google does. A 401 is Google's answer to an expired
// access token: the fake expires them, so that a refresh fixes it.
func (s *Server) Error(w http.ResponseWriter, r *http.Request, code int) {
	switch code {
	case http.StatusTooManyRequests:
		apiError(w, code, "RESOURCE_EXHAUSTED", "rateLimitExceeded", "Quota exceeded for quota metric 'Requests' and limit 'Requests per minute per user'.")
	case http.StatusUnauthorized:
		s.mu.Lock()
		s.access = map[string]grant{}
		s.mu.Unlock()
		unauthorized(w)
	case http.StatusForbidden:
		apiError(w, code, "PERMISSION_DENIED", "insufficientPermissions", "Request had insufficient authentication scopes.")
	default:
		apiError(w, code, "UNAVAILABLE", "backendError", "The service is currently unavailable.")
	}
}

func unauthorized(w http.ResponseWriter) {
	apiError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "authError", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
}

// ownFault answers the faults of Google's own kinds.
func (s *Server) ownFault(w http.ResponseWriter, r *http.Request, f *fault.Fault) {
	switch f.Fault {
	case "revoke":
		s.revokeAll()
		unauthorized(w)
	default: // 403_scope
		s.Error(w, r, http.StatusForbidden)
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
