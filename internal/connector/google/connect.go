package google

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"golang.org/x/oauth2"

	"github.com/keep-run/keep/internal/connector"
)

// Flow is one OAuth 2.0 authorization in progress (authorization code with
// PKCE): keep connect google runs it over a loopback listener, the page
// over keep serve's own address.
type Flow struct {
	cfg      Config
	conf     *oauth2.Config
	verifier string
	State    string
	Scopes   []string
}

// StartFlow begins an authorization whose answer comes to redirect.
func StartFlow(cfg Config, redirect string, scopes []string) *Flow {
	b := make([]byte, 16)
	rand.Read(b)
	return &Flow{cfg: cfg, conf: OAuthConfig(cfg, redirect, scopes), verifier: oauth2.GenerateVerifier(), State: hex.EncodeToString(b), Scopes: scopes}
}

// URL is where a person allows keep to act as their account.
func (f *Flow) URL() string {
	return f.conf.AuthCodeURL(f.State, oauth2.AccessTypeOffline, oauth2.S256ChallengeOption(f.verifier), oauth2.SetAuthURLParam("prompt", "consent"))
}

// Finish exchanges the code Google sent back, reads which account it is,
// and stores the tokens sealed. It returns the account and the scopes granted.
func (f *Flow) Finish(ctx context.Context, accts connector.Accounts, code string) (string, []string, error) {
	tok, err := f.conf.Exchange(ctx, code, oauth2.VerifierOption(f.verifier))
	if err != nil {
		return "", nil, fmt.Errorf("exchange the code for tokens: %w", err)
	}
	if tok.RefreshToken == "" {
		return "", nil, fmt.Errorf("Google gave no refresh token, so keep could not act once the access token expires; remove keep's access at https://myaccount.google.com/permissions and connect again")
	}
	granted := f.Scopes
	if s, ok := tok.Extra("scope").(string); ok && s != "" {
		granted = strings.Fields(s)
	}
	resp, err := f.conf.Client(ctx, tok).Get(UserinfoURL(f.cfg))
	if err != nil {
		return "", nil, fmt.Errorf("read the connected account's address: %w", err)
	}
	defer resp.Body.Close()
	var info struct {
		Email string `json:"email"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&info) != nil {
		return "", nil, fmt.Errorf("read the connected account's address: Google answered %s", resp.Status)
	}
	if err := accts.Save(ctx, Provider, info.Email, granted, tok); err != nil {
		return "", nil, err
	}
	return info.Email, granted, nil
}

// ScopesFor returns the scopes the connector methods that scripts call
// need (each method's first scope, and its reconcile's), plus openid and
// email, which name the account and reach no data; nil when the scripts
// call no Google method. uses are what the scripts use as the analysis
// reads them (engine.UsesOf: "gmail.send", "source:gmail").
func ScopesFor(reg *connector.Registry, uses []string) []string {
	set := map[string]bool{}
	for _, u := range uses {
		tool, method, ok := strings.Cut(u, ".")
		if !ok {
			continue
		}
		meth, err := reg.Method(tool, method)
		if err != nil || len(meth.Scopes) == 0 {
			continue
		}
		set[meth.Scopes[0]] = true
		if len(meth.ReconcileScopes) > 0 {
			set[meth.ReconcileScopes[0]] = true
		}
	}
	if len(set) == 0 {
		return nil
	}
	for narrow, broader := range subsumed {
		for _, b := range broader {
			if set[b] {
				delete(set, narrow)
			}
		}
	}
	var out []string
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return append([]string{"openid", "email"}, out...)
}

// subsumed are scopes keep asks for only when no broader one is asked:
// a token that carries gmail.metadata may neither search nor read a body,
// whatever else it carries, and calendar.events.owned.readonly adds
// nothing to calendar.events.owned.
var subsumed = map[string][]string{
	Scope("gmail.metadata"):                 {Scope("gmail.readonly"), Scope("gmail.modify"), "https://mail.google.com/"},
	Scope("calendar.events.owned.readonly"): {Scope("calendar.events.owned"), Scope("calendar.events"), Scope("calendar")},
	Scope("calendar.events.readonly"):       {Scope("calendar.events"), Scope("calendar")},
}

// NoScopesError is what keep says when no deployed workflow uses Google.
const NoScopesError = "no deployed workflow calls gmail, sheets or calendar, so keep would ask Google for nothing: deploy one first, or name its script: keep connect google workflow.js"
