// Package cli is keep's command line. Reads and people's actions go straight
// to the store of the data directory, so they work with or without a
// running `keep serve`; `serve` and `run` own the engine.
package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/bench"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/backend"
	"github.com/keep-run/keep/internal/store/sqlite"
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
	by          string // --by: who takes the decisions, for the decision log
	jsonOut     bool
}

// Run executes the CLI with args and returns the process exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	a := &app{out: stdout, errOut: stderr}
	root := a.root()
	root.SetArgs(args)
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
	root.PersistentFlags().StringVar(&a.storeURL, "store", os.Getenv("KEEP_STORE"), "the store's URL: sqlite:///path/to/keep.db (default: keep.db in the data directory)")
	root.PersistentFlags().StringVar(&a.by, "by", envOr("KEEP_BY", "cli"), "who takes the decisions of this command, for the decision log")
	root.PersistentPreRun = func(cmd *cobra.Command, _ []string) {
		cmd.SetContext(engine.WithActor(cmd.Context(), a.by))
	}
	root.AddCommand(a.serveCmd(), a.runCmd(), a.validateCmd(), a.deployCmd(), a.statusCmd(), a.inputsCmd(), a.outputsCmd(), a.runsCmd(),
		a.showCmd(), a.resolveCmd(), a.approveCmd(), a.itemsCmd(), a.itemActionCmd("skip"), a.itemActionCmd("reprocess"), a.benchCmd(), a.workflowActionCmd("pause"), a.workflowActionCmd("resume"), a.workflowActionCmd("run-now"))
	return root
}

// stopWorkersOnSignal stops every sandbox worker when Ctrl-C or SIGTERM
// arrives: a handler spinning in a native loop must not hold a shutdown for
// its whole time limit (its run is recovered at the next start). Call the
// function it returns when the command ends.
func stopWorkersOnSignal() (done func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	quit := make(chan struct{})
	go func() {
		select {
		case <-sig:
			script.StopWorkers()
		case <-quit:
		}
	}()
	return func() {
		signal.Stop(sig)
		close(quit)
	}
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

// openStore opens the data directory's store for reads and actions; a
// missing database is an error rather than a new empty one.
func (a *app) openStore() (*sqlite.Store, error) {
	loc, err := backend.Parse(a.storeURL, a.dataDir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(loc.Path); loc.Kind == backend.SQLite && err != nil {
		return nil, fmt.Errorf("no keep data in %s (nothing deployed yet; run `keep deploy FILE` or `keep run FILE`, or pass --data)", loc.Path)
	}
	return loc.Open()
}

// storeLocation is the store --store names; a bad URL was already refused
// by openStore.
func (a *app) storeLocation() backend.Location {
	l, err := backend.Parse(a.storeURL, a.dataDir)
	if err != nil {
		return backend.Default(a.dataDir)
	}
	return l
}

func (a *app) withStore(fn func(st store.Store) error) error {
	st, err := a.openStore()
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(st)
}

// withReadStore is withStore for commands that only read: on a read-only
// data directory they still work.
func (a *app) withReadStore(fn func(st store.Store) error) error {
	st, err := a.openStore()
	if errors.Is(err, sqlite.ErrReadOnly) {
		st, err = a.storeLocation().OpenReadOnly()
	}
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(st)
}

func readScript(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read script: %w", err)
	}
	return string(b), nil
}

// ---------- serve ----------

func (a *app) serveCmd() *cobra.Command {
	var configFile, filesRoot, addr, token string
	c := &cobra.Command{
		Use:   "serve",
		Short: "run every deployed workflow on its schedule, with the web page and API, until stopped",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if token == "" {
				token = os.Getenv("KEEP_TOKEN")
			}
			if addr != "" && !api.IsLoopback(addr) && token == "" {
				return &exitError{code: exitUsageCode, err: fmt.Errorf("--addr %s accepts connections from other machines: set a token with --token or KEEP_TOKEN", addr)}
			}
			k, err := daemon.Open(daemon.Options{DataDir: a.dataDir, Store: a.storeURL, ConfigFile: configFile, FilesRoot: filesRoot})
			if err != nil {
				return err
			}
			defer k.Close()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stopWorkersOnSignal()()
			defer stop()
			n, err := k.Recover(ctx)
			if err != nil {
				return err
			}
			where := "no web page (--addr \"\")"
			if addr != "" {
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					return fmt.Errorf("listen on %s: %w (another keep serve, or pass --addr)", addr, err)
				}
				srv := &http.Server{Handler: k.HTTPHandler(token), ReadHeaderTimeout: 10 * time.Second}
				go srv.Serve(ln)
				defer srv.Close()
				if err := k.WriteAddr(ln.Addr().String()); err != nil {
					return fmt.Errorf("record the address of this keep serve: %w", err)
				}
				defer os.Remove(daemon.AddrFile(a.dataDir))
				where = "http://" + ln.Addr().String()
			}
			fmt.Fprintf(a.out, "keep serving %s at %s (recovered %d interrupted runs); Ctrl-C stops\n", a.dataDir, where, n)
			return k.Scheduler.Run(ctx)
		},
	}
	c.Flags().StringVar(&configFile, "config", "", "TOML config file with a [policy] section")
	c.Flags().StringVar(&filesRoot, "files-root", "", "folder of the files connector (default DATA/files)")
	c.Flags().StringVar(&addr, "addr", "127.0.0.1:8347", "address of the web page and API (\"\" for none); beyond loopback it needs a token")
	c.Flags().StringVar(&token, "token", "", "token required by the API and the page (default $KEEP_TOKEN)")
	return c
}

