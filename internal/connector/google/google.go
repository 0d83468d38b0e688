// Package google holds the gmail, sheets and calendar connectors, built on
// Google's official client libraries (google.golang.org/api) with the
// account that `keep connect google` stored (package account). Each write
// declares its identity, how keep reconciles it and how Google's errors
// classify (docs/scripts.md, generated from the declarations here).
package google

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/keep-run/keep/internal/account"
	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// Provider is the name accounts are stored and connected under.
const Provider = "google"

// Scope names Google's OAuth scopes as short names (gmail.send) and full.
const scopeBase = "https://www.googleapis.com/auth/"

// Scope returns the full URL of a short scope name.
func Scope(short string) string { return scopeBase + short }

// Google's own endpoints.
const (
	googleAuthURL  = "https://accounts.google.com/o/oauth2/auth"
	googleTokenURL = "https://oauth2.googleapis.com/token"
	googleUserinfo = "https://openidconnect.googleapis.com/v1/userinfo"
)

// Auth is what the connectors call Google with: the OAuth client and
// endpoint of keep.toml, and the stored account. A nil *Auth (keep
// validate, the docs) has no account: every call says to connect one.
type Auth struct {
	cfg        Config
	source     *account.Source
	base       http.RoundTripper
	sheetsPace *pacer
}

// NewAuth returns the credentials of the connected Google account.
func NewAuth(cfg Config, accts connector.Accounts) *Auth {
	a := &Auth{cfg: cfg, base: http.DefaultTransport, sheetsPace: newPacer(SheetsPerMinute)}
	a.source = account.NewSource(accts, Provider, a.OAuth("", nil))
	return a
}

// OAuth is the OAuth 2.0 client (Google's or the stand-in's endpoints).
func (a *Auth) OAuth(redirect string, scopes []string) *oauth2.Config {
	return OAuthConfig(a.cfg, redirect, scopes)
}

// OAuthConfig is the OAuth 2.0 client of [connectors.google].
func OAuthConfig(cfg Config, redirect string, scopes []string) *oauth2.Config {
	ep := oauth2.Endpoint{AuthURL: googleAuthURL, TokenURL: googleTokenURL, AuthStyle: oauth2.AuthStyleInParams}
	if cfg.Endpoint != "" {
		ep.AuthURL, ep.TokenURL = cfg.Endpoint+"/o/oauth2/auth", cfg.Endpoint+"/token"
	}
	id := cfg.ClientID
	if id == "" && cfg.Endpoint != "" {
		id = "keep-fake-client" // the stand-in accepts any client
	}
	return &oauth2.Config{ClientID: id, ClientSecret: cfg.ClientSecret, Endpoint: ep, RedirectURL: redirect, Scopes: scopes}
}

// UserinfoURL is where the connected account's address is read.
func UserinfoURL(cfg Config) string {
	if cfg.Endpoint != "" {
		return cfg.Endpoint + "/v1/userinfo"
	}
	return googleUserinfo
}

// options point a client library at Google or at the stand-in. path is the
// API's base path on the stand-in ("" for APIs whose paths start at the
// root, "calendar/v3/" for Calendar).
func (a *Auth) options(hc *http.Client, path string) []option.ClientOption {
	opts := []option.ClientOption{option.WithHTTPClient(hc)}
	if a.cfg.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(a.cfg.Endpoint+"/"+path))
	}
	return opts
}

// wire notes whether a request reached the network: an error before that
// is a definite failure; after it the write may have been applied.
type wire struct{ wrote bool }

// call runs fn with a client that carries the account's access token,
// after checking that the account granted one of scopes. A 401 is answered
// once by refreshing the token and trying again (Google applies nothing it
// answers 401).
func (a *Auth) call(ctx context.Context, what string, scopes []string, fn func(ctx context.Context, hc *http.Client) error) (*wire, error) {
	w := &wire{}
	if a == nil {
		return w, notConnected(what)
	}
	for attempt := 0; ; attempt++ {
		tok, granted, err := a.source.Token(ctx)
		if err != nil {
			return w, tokenError(what, err)
		}
		if len(scopes) > 0 && !anyOf(granted, scopes) {
			return w, kt.Errorf(kt.ClassPermission, "%s needs the Google scope %s, which the connected account did not grant%s", what, scopes[0], kt.ReconnectSuffix(Provider))
		}
		traced := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { w.wrote = true }})
		hc := &http.Client{Transport: &oauth2.Transport{Source: oauth2.StaticTokenSource(tok), Base: a.base},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		err = fn(traced, hc)
		var ge *googleapi.Error
		if attempt == 0 && errors.As(err, &ge) && ge.Code == http.StatusUnauthorized {
			a.source.Invalidate()
			w.wrote = false
			continue
		}
		return w, err
	}
}

