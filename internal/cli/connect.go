package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/inproc"
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
	var names []string
	long := "connect stores an account's credentials encrypted in the store (the key is secret.key in the data directory, or KEEP_SECRET_KEY)."
	for _, c := range inproc.Connectable() {
		names = append(names, c.Name)
		long += "\n\nkeep connect " + c.Name + " " + c.Usage + ": " + c.Doc
	}
	c := &cobra.Command{
		Use:   "connect " + strings.Join(names, "|") + " …",
		Short: "connect an account (google: keep asks for the scopes the deployed workflows and SCRIPTs use; slack: a bot token), stored encrypted",
		Long:  long,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := inproc.ConnectName(args[0])
			if err != nil {
				return err
			}
			cfg, err := config.Load(a.config())
			if err != nil {
				return err
			}
			if token == "" {
				token = os.Getenv("KEEP_" + strings.ToUpper(name) + "_TOKEN")
			}
			// The store is opened (made, before any deploy) only when the
			// connector asks for it.
			direct := a.direct(true)
			defer direct.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return direct.Connect(ctx, cmd.Context(), cfg, inproc.ConnectRequest{Name: name, Args: args[1:], Token: token, Out: a.out})
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the browser's answer")
	c.Flags().StringVar(&token, "token", "", "slack: the bot token (xoxb-…; default $KEEP_SLACK_TOKEN); stored encrypted, never printed")
	return c
}

// direct is the data directory's store for the commands that need it by
// nature (inproc.Direct: keep connect, keep secret set and rm, keep plan
// --revise); create makes it when there is none yet.
func (a *app) direct(create bool) *inproc.Direct {
	return &inproc.Direct{DataDir: a.dataDir, Store: a.storeURL, Create: create}
}

func (a *app) connectionsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "connections",
		Short: "list the connected accounts and their scopes (never their tokens)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.read(cmd.Context(), func(k *keepAPI) error {
				cs, err := k.Connections(cmd.Context())
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