// ---------- validate / deploy ----------

func (a *app) validateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "validate FILE",
		Short: "check a workflow script without deploying it (exit 2 on errors)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := readScript(args[0])
			if err != nil {
				return err
			}
			p, err := script.Compile(args[0], src)
			if err != nil {
				return &exitError{code: ExitInvalid, err: err}
			}
			reg := daemon.Registry(".")
			problems := script.ValidateAll(p, reg.Tools(), reg.SourceTypes())
			if a.jsonOut {
				type pj struct {
					Severity string `json:"severity"`
					Handler  string `json:"handler,omitempty"`
					Topic    string `json:"topic,omitempty"`
					Line     int    `json:"line,omitempty"`
					Message  string `json:"message"`
				}
				out := []pj{}
				for _, pr := range problems {
					out = append(out, pj{pr.Severity, pr.Handler, pr.Topic, pr.Line, pr.Message})
				}
				_ = a.printJSON(map[string]any{"file": args[0], "workflow": p.Decl.WorkflowName(), "valid": !script.HasErrors(problems), "problems": out})
			} else {
				for _, pr := range problems {
					fmt.Fprintf(a.out, "%s:%s\n", args[0], strings.TrimPrefix(pr.String(), ""))
				}
			}
			if script.HasErrors(problems) {
				return &exitError{code: ExitInvalid, err: fmt.Errorf("%s is not valid", args[0])}
			}
			if !a.jsonOut {
				fmt.Fprintf(a.out, "%s: workflow %q is valid\n", args[0], p.Decl.WorkflowName())
			}
			return nil
		},
	}
	a.addJSON(c)
	return c
}

func deployKind(minor, major bool) (engine.DeployKind, error) {
	switch {
	case minor && major:
		return "", fmt.Errorf("choose --minor or --major, not both")
	case major:
		return engine.DeployMajor, nil
	case minor:
		return engine.DeployMinor, nil
	}
	return "", nil
}

// askReprocess asks what a major version does with done items, on a
// terminal; elsewhere the choice must be given (--reprocess).
func (a *app) askReprocess() (string, error) {
	fi, err := os.Stdin.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return "", engine.ErrReprocessChoice
	}
	fmt.Fprint(a.out, "Your intent changed (a major version). What happens to the items already done?\n  none  keep progress: done items stay done\n  all   start fresh: every item gets a new attempt\n  KEY,KEY  new attempts for these items only\nchoice: ")
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	choice := strings.TrimSpace(line)
	if choice == "" {
		return "", engine.ErrReprocessChoice
	}
	return choice, nil
}

func (a *app) deployCmd() *cobra.Command {
	var name, reprocess, filesRoot string
	var minor, major, acceptOrphans bool
	c := &cobra.Command{
		Use:   "deploy FILE",
		Short: "validate a script and make it the workflow's active version (works beside a running keep serve)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := deployKind(minor, major)
			if err != nil {
				return err
			}
			if reprocess != "" && !major {
				return &exitError{code: exitUsageCode, err: errors.New("--reprocess goes with --major: a minor version keeps all progress")}
			}
			src, err := readScript(args[0])
			if err != nil {
				return err
			}
			if err := os.MkdirAll(a.dataDir, 0o755); err != nil {
				return err
			}
			st, err := daemon.OpenStore(a.dataDir, a.storeURL)
			if err != nil {
				return err
			}
			defer st.Close()
			if major && reprocess == "" {
				if reprocess, err = a.askReprocess(); err != nil {
					return err
				}
			}
			// Beside a running keep serve the deploy goes through its API: one
			// engine decides, and open pages update at once.
			req := api.DeployRequest{Script: src, File: args[0], Name: name, Kind: string(kind), Reprocess: reprocess, AcceptOrphans: acceptOrphans}
			if reply, apiErr, handled, err := a.callAPI("POST", "/api/v1/workflows", req); handled {
				return a.deployReply(args[0], reply, apiErr, err)
			}
			eng := engine.New(engine.Options{Store: st, Registry: daemon.Registry(filesRoot)})
			res, err := eng.DeployWith(cmd.Context(), args[0], src, engine.DeployOptions{Name: name, Kind: kind, Reprocess: reprocess, AcceptOrphans: acceptOrphans})
			if err != nil {
				return a.deployError(args[0], err)
			}
			a.printWarnings(args[0], res.Problems)
			for _, w := range res.Warnings {
				fmt.Fprintf(a.errOut, "warning: %s\n", w)
			}
			n := res.Reprocessed
			if n > 0 && !a.jsonOut {
				fmt.Fprintf(a.out, "%d items start a new attempt\n", n)
			}
			if a.jsonOut {
				return a.printJSON(map[string]any{"workflow": res.Workflow, "version": res.Version.Label(), "unchanged": res.Unchanged, "warnings": nonNil(res.Warnings), "reprocessed": n})
			}
			if res.Unchanged {
				fmt.Fprintf(a.out, "%s is already active as version %s; nothing deployed\n", res.Workflow, res.Version.Label())
			} else {
				fmt.Fprintf(a.out, "deployed %s version %s\n", res.Workflow, res.Version.Label())
			}
			return nil
		},
	}
	c.Flags().StringVar(&name, "name", "", "workflow name (default: the script's name)")
	c.Flags().BoolVar(&minor, "minor", false, "a repair: keep all state; a run failed:logic retries on this version")
	c.Flags().BoolVar(&major, "major", false, "an intent change")
	c.Flags().StringVar(&reprocess, "reprocess", "", "with --major (required): none (keep progress), all (start fresh), or KEY,KEY (new attempts for these items)")
	c.Flags().BoolVar(&acceptOrphans, "accept-orphans", false, "with --major: activate even though item ids change format and old items become orphaned")
	c.Flags().StringVar(&filesRoot, "files-root", ".", "folder of the files connector (for validation only)")
	a.addJSON(c)
	return c
}