// granted says the connected account granted one of scopes (false when
// none is connected or its token cannot be had).
func (a *Auth) granted(ctx context.Context, scopes []string) bool {
	if a == nil {
		return false
	}
	_, granted, err := a.source.Token(ctx)
	return err == nil && anyOf(granted, scopes)
}

func anyOf(granted, scopes []string) bool {
	for _, g := range granted {
		for _, s := range scopes {
			if g == s {
				return true
			}
		}
	}
	return false
}

func notConnected(what string) error {
	return kt.Errorf(kt.ClassPermission, "%s: no Google account is connected%s", what, kt.ReconnectSuffix(Provider))
}

func tokenError(what string, err error) error {
	switch {
	case errors.Is(err, account.ErrNotConnected):
		return notConnected(what)
	case errors.Is(err, account.ErrRevoked):
		return kt.Errorf(kt.ClassPermission, "%s: Google refused keep's access: %v%s", what, strings.TrimPrefix(err.Error(), account.ErrRevoked.Error()+": "), kt.ReconnectSuffix(Provider))
	case errors.Is(err, account.ErrWrongKey):
		return kt.Errorf(kt.ClassPermission, "%s: %v (set %s to the key of the node that connected the account, or connect it again)%s", what, err, account.KeyEnv, kt.ReconnectSuffix(Provider))
	}
	return kt.Errorf(kt.ClassTransient, "%s: getting a Google access token failed: %v", what, err)
}

// outcome classifies what a call's error means for a read or a write, by
// Google's documented codes and reasons.
func outcome(what string, write bool, w *wire, err error) connector.Result {
	if err == nil {
		return connector.Result{Outcome: connector.OutcomeApplied}
	}
	var ke *kt.Error
	if errors.As(err, &ke) {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: ke}
	}
	var au appliedUnread
	if errors.As(err, &au) {
		return connector.Result{Outcome: connector.OutcomeUncertain, Err: kt.Errorf(kt.ClassIndeterminate, "%s: %s", what, au.msg)}
	}
	var ns errNoSheet
	if errors.As(err, &ns) {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: kt.Errorf(kt.ClassPrecondition, "%s: %v", what, ns)}
	}
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		if !write {
			return connector.Result{Err: kt.Errorf(kt.ClassTransient, "%s failed: %v", what, connector.CleanErr(err))}
		}
		if !w.wrote && !connector.IsTimeout(err) {
			return connector.Result{Outcome: connector.OutcomeFailed, Err: kt.Errorf(kt.ClassTransient, "%s was not sent: %v", what, connector.CleanErr(err))}
		}
		return connector.Result{Outcome: connector.OutcomeUncertain, Err: kt.Errorf(kt.ClassIndeterminate, "%s: the request was sent but no complete answer came back (%v); Google may have applied it", what, connector.CleanErr(err))}
	}
	reason := ""
	if len(ge.Errors) > 0 {
		reason = ge.Errors[0].Reason
	}
	msg := fmt.Sprintf("%s: Google answered %d %s", what, ge.Code, ge.Message)
	failed := func(class kt.ErrorClass, extra string) connector.Result {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: kt.Errorf(class, "%s%s", msg, extra)}
	}
	switch {
	case ge.Code == 403 && reason == "dailyLimitExceeded":
		r := failed(kt.ClassTransient, ": the Cloud project's daily quota is used up; Google renews it at midnight Pacific time, and keep tries again then")
		r.Err.RetryAfter = max(connector.RetryAfter(ge.Header), untilPacificMidnight(time.Now()))
		return r
	case ge.Code == 429 || (ge.Code == 403 && usageLimits[reason]):
		r := failed(kt.ClassTransient, "")
		r.Err.RetryAfter = connector.RetryAfter(ge.Header)
		return r
	case ge.Code == 403 && reason == "accessNotConfigured":
		return failed(kt.ClassPermission, fmt.Sprintf(": enable the %s in the Google Cloud project of keep's OAuth client (APIs & Services, Library), then try again", apiName(what)))
	case ge.Code == 401:
		return failed(kt.ClassPermission, kt.ReconnectSuffix(Provider))
	case ge.Code == 403 && (reason == "insufficientPermissions" || strings.Contains(ge.Message, "insufficient authentication scopes")):
		return failed(kt.ClassPermission, ": the connected account did not grant the scope this needs"+kt.ReconnectSuffix(Provider))
	case ge.Code == 403:
		return failed(kt.ClassPermission, ": the connected account may not do this (share the file or calendar with it)")
	case ge.Code == 404 || ge.Code == 409 || ge.Code == 412:
		return failed(kt.ClassPrecondition, "")
	case ge.Code >= 500 && write:
		return connector.Result{Outcome: connector.OutcomeUncertain, Err: kt.Errorf(kt.ClassIndeterminate, "%s; Google may or may not have applied the write", msg)}
	case ge.Code >= 500 || ge.Code == 408:
		return failed(kt.ClassTransient, "")
	}
	return failed(kt.ClassLogic, "")
}

