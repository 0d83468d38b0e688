package api

import (
	"bytes"
	"context"
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

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/connector"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// Guard protects every request: security headers; a token when one is set
// (API: "Authorization: Bearer"; pages: a session cookie from /login); and
// on every state-changing request, proof that a shared header cannot give:
// the API needs the instance secret (the CLI's, read from the data
// directory) or the token; the page needs its CSRF token.
type Guard struct {
	// Token, when set, is required. keep serve refuses a non-loopback address without one.
	Token string
	// Secret is the instance secret of the data directory
	// (daemon.APISecretFile): whoever sends it can read the data directory,
	// so it is the one credential whose X-Keep-Actor is believed.
	Secret string
	// secret signs session cookies, CSRF tokens and flash messages; random per process.
	secret []byte
}

// NewGuard builds a Guard.
func NewGuard(token, instanceSecret string) *Guard {
	g := &Guard{Token: token, Secret: instanceSecret, secret: make([]byte, 32)}
	_, _ = rand.Read(g.secret)
	return g
}

// Auth is how a request proved who sent it.
type Auth int

const (
	// AuthNone: nothing (a tokenless keep serve still serves reads).
	AuthNone Auth = iota
	// AuthSession: the page's session cookie (keep serve --token, /login).
	AuthSession
	// AuthToken: Authorization: Bearer <keep serve's --token>.
	AuthToken
	// AuthSecret: Authorization: Bearer <the data directory's api.secret>.
	AuthSecret
	// AuthPage: keep's own page calling the API in process (ForPage),
	// after the guard let the person's request through to the page (its
	// session, and on a state change its CSRF token). No request from
	// outside carries it: the guard never answers it.
	AuthPage
)

type authKey struct{}

// AuthOf is how the request was authenticated (set by Wrap).
func AuthOf(r *http.Request) Auth {
	a, _ := r.Context().Value(authKey{}).(Auth)
	return a
}

func (g *Guard) authOf(r *http.Request) Auth {
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		b := []byte(strings.TrimPrefix(h, "Bearer "))
		switch {
		case g.Secret != "" && subtle.ConstantTimeCompare(b, []byte(g.Secret)) == 1:
			return AuthSecret
		case g.Token != "" && subtle.ConstantTimeCompare(b, []byte(g.Token)) == 1:
			return AuthToken
		}
		return AuthNone
	}
	if c, err := r.Cookie(sessionCookie); err == nil && g.Token != "" && subtle.ConstantTimeCompare([]byte(c.Value), []byte(g.session())) == 1 {
		return AuthSession
	}
	return AuthNone
}

// Sign returns a signature of v by this process (flash messages: the page
// shows only what keep itself put in a link).
func (g *Guard) Sign(v string) string { return g.sign("flash:" + v) }

// Signed reports whether sig is this process's signature of v.
func (g *Guard) Signed(v, sig string) bool {
	return sig != "" && hmac.Equal([]byte(sig), []byte(g.Sign(v)))
}

// APISecretName is the instance secret's file in the data directory
// (daemon.APISecretFile; named here too so the API's errors can say it).
const APISecretName = "api.secret"

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

// Authenticated reports whether a request carries the token, the
// instance secret or a valid session (anything, when there is no token).
func (g *Guard) Authenticated(r *http.Request) bool {
	return g.Token == "" || g.authOf(r) != AuthNone
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

// csrfOK accepts a state-changing request of the page when it proves it
// comes from keep's own page — the double-submit CSRF token matching its
// cookie — or carries the instance secret or the token (not sent by
// browsers on their own). A header anybody can set is no proof: a script
// calling keep's address sets any header it likes.
func (g *Guard) csrfOK(r *http.Request) bool {
	if !sameOrigin(r) {
		return false
	}
	if a := g.authOf(r); a == AuthSecret || a == AuthToken {
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
	return false
}

// sameOrigin: a write from a browser names its page's origin; another
// site's page is refused whatever else the request carries.
func sameOrigin(r *http.Request) bool {
	if origin := r.Header.Get("Origin"); origin != "" && origin != "null" {
		if u, err := url.Parse(origin); err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

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

// InProcess serves next to a caller of this very process (the CLI's own
// API when no keep serve runs, inproc.API): no socket reaches it, and
// its caller opened the data directory itself, so it is authenticated as
// the instance secret's holder is.
func InProcess(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), authKey{}, AuthSecret)))
	})
}

// ForPage serves next to keep's own page in this process (web.New): the
// page reads and acts only through the API, as the CLI does, so a decision
// on the page gets the answer, the error and the refusal the CLI gets. Its
// requests are authenticated as the page's (AuthPage: control.ProofPage,
// and the actor the page names), since the guard checked the person's
// request before the page passed it on; no secret goes near the browser.
func ForPage(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(pageWriter{w}, r.WithContext(context.WithValue(r.Context(), authKey{}, AuthPage)))
	})
}

// pageWriter is the response of a request of keep's own page (ForPage):
// its answers are written compact (reply).
type pageWriter struct{ http.ResponseWriter }

// Unwrap lets http.ResponseController reach the writer underneath.
func (w pageWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

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
		public := r.URL.Path == loginPath || r.URL.Path == apitype.InstancePath || strings.HasPrefix(r.URL.Path, "/static/") || r.URL.Path == "/metrics" && g.Token == ""
		if !public && !g.Authenticated(r) {
			if isAPI || r.URL.Path == "/metrics" || r.URL.Path == "/events" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="keep"`)
				Error(w, http.StatusUnauthorized, "unauthorized", "this keep needs a token: send Authorization: Bearer <token> (the --token or KEEP_TOKEN of keep serve), or the instance secret of its data directory (DATA/"+APISecretName+"), which keep's CLI sends")
				return
			}
			http.Redirect(w, r, loginPath+"?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		auth := g.authOf(r)
		if r.Method != http.MethodGet && r.Method != http.MethodHead && r.URL.Path != loginPath {
			switch {
			case r.Header.Get("User-Agent") == connector.UserAgent:
				Error(w, http.StatusForbidden, "connector", "this request comes from one of keep's own connectors (a workflow's script): a workflow may not change keep's state through keep's API or page")
				return
			case !sameOrigin(r):
				Error(w, http.StatusForbidden, "csrf", "this request changes state but comes from a page of another site ("+r.Header.Get("Origin")+")")
				return
			case !isAPI && !g.csrfOK(r):
				Error(w, http.StatusForbidden, "csrf", "this request changes state but carries no proof that it comes from keep's own page (its CSRF token) or keep's CLI (the instance secret): reload the page and try again")
				return
			}
		}
		r = r.WithContext(context.WithValue(r.Context(), authKey{}, auth))
		next.ServeHTTP(w, r)
	})
}