// deployReply prints what keep serve's API answered to a deploy, as the
// local deploy prints it.
func (a *app) deployReply(file string, reply, apiErr map[string]any, err error) error {
	if err != nil {
		return err
	}
	if apiErr != nil {
		if apiErr["code"] == "invalid_script" {
			probs, _ := apiErr["problems"].([]any)
			for _, x := range probs {
				p, _ := x.(map[string]any)
				line, _ := p["line"].(float64)
				fmt.Fprintf(a.errOut, "%s:%s\n", file, script.Problem{Severity: fmt.Sprint(p["severity"]), Handler: fmt.Sprint(p["handler"]),
					Topic: fmt.Sprint(p["topic"]), Line: int(line), Message: fmt.Sprint(p["message"])}.String())
			}
			if len(probs) == 0 {
				fmt.Fprintf(a.errOut, "%s\n", apiErr["message"])
			}
			return &exitError{code: ExitInvalid, err: fmt.Errorf("%s is not valid; nothing was deployed", file)}
		}
		return errors.New(fmt.Sprint(apiErr["message"]))
	}
	if ws, ok := reply["warnings"].([]any); ok {
		for _, w := range ws {
			fmt.Fprintf(a.errOut, "warning: %s\n", w)
		}
	}
	if a.jsonOut {
		return a.printJSON(reply)
	}
	n, _ := reply["reprocessed"].(float64)
	if n > 0 {
		fmt.Fprintf(a.out, "%d items start a new attempt\n", int(n))
	}
	if unchanged, _ := reply["unchanged"].(bool); unchanged {
		fmt.Fprintf(a.out, "%s is already active as version %s; nothing deployed\n", reply["workflow"], reply["version"])
	} else {
		fmt.Fprintf(a.out, "deployed %s version %s (through keep serve)\n", reply["workflow"], reply["version"])
	}
	return nil
}

func (a *app) deployError(file string, err error) error {
	var ve *engine.ValidationError
	var se *script.SyntaxError
	switch {
	case errors.As(err, &ve):
		for _, p := range ve.Problems {
			fmt.Fprintf(a.errOut, "%s:%s\n", file, p.String())
		}
		return &exitError{code: ExitInvalid, err: fmt.Errorf("%s is not valid; nothing was deployed", file)}
	case errors.As(err, &se):
		return &exitError{code: ExitInvalid, err: err}
	}
	return err
}

func (a *app) printWarnings(file string, ps []script.Problem) {
	for _, p := range ps {
		if p.Severity == "warning" {
			fmt.Fprintf(a.errOut, "%s:%s\n", file, p.String())
		}
	}
}

// ---------- run ----------

func (a *app) runCmd() *cobra.Command {
	var configFile, filesRoot, name string
	var timeout time.Duration
	var minor, major bool
	c := &cobra.Command{
		Use:   "run FILE",
		Short: "deploy a script on the embedded store, run it until idle or blocked, print its inputs and outputs",
		Long: "run deploys FILE (when it changed), runs every due producer and consumer until nothing is left to do,\n" +
			"and prints the inputs and outputs. Exit status: 0 idle with nothing blocked, 2 invalid script, 3 a run needs a person.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := deployKind(minor, major)
			if err != nil {
				return err
			}
			src, err := readScript(args[0])
			if err != nil {
				return err
			}
			if filesRoot == "" {
				filesRoot = filepath.Dir(args[0])
			}
			k, err := daemon.Open(daemon.Options{DataDir: a.dataDir, Store: a.storeURL, ConfigFile: configFile, FilesRoot: filesRoot})
			if err != nil {
				return err
			}
			defer k.Close()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stopWorkersOnSignal()()
			defer stop()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			if _, err := k.Recover(ctx); err != nil {
				return err
			}
			res, err := k.Engine.Deploy(ctx, args[0], src, name, kind)
			if err != nil {
				return a.deployError(args[0], err)
			}
			a.printWarnings(args[0], res.Problems)
			if err := k.Scheduler.RunUntilIdle(ctx); err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("still not idle after --timeout %s", timeout)
				}
				return err
			}
			if errs := k.Scheduler.Errors(); len(errs) > 0 {
				return fmt.Errorf("keep hit an internal error: %v", errs[0])
			}
			blocked, err := a.printRunSummary(ctx, k.Store, res)
			if err != nil {
				return err
			}
			if blocked {
				return &exitError{code: ExitBlocked, err: errors.New("")}
			}
			return nil
		},
	}
	c.Flags().StringVar(&configFile, "config", "", "TOML config file with a [policy] section")
	c.Flags().StringVar(&filesRoot, "files-root", "", "folder of the files connector (default: the script's folder)")
	c.Flags().StringVar(&name, "name", "", "workflow name (default: the script's name)")
	c.Flags().DurationVar(&timeout, "timeout", 0, "give up when not idle after this long (default: no limit)")
	c.Flags().BoolVar(&minor, "minor", false, "deploy as a minor version (repair)")
	c.Flags().BoolVar(&major, "major", false, "deploy as a major version")
	a.addJSON(c)
	return c
}

