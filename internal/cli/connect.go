package cli

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"github.com/spf13/cobra"
	"golang.org/x/oauth2"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector/google"
	"github.com/keep-run/keep/internal/connector/slackconn"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
)

// config is the config file a command reads: --config, else keep.toml in
// the current folder when there is one, else the one recorded in the data
// directory (daemon.ConfigFile) by the last keep deploy, run or serve.
func (a *app) config() string {
	if a.configFile != "" {
		return a.configFile
	}
	if _, err := os.Stat("keep.toml"); err == nil {
		return "keep.toml"
	}
	return daemon.RecordedConfig(a.dataDir)
}

// runConfig is the config of the commands that deploy or run workflows
// (keep deploy, run, serve): the one they are given (--config, ./keep.toml)
// becomes the data directory's, recorded there, so that the decisions the
// CLI carries out later run under it from any folder (decisionConfig).
func (a *app) runConfig() (string, error) {
	path := a.config()
	if path == daemon.RecordedConfig(a.dataDir) {
		return path, nil
	}
	return path, daemon.RecordConfig(a.dataDir, path)
}

// decisionConfig is the config a decision the CLI carries out itself runs
// under: the workflow's own, recorded in the data directory, never the
// keep.toml of the folder the command was typed in (issue 24 #5); none
// recorded: the workflows ran under the built-in defaults.
func (a *app) decisionConfig() string { return daemon.RecordedConfig(a.dataDir) }

const configHelp = "TOML config file: [policy], [connectors.google] (default: ./keep.toml when there is one, else the data directory's keep.toml, recorded by the last deploy, run or serve given one; decisions carried out by resolve, retry, run-now… always run under the recorded one)"

func (a *app) connectCmd() *cobra.Command {
	var timeout time.Duration
	var token string
	c := &cobra.Command{
		Use:   "connect google [SCRIPT...] | connect slack --token xoxb-…",
		Short: "connect a Google account: keep asks for the scopes the deployed workflows (and SCRIPTs) use, and keeps the tokens encrypted",
		Long: "connect runs Google's OAuth 2.0 flow for installed apps (a loopback redirect with PKCE): it prints a URL to open\n" +
			"in a browser, waits for the answer on 127.0.0.1, and stores the tokens encrypted in the store (the key is\n" +
			"secret.key in the data directory, or KEEP_SECRET_KEY). It asks only for the scopes that the methods of the\n" +
			"deployed workflows, and of the SCRIPTs named, need. The OAuth client comes from [connectors.google] client_id\n" +
			"and client_secret in keep.toml or KEEP_GOOGLE_CLIENT_ID / KEEP_GOOGLE_CLIENT_SECRET; against keep-fake google\n" +
			"(endpoint = \"http://…\") none is needed.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(a.config())
			if err != nil {
				return err
			}
			if args[0] == slackconn.Provider {
				if token == "" {
					token = os.Getenv("KEEP_SLACK_TOKEN")
				}
				return a.connectSlack(cmd.Context(), cfg.SlackEndpoint, token)
			}
			if args[0] != google.Provider {
				return fmt.Errorf("keep connect knows google and slack (got %q)", args[0])
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
	c.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the browser's answer")
	c.Flags().StringVar(&token, "token", "", "slack: the bot token (xoxb-…; default $KEEP_SLACK_TOKEN); stored encrypted, never printed")
	return c
}

// openOrCreateStore opens the store, creating the embedded one if this is
// the first command run (a person may connect before deploying).
func (a *app) openOrCreateStore() (store.Store, error) {
	return daemon.OpenStore(a.dataDir, a.storeURL)
}

// scopesNeeded returns the scopes the deployed workflows and the named
// scripts need (google.ScopesFor).
func scopesNeeded(ctx context.Context, st store.Store, files []string) ([]string, error) {
	sources, err := report.LatestScripts(ctx, st)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		sources = append(sources, string(b))
	}
	scopes := google.ScopesFor(daemon.Registry("."), engine.UsesOf(sources))
	if scopes == nil {
		return nil, errors.New(google.NoScopesError)
	}
	return scopes, nil
}

func (a *app) connectGoogle(ctx context.Context, st store.Store, g config.Google, scopes []string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen on 127.0.0.1 for Google's answer: %w", err)
	}
	redirect := "http://" + ln.Addr().String() + "/callback"
	flow := google.StartFlow(g, redirect, scopes)
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
		case q.Get("state") != flow.State:
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
	fmt.Fprintln(a.out, flow.URL())
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
	accts, err := daemon.Accounts(a.dataDir, st)
	if err != nil {
		return err
	}
	email, granted, err := flow.Finish(ctx, accts, ans.code)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "connected google as %s (scopes: %s); the tokens are stored encrypted\n", email, strings.Join(shortScopes(granted), ", "))
	return nil
}

func shortScopes(scopes []string) []string {
	out := make([]string, len(scopes))
	for i, s := range scopes {
		out[i] = strings.TrimPrefix(s, "https://www.googleapis.com/auth/")
	}
	return out
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

// connectSlack checks a bot token with auth.test and stores it sealed.
func (a *app) connectSlack(ctx context.Context, endpoint, token string) error {
	if !strings.HasPrefix(token, "xox") {
		return errors.New("keep connect slack needs the bot's token: --token xoxb-… (or KEEP_SLACK_TOKEN), from your Slack app's OAuth & Permissions page")
	}
	opts := []slack.Option{}
	if endpoint != "" {
		opts = append(opts, slack.OptionAPIURL(endpoint+"/api/"))
	}
	who, err := slack.New(token, opts...).AuthTestContext(ctx)
	if err != nil {
		return fmt.Errorf("Slack refused the token (%v); nothing was stored", err)
	}
	st, err := a.openOrCreateStore()
	if err != nil {
		return err
	}
	defer st.Close()
	accts, err := daemon.Accounts(a.dataDir, st)
	if err != nil {
		return err
	}
	account := who.User + "@" + who.Team
	if err := accts.Save(ctx, slackconn.Provider, account, nil, &oauth2.Token{AccessToken: token}); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "connected slack as %s (bot %s); the token is stored encrypted\n", account, who.UserID)
	return nil
}
