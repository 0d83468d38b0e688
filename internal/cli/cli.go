// Package cli is keep's command line: a typed client of keep's API
// (package apiclient) for every read and every person's action — the API
// of the keep serve running on the data directory, or the same API served
// in this process (inproc.API) — so they work with or without a
// running `keep serve`. `serve` and `run` own the engine (daemon); the few
// commands that need the store by nature reach it through inproc
// (inproc.Direct, inproc.Migrate).
package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/keep-run/keep/internal/daemon"
	"github.com/spf13/cobra"
)

// Exit codes.
const (
	ExitOK        = 0
	ExitError     = 1
	ExitInvalid   = 2 // validation errors
	ExitBlocked   = 3 // keep run: a run needs a person
	exitUsageCode = 64
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

type app struct {
	out, errOut io.Writer
	dataDir     string
	storeURL    string // --store; empty: keep.db in the data directory
	configFile  string // --config; empty: ./keep.toml when there is one
	by          string // --by: who takes the decisions, for the decision log
	jsonOut     bool
}

// Run executes the CLI with args and returns the process exit code.
// Everything it prints goes through safeText (in RunWithInput): no
// control character from stored data reaches the terminal.
func Run(args []string, stdout, stderr io.Writer) int {
	return RunWithInput(args, os.Stdin, stdout, stderr)
}

// RunWithInput is Run reading standard input from stdin (keep secret set).
func RunWithInput(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	out, errOut := newSafeText(stdout), newSafeText(stderr)
	defer out.Flush()
	defer errOut.Flush()
	stdout, stderr = out, errOut
	a := &app{out: stdout, errOut: stderr}
	root := a.root()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(stderr, "keep:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "keep:", err)
	if strings.Contains(err.Error(), "unknown command") || strings.Contains(err.Error(), "unknown flag") || strings.Contains(err.Error(), "accepts") || strings.Contains(err.Error(), "required flag") {
		return exitUsageCode
	}
	return ExitError
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:           "keep",
		Short:         "keep runs automations durably: no side effect twice by accident, nothing lost, every blocked run explained",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&a.dataDir, "data", envOr("KEEP_DATA", "keep-data"), "data directory (database, files root of keep serve)")
	root.PersistentFlags().StringVar(&a.configFile, "config", os.Getenv("KEEP_CONFIG"), configHelp)
	root.PersistentFlags().StringVar(&a.storeURL, "store", os.Getenv("KEEP_STORE"), "the store's URL: sqlite:///path/to/keep.db (default: keep.db in the data directory)")
	root.PersistentFlags().StringVar(&a.by, "by", envOr("KEEP_BY", "cli"), "who takes the decisions of this command, for the decision log")
	root.PersistentPreRun = func(cmd *cobra.Command, _ []string) {
		cmd.SetContext(daemon.WithActor(cmd.Context(), a.by))
	}
	root.AddCommand(a.serveCmd(), a.secretCmd(), a.grantCmd(), a.repairsCmd(), a.planCmd(), a.connectCmd(), a.connectionsCmd(), a.migrateCmd(), a.connectorsCmd(), a.typesCmd(), a.eventsCmd(), a.graphCmd(), a.activityCmd(), a.resetStateCmd(), a.skipPendingCmd(), a.publishCmd(), a.webhooksCmd(), a.runCmd(), a.testCmd(), a.validateCmd(), a.deployCmd(), a.statusCmd(), a.inputsCmd(), a.outputsCmd(), a.runsCmd(),
		a.showCmd(), a.resolveCmd(), a.approveCmd(), a.itemsCmd(), a.itemActionCmd("skip"), a.itemActionCmd("reprocess"), a.benchCmd(), a.workflowActionCmd("pause"), a.workflowActionCmd("resume"), a.workflowActionCmd("run-now"), a.pruneCmd())
	return root
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func (a *app) addJSON(c *cobra.Command) {
	c.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func readScript(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read script: %w", err)
	}
	return string(b), nil
}