func (a *app) printRunSummary(ctx context.Context, st store.Store, res engine.DeployResult) (bool, error) {
	wf := res.Workflow
	inputs, err := report.Inputs(ctx, st, wf)
	if err != nil {
		return false, err
	}
	outputs, err := report.Outputs(ctx, st, wf)
	if err != nil {
		return false, err
	}
	runs, err := report.Runs(ctx, st, wf, 0)
	if err != nil {
		return false, err
	}
	cards, err := report.Blocked(ctx, st, wf)
	if err != nil {
		return false, err
	}
	if a.jsonOut {
		return len(cards) > 0, a.printJSON(map[string]any{"workflow": map[string]any{"name": wf, "version": res.Version.Label()},
			"inputs": nonNil(inputs), "outputs": nonNil(outputs), "runs": nonNil(runs), "blocked": nonNil(cards)})
	}
	state := "idle"
	if len(cards) > 0 {
		state = "blocked"
	}
	fmt.Fprintf(a.out, "workflow %s (version %s): %s, %d runs\n\n", wf, res.Version.Label(), state, len(runs))
	a.printInputs(inputs)
	fmt.Fprintln(a.out)
	a.printOutputs(outputs, inputs)
	for _, c := range cards {
		fmt.Fprintln(a.out)
		a.printCard(c)
	}
	return len(cards) > 0, nil
}

func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

func (a *app) table() *tabwriter.Writer { return tabwriter.NewWriter(a.out, 0, 2, 2, ' ', 0) }

func crop(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func (a *app) printInputs(inputs []report.Input) {
	fmt.Fprintf(a.out, "INPUTS (%d)\n", len(inputs))
	if len(inputs) == 0 {
		fmt.Fprintln(a.out, "  (none yet)")
		return
	}
	w := a.table()
	fmt.Fprintln(w, "  STATUS\tTITLE\tSOURCE\tID")
	for _, in := range inputs {
		fmt.Fprintf(w, "  %s\t%s\t%s/%s\t%s\n", in.Status, crop(in.Title, 60), in.Source, in.Type, crop(in.ExternalID, 30))
	}
	w.Flush()
}

func (a *app) printOutputs(outputs []report.Output, inputs []report.Input) {
	titles := map[string]string{}
	for _, in := range inputs {
		titles[in.ID] = in.Title
	}
	fmt.Fprintf(a.out, "OUTPUTS (%d)\n", len(outputs))
	if len(outputs) == 0 {
		fmt.Fprintln(a.out, "  (none yet)")
		return
	}
	w := a.table()
	fmt.Fprintln(w, "  STATUS\tTOOL\tTARGET\tFOR INPUT")
	for _, o := range outputs {
		var names []string
		for _, id := range o.InputIDs {
			if t, ok := titles[id]; ok {
				names = append(names, t)
			} else {
				names = append(names, id)
			}
		}
		fmt.Fprintf(w, "  %s\t%s.%s\t%s\t%s\n", o.Status, o.Tool, o.Method, crop(o.Target, 50), crop(strings.Join(names, ", "), 50))
	}
	w.Flush()
}

func (a *app) printCard(c report.Card) {
	fmt.Fprintf(a.out, "BLOCKED  run %s (%s %s, %s)\n", c.RunID, c.Workflow, c.Handler, c.Status)
	if c.Mutation != nil {
		fmt.Fprintf(a.out, "  what:    %s.%s → %s\n", c.Mutation.Tool, c.Mutation.Method, c.Mutation.Target)
		if b, err := json.Marshal(c.Mutation.Args); err == nil {
			fmt.Fprintf(a.out, "  call:    %s\n", crop(string(b), 300))
		}
	}
	if w := c.AppliedWrite; w != nil {
		fmt.Fprintf(a.out, "  done:    %s.%s → %s (already applied; never sent again)\n", w.Tool, w.Method, w.Target)
	}
	for _, in := range c.Inputs {
		fmt.Fprintf(a.out, "  input:   %s\n", in.Title)
	}
	fmt.Fprintf(a.out, "  why:     %s\n", c.Reason)
	var acts []string
	for _, act := range c.Actions {
		switch act {
		case "approve":
			acts = append(acts, "keep approve "+c.RunID)
		default:
			acts = append(acts, "keep resolve "+c.RunID+" --"+act)
		}
	}
	fmt.Fprintf(a.out, "  do:      %s\n", strings.Join(acts, "\n           "))
}

// ---------- reads ----------

func (a *app) statusCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "status [WORKFLOW]",
		Short: "show each workflow's status and what is blocked",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			only := ""
			if len(args) == 1 {
				only = args[0]
			}
			return a.withReadStore(func(st store.Store) error {
				ss, err := report.Statuses(cmd.Context(), st, only)
				if err != nil {
					return err
				}
				// What the store shows cannot tell that keep serve is stuck
				// (a full disk: nothing it does is written); it can.
				problem := ""
				if reply, handled, err := a.viaAPI("GET", "/api/v1/health", nil); handled && err == nil {
					problem, _ = reply["problem"].(string)
				}
				for i := range ss {
					if problem != "" && ss[i].Status != "paused" {
						ss[i].Status, ss[i].Reason = "error", "keep serve cannot go on: "+problem
					}
				}
				if a.jsonOut {
					return a.printJSON(nonNil(ss))
				}
				if problem != "" {
					fmt.Fprintf(a.out, "keep serve cannot go on by itself: %s\n\n", problem)
				}
				if len(ss) == 0 {
					fmt.Fprintln(a.out, "no workflows deployed")
					return nil
				}
				w := a.table()
				fmt.Fprintln(w, "WORKFLOW\tVERSION\tSTATUS\tPENDING\tBLOCKED RUN")
				for _, s := range ss {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", s.Name, s.Version, s.Status, s.PendingEvents, s.BlockedRunID)
				}
				w.Flush()
				cards, err := report.Blocked(cmd.Context(), st, only)
				if err != nil {
					return err
				}
				for _, c := range cards {
					fmt.Fprintln(a.out)
					a.printCard(c)
				}
				return nil
			})
		},
	}
	a.addJSON(c)
	return c
}

