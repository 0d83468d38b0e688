package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/oauth2"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector/google"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
)

// configOr is the config file a command reads: the one given, else
// keep.toml in the current folder when there is one.
func configOr(path string) string {
	if path != "" {
		return path
	}
	if _, err := os.Stat("keep.toml"); err == nil {
		return "keep.toml"
	}
	return ""
}

const configHelp = "TOML config file: [policy], [connectors.google] (default: ./keep.toml when there is one)"

func (a *app) connectCmd() *cobra.Command {
	var configFile string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "connect google [SCRIPT...]",
		Short: "connect a Google account: keep asks for the scopes the deployed workflows (and SCRIPTs) use, and keeps the tokens encrypted",
		Long: "connect runs Google's OAuth 2.0 flow for installed apps (a loopback redirect with PKCE): it prints a URL to open\n" +
			"in a browser, waits for the answer on 127.0.0.1, and stores the tokens encrypted in the store (the key is\n" +
			"secret.key in the data directory, or KEEP_SECRET_KEY). It asks only for the scopes that the methods of the\n" +
			"deployed workflows, and of the SCRIPTs named, need. The OAuth client comes from [connectors.google] client_id\n" +
			"and client_secret in keep.toml or KEEP_GOOGLE_CLIENT_ID / KEEP_GOOGLE_CLIENT_SECRET; against keep-fake google\n" +
			"(endpoint = \"http://…\") none is needed.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != google.Provider {
				return fmt.Errorf("keep connect knows google only (got %q)", args[0])
			}
			cfg, err := config.Load(configOr(configFile))
			if err != nil {
				return err
			}
			if cfg.Google.Endpoint == "" && cfg.Google.ClientID == "" {
				return fmt.Errorf("no Google OAuth client: set [connectors.google] client_id and client_secret in keep.toml (a \"Desktop app\" client of your Google Cloud project), or KEEP_GOOGLE_CLIENT_ID and KEEP_GOOGLE_CLIENT_SECRET; to try keep without Google, run keep-fake google and set [connectors.google] endpoint")
			}
			st, err := a.openOrCreateStore()
			if err != nil {
				return err
			}
			defer st.Close()
			scopes, err := scopesNeeded(cmd.Context(), st, args[1:])
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return a.connectGoogle(ctx, st, cfg.Google, scopes)
		},
	}
	c.Flags().StringVar(&configFile, "config", "", configHelp)
	c.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the browser's answer")
	return c
}

// openOrCreateStore opens the store, creating the embedded one if this is
// the first command run (a person may connect before deploying).
func (a *app) openOrCreateStore() (store.Store, error) {
	return daemon.OpenStore(a.dataDir, a.storeURL)
}

var toolCallRe = regexp.MustCompile(`ctx\s*\.\s*([A-Za-z_]\w*)\s*\.\s*([A-Za-z_]\w*)\s*\(`)

