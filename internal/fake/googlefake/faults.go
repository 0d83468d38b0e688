package googlefake

import (
	"net/http"
	"strings"

	"github.com/keep-run/keep/internal/fake/fault"
)

// Faults are armed with POST /_admin/faults {"method", "fault", "count"}
// (package fault). method is a connector method ("sheets.appendRow",
// "gmail.send", …) or "token" (the OAuth token endpoint). Beside the
// common kinds Google's fake knows these of its own.
var ownFaults = map[string]string{
	"revoke":                    "revoke the grant (refresh fails with invalid_grant) and answer 401",
	"403_scope":                 "answer 403 insufficientPermissions; apply nothing",
	"403_rateLimitExceeded":     "answer 403 rateLimitExceeded (domain usageLimits), as Calendar and Gmail answer a project's rate limit; apply nothing",
	"403_userRateLimitExceeded": "answer 403 userRateLimitExceeded (domain usageLimits): the per-user rate limit; apply nothing",
	"403_quotaExceeded":         "answer 403 quotaExceeded (domain usageLimits), as Calendar answers its usage limits; apply nothing",
	"403_dailyLimitExceeded":    "answer 403 dailyLimitExceeded (domain usageLimits): the project's daily quota; apply nothing",
	"403_accessNotConfigured":   "answer 403 accessNotConfigured: the API is not enabled in the OAuth client's Cloud project; apply nothing",
}

// usageLimits are the bodies Google answers its usage-limit 403s with
// (its documented reasons, domain usageLimits, and messages).
var usageLimits = map[string]string{
	"rateLimitExceeded":     "Rate Limit Exceeded",
	"userRateLimitExceeded": "User Rate Limit Exceeded",
	"quotaExceeded":         "Calendar usage limits exceeded.",
	"dailyLimitExceeded":    "Daily Limit Exceeded",
}

// forbidden answers a 403 with its reason, as Google's usage limits and
// its API-not-enabled answer look.
func forbidden(w http.ResponseWriter, r *http.Request, reason string) {
	msg, domain := usageLimits[reason], "usageLimits"
	if reason == "accessNotConfigured" {
		api := "Gmail API"
		switch {
		case strings.HasPrefix(r.URL.Path, "/v4/"):
			api = "Google Sheets API"
		case strings.HasPrefix(r.URL.Path, "/calendar/"):
			api = "Google Calendar API"
		}
		msg = api + " has not been used in project 123456789 before or it is disabled. Enable it by visiting the API library of the project, then retry."
	}
	writeJSON(w, http.StatusForbidden, map[string]any{"error": map[string]any{
		"code": http.StatusForbidden, "message": msg, "status": "PERMISSION_DENIED",
		"errors": []map[string]any{{"message": msg, "domain": domain, "reason": reason}},
	}})
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
	case "403_rateLimitExceeded", "403_userRateLimitExceeded", "403_quotaExceeded", "403_dailyLimitExceeded", "403_accessNotConfigured":
		forbidden(w, r, strings.TrimPrefix(f.Fault, "403_"))
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