func (a *app) inputsCmd() *cobra.Command {
	c := &cobra.Command{
		Use: "inputs WORKFLOW", Short: "list a workflow's inputs and their status", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				ins, err := report.Inputs(cmd.Context(), st, args[0])
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(nonNil(ins))
				}
				a.printInputs(ins)
				return nil
			})
		},
	}
	a.addJSON(c)
	return c
}

func (a *app) outputsCmd() *cobra.Command {
	c := &cobra.Command{
		Use: "outputs WORKFLOW", Short: "list a workflow's outputs: one line per mutation", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				outs, err := report.Outputs(cmd.Context(), st, args[0])
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(nonNil(outs))
				}
				ins, err := report.Inputs(cmd.Context(), st, args[0])
				if err != nil {
					return err
				}
				a.printOutputs(outs, ins)
				return nil
			})
		},
	}
	a.addJSON(c)
	return c
}

func (a *app) runsCmd() *cobra.Command {
	var limit int
	c := &cobra.Command{
		Use: "runs WORKFLOW", Short: "list a workflow's runs, newest first", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				rs, err := report.Runs(cmd.Context(), st, args[0], limit)
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(nonNil(rs))
				}
				w := a.table()
				fmt.Fprintln(w, "RUN\tHANDLER\tPHASE\tSTATUS\tCREATED\tERROR")
				for _, r := range rs {
					msg := ""
					if r.Error != nil {
						msg = crop(r.Error.Message, 60)
					}
					fmt.Fprintf(w, "%s\t%s %s\t%s\t%s\t%s\t%s\n", r.ID, r.HandlerType, r.Handler, r.Phase, r.Status, r.CreatedAt, msg)
				}
				w.Flush()
				return nil
			})
		},
	}
	c.Flags().IntVar(&limit, "limit", 50, "how many runs to list (0 = all)")
	a.addJSON(c)
	return c
}

