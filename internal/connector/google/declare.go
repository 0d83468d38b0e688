package google

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

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
)

// Config is [connectors.google]: the OAuth client keep connects Google
// accounts with, and where Google is (keep-fake google, for trying keep
// and for tests).
type Config struct {
	ClientID     string `toml:"client_id" doc:"The OAuth client's id (a \"Desktop app\" client of your Google Cloud project). KEEP_GOOGLE_CLIENT_ID overrides it."`
	ClientSecret string `toml:"client_secret" secret:"true" doc:"The OAuth client's secret. KEEP_GOOGLE_CLIENT_SECRET overrides it."`
	Endpoint     string `toml:"endpoint" doc:"The base URL of a Google stand-in serving OAuth and the APIs under one root (what keep-fake google prints); unset: Google itself."`
}

// Declaration is the google connectors' declaration: gmail, sheets and
// calendar over one connected account.
var Declaration = connector.Declaration{
	Name: Provider,
	Doc:  "Gmail, Sheets and Calendar as the Google account `keep connect google` connected.",
	Config: config.Section{Name: Provider, Doc: "the OAuth client keep connects Google accounts with, and where Google is.",
		New: func() any { return &Config{} }, Check: checkConfig},
	Build: func(table any, h *connector.Host) ([]*connector.Connector, error) {
		if h.Accounts == nil {
			return New(nil), nil
		}
		return New(NewAuth(*table.(*Config), h.Accounts)), nil
	},
	Connect: &Connect,
}

func checkConfig(v any, _ *config.Config) error {
	c := v.(*Config)
	if c.Endpoint != "" {
		if config.HTTPURL(c.Endpoint) != nil {
			return config.KeyErrorf("endpoint", "must be an http(s) URL like \"http://127.0.0.1:8080\" (what keep-fake google prints), got %q", c.Endpoint)
		}
		c.Endpoint = strings.TrimRight(c.Endpoint, "/")
	}
	if id := os.Getenv("KEEP_GOOGLE_CLIENT_ID"); id != "" {
		c.ClientID = id
	}
	if sec := os.Getenv("KEEP_GOOGLE_CLIENT_SECRET"); sec != "" {
		c.ClientSecret = sec
	}
	return nil
}

// Connect is `keep connect google [SCRIPT...]`: Google's OAuth 2.0 flow for
// installed apps (a loopback redirect with PKCE), asking only for the
// scopes the deployed workflows and the named scripts need.
var Connect = connector.Connect{
	Usage: "[SCRIPT...]",
	Doc: "runs Google's OAuth flow: it prints a URL to open in a browser, waits for the answer on 127.0.0.1, and stores the tokens encrypted; " +
		"it asks only for the scopes the deployed workflows (and the SCRIPTs named) use. The OAuth client is [connectors.google] client_id and client_secret " +
		"(or KEEP_GOOGLE_CLIENT_ID / KEEP_GOOGLE_CLIENT_SECRET); against keep-fake google (endpoint = \"http://…\") none is needed.",
	Run: connect,
}

func connect(ctx context.Context, c connector.ConnectCall) error {
	cfg := *c.Table.(*Config)
	if cfg.Endpoint == "" && cfg.ClientID == "" {
		return fmt.Errorf("no Google OAuth client: set [connectors.google] client_id and client_secret in keep.toml (a \"Desktop app\" client of your Google Cloud project), or KEEP_GOOGLE_CLIENT_ID and KEEP_GOOGLE_CLIENT_SECRET; to try keep without Google, run keep-fake google and set [connectors.google] endpoint")
	}
	uses, err := c.Uses(c.Args)
	if err != nil {
		return err
	}
	scopes := ScopesFor(connector.NewRegistry(New(nil)...), uses)
	if scopes == nil {
		return errors.New(NoScopesError)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen on 127.0.0.1 for Google's answer: %w", err)
	}
	redirect := "http://" + ln.Addr().String() + "/callback"
	flow := StartFlow(cfg, redirect, scopes)
	got := make(chan answer, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: flow.callback(got)}
	go srv.Serve(ln)
	defer srv.Close()
	fmt.Fprintln(c.Out, "Open this URL in a browser and allow keep to act as your Google account:")
	fmt.Fprintln(c.Out, flow.URL())
	fmt.Fprintf(c.Out, "keep asks for: %s\nWaiting for the answer on %s …\n", strings.Join(scopes, " "), redirect)
	var ans answer
	select {
	case ans = <-got:
	case <-ctx.Done():
		return fmt.Errorf("no answer from the browser within the time (--timeout); nothing was stored")
	}
	if ans.err != nil {
		return ans.err
	}
	accts, err := c.Accounts()
	if err != nil {
		return err
	}
	email, granted, err := flow.Finish(ctx, accts, ans.code)
	if err != nil {
		return err
	}
	short := make([]string, len(granted))
	for i, s := range granted {
		short[i] = strings.TrimPrefix(s, "https://www.googleapis.com/auth/")
	}
	fmt.Fprintf(c.Out, "connected google as %s (scopes: %s); the tokens are stored encrypted\n", email, strings.Join(short, ", "))
	return nil
}

type answer struct {
	code string
	err  error
}

// callback answers the browser's redirect and hands its code on.
func (f *Flow) callback(got chan<- answer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		var ans answer
		switch {
		case q.Get("state") != f.State:
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
	})
}
