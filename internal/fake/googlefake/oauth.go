package googlefake

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"

	"github.com/keep-run/keep/internal/fake/fault"
)

const scopePrefix = "https://www.googleapis.com/auth/"

// authorize approves at once: it redirects to redirect_uri with a code, as
// Google does after a person clicks Allow. It checks what Google checks
// first: a client, a loopback redirect, a PKCE challenge.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	redirect := q.Get("redirect_uri")
	ru, err := url.Parse(redirect)
	if q.Get("client_id") == "" || err != nil || ru.Scheme != "http" || (ru.Hostname() != "127.0.0.1" && ru.Hostname() != "localhost") {
		http.Error(w, "Error 400: invalid_request — a client_id and a loopback redirect_uri are required", http.StatusBadRequest)
		return
	}
	if q.Get("response_type") != "code" || q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256" {
		http.Error(w, "Error 400: invalid_request — response_type=code and a S256 code_challenge are required", http.StatusBadRequest)
		return
	}
	code := newToken("4/fake-code-")
	s.mu.Lock()
	s.codes[code] = grant{scopes: strings.Fields(q.Get("scope")), challenge: q.Get("code_challenge"), redirect: redirect}
	s.mu.Unlock()
	v := ru.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	v.Set("scope", q.Get("scope"))
	ru.RawQuery = v.Encode()
	http.Redirect(w, r, ru.String(), http.StatusFound)
}

// token is the token endpoint: authorization_code (with the PKCE verifier)
// and refresh_token grants, answering and failing as Google does.
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	if f := s.faults.Take("token"); f != nil {
		if _, own := ownFaults[f.Fault]; own {
			s.ownFault(w, r, f)
		} else {
			fault.Before(w, r, f, s)
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Form.Get("grant_type") {
	case "authorization_code":
		g, ok := s.codes[r.Form.Get("code")]
		delete(s.codes, r.Form.Get("code"))
		sum := sha256.Sum256([]byte(r.Form.Get("code_verifier")))
		switch {
		case !ok:
			oauthError(w, http.StatusBadRequest, "invalid_grant", "Malformed auth code.")
			return
		case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
			oauthError(w, http.StatusBadRequest, "invalid_grant", "Invalid code verifier.")
			return
		case r.Form.Get("redirect_uri") != g.redirect:
			oauthError(w, http.StatusBadRequest, "redirect_uri_mismatch", "Bad Request")
			return
		}
		g.refresh = newToken("1//fake-refresh-")
		s.refresh[g.refresh] = g
		s.issue(w, g, true)
	case "refresh_token":
		g, ok := s.refresh[r.Form.Get("refresh_token")]
		if !ok || g.revoked {
			oauthError(w, http.StatusBadRequest, "invalid_grant", "Token has been expired or revoked.")
			return
		}
		s.issue(w, g, false)
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "Invalid grant_type: "+r.Form.Get("grant_type"))
	}
}

func (s *Server) issue(w http.ResponseWriter, g grant, withRefresh bool) {
	at := newToken("ya29.fake-")
	s.access[at] = g
	out := map[string]any{"access_token": at, "expires_in": 3599, "token_type": "Bearer", "scope": strings.Join(g.scopes, " ")}
	if withRefresh {
		out["refresh_token"] = g.refresh
	}
	writeJSON(w, http.StatusOK, out)
}

func oauthError(w http.ResponseWriter, code int, kind, desc string) {
	writeJSON(w, code, map[string]string{"error": kind, "error_description": desc})
}

func (s *Server) userinfo(w http.ResponseWriter, r *http.Request) bool {
	writeJSON(w, http.StatusOK, map[string]any{"sub": "1000001", "email": s.account, "email_verified": true})
	return false
}

// scopesFor lists the scopes any of which lets a request through, the
// narrowest first (what a 403 names).
func scopesFor(r *http.Request) []string {
	p, write := r.URL.Path, r.Method != http.MethodGet
	sc := func(names ...string) []string {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = scopePrefix + n
		}
		return append(out, "https://mail.google.com/")
	}
	switch {
	case strings.HasSuffix(p, "/messages/send"):
		return sc("gmail.send", "gmail.compose", "gmail.modify")
	case strings.HasPrefix(p, "/gmail/") && write:
		return sc("gmail.modify", "gmail.labels")
	case strings.HasSuffix(p, "/profile"):
		return nil
	case strings.HasPrefix(p, "/gmail/"):
		return sc("gmail.readonly", "gmail.modify", "gmail.metadata")
	case strings.HasPrefix(p, "/v4/") && write:
		return []string{scopePrefix + "spreadsheets"}
	case strings.HasPrefix(p, "/v4/"):
		return []string{scopePrefix + "spreadsheets.readonly", scopePrefix + "spreadsheets"}
	case strings.HasPrefix(p, "/calendar/") && write:
		return []string{scopePrefix + "calendar.events", scopePrefix + "calendar", scopePrefix + "calendar.events.owned"}
	case strings.HasPrefix(p, "/calendar/"):
		return []string{scopePrefix + "calendar.events.readonly", scopePrefix + "calendar.readonly", scopePrefix + "calendar.events", scopePrefix + "calendar",
			scopePrefix + "calendar.events.owned", scopePrefix + "calendar.events.owned.readonly"}
	}
	return nil
}

func hasAny(have, need []string) bool {
	for _, h := range have {
		for _, n := range need {
			if h == n {
				return true
			}
		}
	}
	return false
}

// metadataOnly is Gmail's refusal of what a token carrying gmail.metadata
// may not ask, even beside broader scopes: a search (q) and a message's
// body (format full or raw).
func metadataOnly(r *http.Request, scopes []string) string {
	if !strings.HasPrefix(r.URL.Path, "/gmail/") || !hasAny(scopes, []string{scopePrefix + "gmail.metadata"}) {
		return ""
	}
	q := r.URL.Query()
	if _, ok := q["q"]; ok {
		return "Metadata scope does not support 'q' parameter"
	}
	if f := q.Get("format"); r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/messages/") && (f == "" || f == "full" || f == "raw") {
		return "Metadata scope doesn't allow format " + strings.ToUpper(cmp.Or(f, "full"))
	}
	return ""
}