// printRun renders `keep show run`: the run, its mutation, the decisions
// people took on it, its trace and, when blocked, its card.
func (a *app) printRun(d report.RunDetail) {
	r := d.Run
	fmt.Fprintf(a.out, "run %s\n  workflow: %s (version id %d)\n  handler:  %s %s\n  phase:    %s\n  status:   %s\n", r.ID, r.Workflow, r.Version, r.HandlerType, r.Handler, r.Phase, r.Status)
	if r.RetryOf != "" {
		fmt.Fprintf(a.out, "  retry of: %s\n", r.RetryOf)
	}
	if r.Error != nil {
		fmt.Fprintf(a.out, "  error:    %s: %s\n", r.Error.Class, r.Error.Message)
	}
	if mut := d.Mutation; mut != nil {
		fmt.Fprintf(a.out, "  mutation: %s.%s %s — %s", mut.Tool, mut.Method, mut.Target, mut.Status)
		if mut.ResolvedBy != "" {
			fmt.Fprintf(a.out, " (resolved by %s)", mut.ResolvedBy)
		}
		fmt.Fprintln(a.out)
	}
	if len(d.Decisions) > 0 {
		fmt.Fprintln(a.out, "\nDECISIONS")
		for _, x := range d.Decisions {
			fmt.Fprintf(a.out, "  %s  %s: %s — %s\n", x.At, x.By, x.Action, x.Detail)
		}
	}
	fmt.Fprintln(a.out, "\nTRACE")
	for _, e := range d.Trace {
		line := fmt.Sprintf("  %s  %-8s %-9s", time.UnixMilli(e.At).UTC().Format("15:04:05.000"), e.Phase, e.Kind)
		if e.Method != "" {
			line += " " + e.Method
		}
		if e.Args != nil {
			b, _ := json.Marshal(e.Args)
			line += " " + crop(string(b), 120)
		}
		if e.Duration > 0 {
			line += fmt.Sprintf(" (%dms)", e.Duration)
		}
		if e.Outcome != "" {
			line += " → " + e.Outcome
		}
		if e.Text != "" {
			line += " " + e.Text
		}
		fmt.Fprintln(a.out, line)
	}
	if d.Dropped > 0 {
		fmt.Fprintf(a.out, "  … %d more trace entries were dropped\n", d.Dropped)
	}
	if d.Card != nil {
		fmt.Fprintln(a.out)
		a.printCard(*d.Card)
	}
}

func (a *app) showCmd() *cobra.Command {
	show := &cobra.Command{Use: "show", Short: "show one run or input in full"}
	runC := &cobra.Command{
		Use: "run ID", Short: "show a run: phases, every tool call, logs, the error, and what you can do", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				d, err := report.ShowRun(cmd.Context(), st, args[0])
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(d)
				}
				a.printRun(d)
				return nil
			})
		},
	}
	inputC := &cobra.Command{
		Use: "input ID", Short: "show an input and what it caused", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				return st.View(cmd.Context(), func(tx store.Tx) error {
					in, err := tx.InputGet(args[0])
					if errors.Is(err, kt.ErrNotFound) {
						return fmt.Errorf("there is no input %q (see `keep inputs WORKFLOW`)", args[0])
					}
					if err != nil {
						return err
					}
					status, err := report.InputStatus(tx, in)
					if err != nil {
						return err
					}
					ms, err := tx.MutationList(in.Workflow)
					if err != nil {
						return err
					}
					var outs []report.Output
					for _, m := range ms {
						for _, id := range m.ItemKeys {
							if id == in.ID {
								outs = append(outs, report.OutputRow(m))
							}
						}
					}
					row := report.Input{ID: in.ID, Key: in.Key, Source: in.Source, Type: in.Type, ExternalID: in.ExternalID, Title: in.Title,
						Status: status, Attempt: in.CurrentAttempt, CreatedAt: report.Time(in.CreatedAt), UpdatedAt: report.Time(in.UpdatedAt)}
					if a.jsonOut {
						return a.printJSON(map[string]any{"input": row, "outputs": nonNil(outs)})
					}
					fmt.Fprintf(a.out, "input %s\n  title:  %s\n  source: %s/%s id %s\n  status: %s\n  attempt: %d\n\n", in.ID, in.Title, in.Source, in.Type, in.ExternalID, status, in.CurrentAttempt)
					a.printOutputs(outs, []report.Input{row})
					return nil
				})
			})
		},
	}
	a.addJSON(runC)
	inputC.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	show.AddCommand(runC, inputC, a.showItemCmd())
	return show
}

// ---------- actions ----------

func (a *app) resolveCmd() *cobra.Command {
	var tryAgain, didnt, skip, reprocess bool
	c := &cobra.Command{
		Use:   "resolve RUN --try-again|--didnt-happen|--skip|--reprocess",
		Short: "decide what happens to a blocked run",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var what engine.Resolution
			n := 0
			if tryAgain {
				what, n = engine.ResolveTryAgain, n+1
			}
			if didnt {
				what, n = engine.ResolveDidntHappen, n+1
			}
			if skip {
				what, n = engine.ResolveSkip, n+1
			}
			if reprocess {
				what, n = engine.ResolveReprocess, n+1
			}
			if n != 1 {
				return &exitError{code: exitUsageCode, err: errors.New("choose exactly one of --try-again, --didnt-happen, --skip, --reprocess")}
			}
			return a.act(cmd.Context(), args[0], what)
		},
	}
	c.Flags().BoolVar(&tryAgain, "try-again", false, "check again whether the write happened (or retry a failed run)")
	c.Flags().BoolVar(&didnt, "didnt-happen", false, "you verified the write did not happen: send it again")
	c.Flags().BoolVar(&skip, "skip", false, "give up this write: next runs with {status:'skipped'} and its inputs are skipped")
	c.Flags().BoolVar(&reprocess, "reprocess", false, "the run tried to change an item that is already done: start a new attempt of that item and retry")
	return c
}

func (a *app) approveCmd() *cobra.Command {
	return &cobra.Command{
		Use: "approve RUN", Short: "approve the mutation a run is waiting for", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.act(cmd.Context(), args[0], engine.ResolveApprove)
		},
	}
}

