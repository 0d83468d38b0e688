package slackconn

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/slack-go/slack"
	"golang.org/x/oauth2"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
)

// Config is [connectors.slack].
type Config struct {
	Endpoint string `toml:"endpoint" doc:"The base URL of a Slack stand-in (what keep-fake slack prints); unset: Slack. The bot's token is not written here: keep connect slack --token stores it encrypted."`
}

// Declaration is the slack connector's declaration.
var Declaration = connector.Declaration{
	Name: Provider,
	Doc:  "A Slack workspace, as the bot whose token `keep connect slack --token` stored.",
	Config: config.Section{Name: Provider, Doc: "where Slack is.", New: func() any { return &Config{} }, Check: func(v any, _ *config.Config) error {
		c := v.(*Config)
		if c.Endpoint != "" && config.HTTPURL(c.Endpoint) != nil {
			return config.KeyErrorf("endpoint", "must be an http(s) URL like \"http://127.0.0.1:8086\" (what keep-fake slack prints), got %q", c.Endpoint)
		}
		c.Endpoint = strings.TrimRight(c.Endpoint, "/")
		return nil
	}},
	Build: func(table any, h *connector.Host) ([]*connector.Connector, error) {
		return []*connector.Connector{New(Bot(table, h))}, nil
	},
	Connect: &connector.Connect{Usage: "--token xoxb-…", Doc: "checks the bot's token with auth.test and stores it encrypted (the token: --token, or KEEP_SLACK_TOKEN).", Run: connect},
}

// Bot is the workspace's bot for the table and accounts of h; nil without
// accounts (every call says to connect one).
func Bot(table any, h *connector.Host) *Slack {
	if h.Accounts == nil {
		return nil
	}
	return &Slack{Endpoint: table.(*Config).Endpoint, Accounts: h.Accounts}
}

// connect checks a bot token with auth.test and stores it sealed.
func connect(ctx context.Context, c connector.ConnectCall) error {
	if !strings.HasPrefix(c.Token, "xox") {
		return errors.New("keep connect slack needs the bot's token: --token xoxb-… (or KEEP_SLACK_TOKEN), from your Slack app's OAuth & Permissions page")
	}
	opts := []slack.Option{}
	if ep := c.Table.(*Config).Endpoint; ep != "" {
		opts = append(opts, slack.OptionAPIURL(ep+"/api/"))
	}
	who, err := slack.New(c.Token, opts...).AuthTestContext(ctx)
	if err != nil {
		return fmt.Errorf("Slack refused the token (%v); nothing was stored", err)
	}
	accts, err := c.Accounts()
	if err != nil {
		return err
	}
	account := who.User + "@" + who.Team
	if err := accts.Save(ctx, Provider, account, nil, &oauth2.Token{AccessToken: c.Token}); err != nil {
		return err
	}
	fmt.Fprintf(c.Out, "connected slack as %s (bot %s); the token is stored encrypted\n", account, who.UserID)
	return nil
}