// usageLimits are the reasons of Google's 403s that are rate limits and
// quotas (domain usageLimits): retried, like a 429.
var usageLimits = map[string]bool{"rateLimitExceeded": true, "userRateLimitExceeded": true, "quotaExceeded": true, "dailyLimitExceeded": true}

// apiName is the Google API a method calls, by the name the Cloud
// console's library lists it under.
func apiName(what string) string {
	switch {
	case strings.HasPrefix(what, "sheets."):
		return "Google Sheets API"
	case strings.HasPrefix(what, "calendar."):
		return "Google Calendar API"
	}
	return "Gmail API"
}

// untilPacificMidnight is how long until Google renews daily quotas
// (midnight US Pacific time; standard time's offset, so at most an hour late).
func untilPacificMidnight(now time.Time) time.Duration {
	pt := now.In(time.FixedZone("PST", -8*3600))
	next := time.Date(pt.Year(), pt.Month(), pt.Day()+1, 0, 0, 0, 0, pt.Location())
	return next.Sub(pt)
}

// read runs a read and turns its error into the run's.
func (a *Auth) read(ctx context.Context, what string, scopes []string, fn func(ctx context.Context, hc *http.Client) error) *kt.Error {
	w, err := a.call(ctx, what, scopes, fn)
	if err == nil {
		return nil
	}
	r := outcome(what, false, w, err)
	if r.Err.Class == kt.ClassPrecondition {
		r.Err.Class = kt.ClassLogic // a read of something that is not there: the script asked wrong
	}
	return r.Err
}

// write runs a write: applied, failed for sure, or uncertain.
func (a *Auth) write(ctx context.Context, what string, scopes []string, fn func(ctx context.Context, hc *http.Client) (any, error)) connector.Result {
	var val any
	w, err := a.call(ctx, what, scopes, func(ctx context.Context, hc *http.Client) error {
		var err error
		val, err = fn(ctx, hc)
		return err
	})
	r := outcome(what, true, w, err)
	if err == nil {
		r.Value = val
	}
	return r
}

// Strings and arguments.

func str(v any) string { s, _ := v.(string); return s }

func strOr(v any, def string) string {
	if s := str(v); s != "" {
		return s
	}
	return def
}

func strList(v any) ([]string, bool) {
	switch t := v.(type) {
	case nil:
		return nil, true
	case string:
		return []string{t}, true
	case []any:
		out := make([]string, 0, len(t))
		for _, x := range t {
			s, ok := x.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

func need(method string, a map[string]any, names ...string) error {
	for _, n := range names {
		if s, ok := a[n].(string); !ok || strings.TrimSpace(s) == "" {
			return fmt.Errorf("%s needs %s (a non-empty string)", method, n)
		}
	}
	return nil
}

// New returns the gmail, sheets and calendar connectors calling Google
// with auth (nil: no account; every call says to connect one).
func New(auth *Auth) []*connector.Connector {
	return []*connector.Connector{newGmail(auth), newSheets(auth), newCalendar(auth)}
}