func (a *app) act(ctx context.Context, runID string, what engine.Resolution) error {
	path, body := "/api/v1/runs/"+url.PathEscape(runID)+"/resolve", any(map[string]string{"action": string(what)})
	if what == engine.ResolveApprove {
		path, body = "/api/v1/runs/"+url.PathEscape(runID)+"/approve", nil
	}
	if out, handled, err := a.viaAPI("POST", path, body); handled {
		if err != nil {
			return err
		}
		fmt.Fprintln(a.out, out["message"])
		return nil
	}
	return a.withStore(func(st store.Store) error {
		msg, err := engine.Resolve(ctx, st, runID, what, time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintln(a.out, msg)
		return nil
	})
}

func (a *app) workflowActionCmd(verb string) *cobra.Command {
	short := map[string]string{"pause": "stop scheduling a workflow", "resume": "let a paused workflow run again", "run-now": "run every producer of a workflow now"}[verb]
	return &cobra.Command{
		Use: verb + " WORKFLOW", Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out, handled, err := a.viaAPI("POST", "/api/v1/workflows/"+url.PathEscape(args[0])+"/"+verb, nil); handled {
				if err != nil {
					return err
				}
				fmt.Fprintln(a.out, out["message"])
				return nil
			}
			return a.withStore(func(st store.Store) error {
				msg, _, err := engine.WorkflowAction(cmd.Context(), st, args[0], verb, time.Now())
				if err != nil {
					return err
				}
				fmt.Fprintln(a.out, msg)
				return nil
			})
		},
	}
}

// ---------- items ----------

func (a *app) itemsCmd() *cobra.Command {
	var orphaned bool
	c := &cobra.Command{
		Use: "items WORKFLOW", Short: "list a workflow's items (inputs and task items) with status and attempt", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				items, err := report.Items(cmd.Context(), st, args[0], orphaned)
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(nonNil(items))
				}
				if len(items) == 0 {
					fmt.Fprintln(a.out, "no items")
					return nil
				}
				w := a.table()
				fmt.Fprintln(w, "STATUS\tATTEMPT\tKIND\tKEY\tTITLE")
				for _, it := range items {
					status := it.Status
					if it.Orphaned {
						status += " (orphaned)"
					}
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", status, it.Attempt, it.Kind, crop(it.Key, 40), crop(it.Title, 60))
				}
				w.Flush()
				return nil
			})
		},
	}
	c.Flags().BoolVar(&orphaned, "orphaned", false, "only items a new major version left behind")
	a.addJSON(c)
	return c
}

func (a *app) showItemCmd() *cobra.Command {
	var wf string
	c := &cobra.Command{
		Use: "item KEY", Short: "show an item and its attempts, each with its mutations", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withReadStore(func(st store.Store) error {
				d, err := report.ShowItem(cmd.Context(), st, wf, args[0])
				if err != nil {
					return err
				}
				if a.jsonOut {
					return a.printJSON(d)
				}
				fmt.Fprintf(a.out, "Item: %s\n  key: %s (%s, workflow %s)\n  status: %s\n", d.Item.Title, d.Item.Key, d.Item.Kind, d.Item.Workflow, d.Item.Status)
				for i, at := range d.Attempts {
					branch := "├─"
					if i == len(d.Attempts)-1 {
						branch = "└─"
					}
					cur := ""
					if at.Current {
						cur = "  ← current"
					}
					fmt.Fprintf(a.out, "%s Attempt %d (%s, script v%s, %s)%s\n", branch, at.Attempt, at.Status, at.Version, at.StartedAt, cur)
					for _, m := range at.Mutations {
						fmt.Fprintf(a.out, "│  ├─ %s.%s %s — %s\n", m.Tool, m.Method, m.Target, m.Status)
					}
				}
				return nil
			})
		},
	}
	c.Flags().StringVar(&wf, "workflow", "", "the workflow, when the key exists in several")
	c.Flags().BoolVar(&a.jsonOut, "json", false, "print JSON")
	return c
}

func (a *app) itemActionCmd(verb string) *cobra.Command {
	var wf string
	short := map[string]string{
		"skip":      "skip an item: its pending work is dropped, visibly (an input's pending events, a task item)",
		"reprocess": "start a new attempt of an item (also when done or skipped); its writes really run again",
	}[verb]
	c := &cobra.Command{
		Use: verb + " ITEM", Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out, handled, err := a.viaAPI("POST", "/api/v1/items/"+url.PathEscape(args[0])+"/"+verb+"?workflow="+url.QueryEscape(wf), nil); handled {
				if err != nil {
					return err
				}
				fmt.Fprintln(a.out, out["message"])
				return nil
			}
			return a.withStore(func(st store.Store) error {
				msg, err := engine.ItemAction(cmd.Context(), st, engine.ItemRef{Workflow: wf, Ref: args[0]}, verb, time.Now())
				if err != nil {
					return err
				}
				fmt.Fprintln(a.out, msg)
				return nil
			})
		},
	}
	c.Flags().StringVar(&wf, "workflow", "", "the workflow, when the key exists in several")
	return c
}

// ---------- the API beside a running keep serve ----------

