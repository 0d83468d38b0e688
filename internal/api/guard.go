package api

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// Guard protects every request: security headers; a token when one is set
// (API: "Authorization: Bearer"; pages: a session cookie from /login); and
// CSRF checks on every state-changing request.
type Guard struct {
	// Token, when set, is required. keep serve refuses a non-loopback address without one.
	Token string
	// secret signs session cookies and CSRF tokens; random per process.
	secret []byte
}

// NewGuard builds a Guard.
func NewGuard(token string) *Guard {
	g := &Guard{Token: token, secret: make([]byte, 32)}
	_, _ = rand.Read(g.secret)
	return g
}

const (
	sessionCookie = "keep_session"
	csrfCookie    = "keep_csrf"
	// CSRFField is the form field (and X-CSRF-Token header) carrying the CSRF token.
	CSRFField = "csrf"
)

// IsLoopback reports whether a listen address only accepts local connections.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (g *Guard) sign(v string) string {
	m := hmac.New(sha256.New, g.secret)
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil))
}

func (g *Guard) session() string { return g.sign("session:" + g.Token) }

// Authenticated reports whether a request carries the token or a valid session.
func (g *Guard) Authenticated(r *http.Request) bool {
	if g.Token == "" {
		return true
	}
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		return subtle.ConstantTimeCompare([]byte(strings.TrimPrefix(h, "Bearer ")), []byte(g.Token)) == 1
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		return subtle.ConstantTimeCompare([]byte(c.Value), []byte(g.session())) == 1
	}
	return false
}

// Login checks a token from the login form and sets the session cookie.
func (g *Guard) Login(w http.ResponseWriter, r *http.Request, token string) bool {
	if g.Token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(g.Token)) != 1 {
		return false
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: g.session(), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return true
}

// CSRFToken returns the page's CSRF token, setting its cookie when missing.
func (g *Guard) CSRFToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 64 {
		return c.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	v := hex.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	r.AddCookie(&http.Cookie{Name: csrfCookie, Value: v})
	return v
}

// csrfOK accepts a state-changing request when it proves it does not come
// from another site: a bearer token (not sent by browsers on their own), or
// the double-submit CSRF token matching its cookie, or keep's own client
// header (which a cross-site page cannot set without a CORS preflight, and
// keep answers none) with no cross-site markers.
func (g *Guard) csrfOK(r *http.Request) bool {
	// A write from a browser names its page's origin: another site's page
	// is refused whatever else the request carries.
	if origin := r.Header.Get("Origin"); origin != "" && origin != "null" {
		if u, err := url.Parse(origin); err != nil || u.Host != r.Host {
			return false
		}
	}
	if g.Token != "" && strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		return true
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return false
	}
	if c, err := r.Cookie(csrfCookie); err == nil && c.Value != "" {
		sent := r.Header.Get("X-CSRF-Token")
		if sent == "" {
			sent = r.PostFormValue(CSRFField)
		}
		if subtle.ConstantTimeCompare([]byte(sent), []byte(c.Value)) == 1 {
			return true
		}
	}
	return r.Header.Get("X-Keep-Client") != ""
}

// InstancePath answers which keep serve this is, without a token: the CLI
// asks it before it sends a token or a decision to an address it read from
// a file that may be stale.
const InstancePath = "/api/v1/instance"

// LoopbackHost reports whether a Host header names this machine's loopback
// interface (localhost, 127.0.0.0/8, [::1], with or without a port).
func LoopbackHost(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// Wrap applies the guard to a handler. loginPath is where pages send people
// without a session (API requests get 401 instead).
func (g *Guard) Wrap(next http.Handler, loginPath string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		// DNS rebinding: a page on evil.example whose name is made to resolve
		// to 127.0.0.1 reaches a tokenless keep serve with Host: evil.example.
		// Without a token only loopback host names are served.
		if g.Token == "" && !LoopbackHost(r.Host) {
			Error(w, http.StatusMisdirectedRequest, "host", "this keep serve has no token and answers only requests addressed to localhost, 127.0.0.1 or [::1]; open it at one of those, or start it with --token")
			return
		}
		isAPI := strings.HasPrefix(r.URL.Path, "/api/")
		public := r.URL.Path == loginPath || r.URL.Path == InstancePath || strings.HasPrefix(r.URL.Path, "/static/") || r.URL.Path == "/metrics" && g.Token == ""
		if !public && !g.Authenticated(r) {
			if isAPI || r.URL.Path == "/metrics" || r.URL.Path == "/events" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="keep"`)
				Error(w, http.StatusUnauthorized, "unauthorized", "this keep needs a token: send Authorization: Bearer <token> (the --token or KEEP_TOKEN of keep serve)")
				return
			}
			http.Redirect(w, r, loginPath+"?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && r.URL.Path != loginPath && !g.csrfOK(r) {
			Error(w, http.StatusForbidden, "csrf", "this request changes state but carries no proof that it comes from keep's own page or client (CSRF token or X-Keep-Client header)")
			return
		}
		next.ServeHTTP(w, r)
	})
}