// scopesNeeded reads which connector methods the deployed workflows' latest
// versions and the named scripts call, and returns the OAuth scope each
// needs (the first of its Scopes, and of its ReconcileScopes), plus openid and email, which name the
// account and reach no data.
func scopesNeeded(ctx context.Context, st store.Store, files []string) ([]string, error) {
	var sources []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		sources = append(sources, string(b))
	}
	err := st.View(ctx, func(tx store.Tx) error {
		ws, err := tx.WorkflowList()
		if err != nil {
			return err
		}
		for _, w := range ws {
			vs, err := tx.VersionList(w.Name)
			if err != nil {
				return err
			}
			if len(vs) > 0 {
				sources = append(sources, vs[len(vs)-1].Script)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	reg := daemon.Registry(".")
	set := map[string]bool{}
	for _, src := range sources {
		for _, m := range toolCallRe.FindAllStringSubmatch(src, -1) {
			meth, err := reg.Method(m[1], m[2])
			if err != nil || len(meth.Scopes) == 0 {
				continue
			}
			set[meth.Scopes[0]] = true
			if len(meth.ReconcileScopes) > 0 {
				set[meth.ReconcileScopes[0]] = true
			}
		}
	}
	if len(set) == 0 {
		return nil, fmt.Errorf("no deployed workflow calls gmail, sheets or calendar, so keep would ask Google for nothing: deploy one first, or name its script: keep connect google workflow.js")
	}
	out := []string{"openid", "email"}
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out[2:])
	return out, nil
}

func (a *app) connectGoogle(ctx context.Context, st store.Store, g config.Google, scopes []string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen on 127.0.0.1 for Google's answer: %w", err)
	}
	redirect := "http://" + ln.Addr().String() + "/callback"
	conf := google.OAuthConfig(g, redirect, scopes)
	verifier := oauth2.GenerateVerifier()
	state := randomHex(16)
	authURL := conf.AuthCodeURL(state, oauth2.AccessTypeOffline, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("prompt", "consent"))

	type answer struct {
		code string
		err  error
	}
	got := make(chan answer, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		var ans answer
		switch {
		case q.Get("state") != state:
			ans.err = errors.New("the answer's state does not match this request (an old browser tab?); run keep connect google again")
		case q.Get("error") != "":
			ans.err = fmt.Errorf("Google answered %s: %s", q.Get("error"), q.Get("error_description"))
		case q.Get("code") == "":
			ans.err = errors.New("Google's answer carried no code")
		default:
			ans.code = q.Get("code")
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if ans.err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, "<!doctype html><title>keep</title><p>keep was not connected: %s</p>", html.EscapeString(ans.err.Error()))
		} else {
			fmt.Fprint(w, "<!doctype html><title>keep</title><p>keep is connected to your Google account. You can close this tab.</p>")
		}
		select {
		case got <- ans:
		default:
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()

	fmt.Fprintln(a.out, "Open this URL in a browser and allow keep to act as your Google account:")
	fmt.Fprintln(a.out, authURL)
	fmt.Fprintf(a.out, "keep asks for: %s\nWaiting for the answer on %s …\n", strings.Join(scopes, " "), redirect)
	var ans answer
	select {
	case ans = <-got:
	case <-ctx.Done():
		return fmt.Errorf("no answer from the browser within the time (--timeout); nothing was stored")
	}
	if ans.err != nil {
		return ans.err
	}
	tok, err := conf.Exchange(ctx, ans.code, oauth2.VerifierOption(verifier))
	if err != nil {
		return fmt.Errorf("exchange the code for tokens: %w", err)
	}
	if tok.RefreshToken == "" {
		return fmt.Errorf("Google gave no refresh token, so keep could not act once the access token expires; remove keep's access at https://myaccount.google.com/permissions and connect again")
	}
	granted := scopes
	if s, ok := tok.Extra("scope").(string); ok && s != "" {
		granted = strings.Fields(s)
	}
	email, err := userEmail(ctx, conf, tok, google.UserinfoURL(g))
	if err != nil {
		return err
	}
	accts, err := daemon.Accounts(a.dataDir, st)
	if err != nil {
		return err
	}
	if err := accts.Save(ctx, google.Provider, email, granted, tok); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "connected google as %s (scopes: %s); the tokens are stored encrypted\n", email, strings.Join(shortScopes(granted), ", "))
	return nil
}

func userEmail(ctx context.Context, conf *oauth2.Config, tok *oauth2.Token, url string) (string, error) {
	resp, err := conf.Client(ctx, tok).Get(url)
	if err != nil {
		return "", fmt.Errorf("read the connected account's address: %w", err)
	}
	defer resp.Body.Close()
	var info struct {
		Email string `json:"email"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&info) != nil {
		return "", fmt.Errorf("read the connected account's address: %s answered %s", url, resp.Status)
	}
	return info.Email, nil
}

func shortScopes(scopes []string) []string {
	out := make([]string, len(scopes))
	for i, s := range scopes {
		out[i] = strings.TrimPrefix(s, "https://www.googleapis.com/auth/")
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (a *app) connectionsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "connections",
		Short: "list the connected accounts and their scopes (never their tokens)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(func(st store.Store) error {
				cs, err := report.Connections(cmd.Context(), st)
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(cs)
				}
				if len(cs) == 0 {
					fmt.Fprintln(a.out, "no accounts connected (keep connect google)")
					return nil
				}
				w := a.table()
				fmt.Fprintln(w, "PROVIDER\tACCOUNT\tSTATE\tSCOPES\tCONNECTED")
				for _, c := range cs {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", c.Provider, c.Account, c.State, strings.Join(c.Scopes, " "), c.Connected)
				}
				return w.Flush()
			})
		},
	}
	a.addJSON(c)
	return c
}