// viaAPI sends a person's action to a keep serve running on the data
// directory, so that it acts at once and open pages update. handled is false
// when no keep serve answers; the caller then writes to the store itself.
func (a *app) viaAPI(method, path string, body any) (reply map[string]any, handled bool, err error) {
	reply, apiErr, handled, err := a.callAPI(method, path, body)
	if apiErr != nil {
		return nil, handled, errors.New(fmt.Sprint(apiErr["message"]))
	}
	return reply, handled, err
}

// callAPI is viaAPI that hands back the API's error object whole (its code
// and, for an invalid script, its problems).
func (a *app) callAPI(method, path string, body any) (reply, apiErr map[string]any, handled bool, err error) {
	addr, instance, rerr := daemon.ReadAddr(a.dataDir)
	if rerr != nil || !a.isOurServe(addr, instance) {
		return nil, nil, false, nil
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, "http://"+addr+path, rd)
	if err != nil {
		return nil, nil, false, nil
	}
	req.Header.Set("X-Keep-Client", "cli")
	req.Header.Set("X-Keep-Actor", a.by)
	req.Header.Set("Content-Type", "application/json")
	if t := os.Getenv("KEEP_TOKEN"); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, false, nil // no keep serve there (a stale address file)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, nil, true, fmt.Errorf("keep serve answered %s with something that is not JSON", resp.Status)
	}
	if e, ok := out["error"].(map[string]any); ok {
		return nil, e, true, nil
	}
	return out, nil, true, nil
}

// isOurServe asks the address whether it is the keep serve that recorded
// it (the instance id in serve.addr), before anything — a decision, the
// token — is sent there. After a kill -9 the file stays behind, and the port
// may belong to another program or another data directory's keep serve.
func (a *app) isOurServe(addr, instance string) bool {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + api.InstancePath)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var who struct {
		Instance string `json:"instance"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&who) != nil {
		return false
	}
	return who.Instance == instance
}

// ---------- bench ----------

func (a *app) benchCmd() *cobra.Command {
	var quick bool
	var dir string
	c := &cobra.Command{
		Use:   "bench",
		Short: "measure what durability costs here: fsync rate, events/s, latency, sandbox, scale (docs/performance.md)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := bench.Options{Quick: quick, Dir: dir}
			if !a.jsonOut {
				opts.Progress = a.errOut
			}
			r, err := bench.Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(r)
			}
			w := a.table()
			row := func(k, v string) { fmt.Fprintf(w, "%s\t%s\n", k, v) }
			row("disk fsync rate", fmt.Sprintf("%.0f /s", r.FsyncRate))
			row("durable commits per consumer run", fmt.Sprintf("%.2f", r.FsyncsPerRun))
			row("serial bound (fsync rate ÷ commits per run)", fmt.Sprintf("%.0f events/s", r.SerialBound))
			row(fmt.Sprintf("W=1: %d inputs → 1 write each", r.W1Events), fmt.Sprintf("%.0f events/s = %.0f%% of the serial bound (CPU %.0f µs/event)", r.W1EventsPerSec, 100*r.W1Ratio, r.W1CPUMicros))
			row(fmt.Sprintf("W=100: %d inputs", r.W100Events), fmt.Sprintf("%.0f events/s = %.2f× W=1 (%.2f commits/run, CPU %.0f µs/event)", r.W100EventsPerSec, r.W100OverW1, r.W100FsyncsPerRun, r.W100CPUMicros))
			if r.W100RSSBytes > 0 {
				row("resident memory after W=100", fmt.Sprintf("%.0f MiB", float64(r.W100RSSBytes)/(1<<20)))
			}
			row("publish → commit latency", fmt.Sprintf("p50 %.1f ms, p99 %.1f ms", r.LatencyP50Millis, r.LatencyP99Millis))
			row("handler call (compiled script, VM from the pool)", fmt.Sprintf("p50 %.0f µs, p99 %.0f µs (sandbox: %s)", r.HandlerCallP50Micro, r.HandlerCallP99Micro, r.Sandbox))
			row("one ctx call inside a handler", fmt.Sprintf("p50 %.1f µs", r.HostCallP50Micros))
			row("first call of a version (loaded into a pooled VM)", fmt.Sprintf("p50 %.0f µs", r.HandlerFirstP50))
			row("new VM (prelude + lockdown), when none is idle", fmt.Sprintf("p50 %.0f µs", r.NewVMP50Micros))
			row(fmt.Sprintf("peek(limit 100) on %d events", r.PeekEvents), fmt.Sprintf("p50 %.2f ms", r.PeekP50Millis))
			row(fmt.Sprintf("start-up: %d workflows, %d pending events", r.StartupWorkflows, r.StartupEvents), fmt.Sprintf("%.2f s", r.StartupSeconds))
			row(fmt.Sprintf("memory: %d idle workflows", r.IdleWorkflows), fmt.Sprintf("%.0f bytes each", r.IdleWorkflowBytes))
			w.Flush()
			for _, n := range r.Notes {
				fmt.Fprintln(a.out, "note:", n)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "smaller runs (under a minute)")
	c.Flags().StringVar(&dir, "dir", "", "where the temporary data directories go (default: the system temp dir; use a folder on the disk you care about)")
	a.addJSON(c)
	return c
}
