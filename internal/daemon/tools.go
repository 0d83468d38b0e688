package daemon

// Keep's own code that commands run in the CLI's process without reading
// the store (keep validate, connectors, types, plan, grant's preview,
// connect's usage), each reached through one function here: the CLI
// imports daemon, not engine, script, connector, dts or maintainer
// (docs/design.md, "The page and the API").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/builtin"
	"github.com/keep-run/keep/internal/dts"
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/maintainer"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/testrun"
	"github.com/keep-run/keep/internal/transition"
)

// ErrReprocessChoice is a major version's deploy without the choice of
// what happens to the items already done (engine.ErrReprocessChoice).
var ErrReprocessChoice = engine.ErrReprocessChoice

// WithActor names who takes the decisions this process makes itself (a
// deploy by keep run), for the decision log (transition.WithActor).
func WithActor(ctx context.Context, by string) context.Context {
	return transition.WithActor(ctx, by)
}

// StopWorkersOnSignal stops every sandbox worker when Ctrl-C or SIGTERM
// arrives: a handler spinning in a native loop must not hold a shutdown for
// its whole time limit (its run is recovered at the next start). Call the
// function it returns when the command ends. It watches the first signal
// only: a second one finds Go's default (the process ends at once) unless
// another watcher holds it.
func StopWorkersOnSignal() (done func()) {
	return StopWorkersOnSignalThen(nil)
}

// StopWorkersOnSignalThen is StopWorkersOnSignal, and after the first
// signal, once it let go of the signals and stopped the workers, calls
// then (if not nil).
func StopWorkersOnSignalThen(then func()) (done func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	quit := make(chan struct{})
	go func() {
		select {
		case <-sig:
			signal.Stop(sig)
			script.StopWorkers()
			if then != nil {
				then()
			}
		case <-quit:
		}
	}()
	return func() {
		signal.Stop(sig)
		close(quit)
	}
}

// Validate compiles and checks a script against the connectors cfg
// declares, as a deploy would: its workflow's name and its problems; err
// is a syntax error (its line is a problem too; Invalid tells it apart).
func Validate(cfg config.Config, file, src string) (name string, problems []kt.Problem, err error) {
	p, err := script.Compile(file, src)
	if err != nil {
		var se *script.SyntaxError
		if errors.As(err, &se) {
			return "", []kt.Problem{{Severity: "error", Line: se.Line, Message: "syntax error: " + se.Message}}, err
		}
		return "", nil, err
	}
	return p.Decl.WorkflowName(), script.Check(p, engine.ScriptConnectors(RegistryOf(cfg, "."))), nil
}

// Invalid tells the error of an invalid script apart: a syntax error
// (syntax), or a script that breaks keep's rules and its problems
// (engine.ValidationError). ok is false for any other error.
func Invalid(err error) (problems []kt.Problem, syntax, ok bool) {
	var ve *engine.ValidationError
	var se *script.SyntaxError
	switch {
	case errors.As(err, &ve):
		return ve.Problems, false, true
	case errors.As(err, &se):
		return nil, true, true
	}
	return nil, false, false
}

// Connectors is what the connectors cfg knows declare (keep connectors,
// --json): each method's parameters, result, identity and reconcile.
func Connectors(cfg config.Config) []connector.Info {
	return connector.Describe(RegistryOf(cfg, "."))
}

// ConnectorsMarkdown is the connectors' reference as docs/scripts.md has it.
func ConnectorsMarkdown(cfg config.Config) string {
	return connector.Markdown(Connectors(cfg))
}

// Types is keep.d.ts for the connectors cfg knows and the faults a
// workflow's test may name (keep types).
func Types(cfg config.Config) string {
	return dts.Render(Connectors(cfg), dts.Options{Faults: testrun.Faults()})
}

// GoogleScope is the Google scope a grant ("gmail.send") needs, without
// its URL's prefix, or "" when its method needs none.
func GoogleScope(cfg config.Config, grant string) string {
	tool, method, ok := strings.Cut(kt.GrantBase(grant), ".")
	if !ok {
		return ""
	}
	m, err := RegistryOf(cfg, ".").Method(tool, method)
	if err != nil || len(m.Scopes) == 0 {
		return ""
	}
	return strings.TrimPrefix(m.Scopes[0], "https://www.googleapis.com/auth/")
}

// Plan asks the Planner of cfg's [llm] for a script from a person's
// words and its test, validated, tested (test: why its test refuses it,
// "" when it passes) and reviewed; file is the script's name, current the
// version it revises, or nil (keep plan).
func Plan(ctx context.Context, cfg config.Config, words, file string, test func(ctx context.Context, testSrc, src string) string, current *kt.Version) (maintainer.Plan, error) {
	reg := RegistryOf(cfg, ".")
	eng := engine.New(engine.Options{Registry: reg})
	p := &maintainer.Planner{Model: maintainer.NewModel(cfg.LLM), Check: eng.Check, Registry: reg, MaxAttempts: cfg.Maintainer.MaxAttempts,
		File: file, Test: test, TestFaults: testrun.Faults()}
	return p.Plan(ctx, words, current)
}

// ConnectHelp is one connector keep connect knows: its name, its
// arguments and what it does.
type ConnectHelp struct{ Name, Usage, Doc string }

// Connectable lists the connectors keep connect knows, in builtin's order.
func Connectable() []ConnectHelp {
	var out []ConnectHelp
	for _, n := range builtin.Connectable() {
		d, _ := builtin.Find(n)
		out = append(out, ConnectHelp{n, d.Connect.Usage, d.Connect.Doc})
	}
	return out
}

// Connect runs keep connect NAME ARGS: the connector's own flow, its
// account sealed in this data directory's store; the scopes asked are
// those the deployed workflows and the scripts named in args call.
// (NAME as ConnectName answered); readCtx bounds reading the store.
func (d *Direct) Connect(ctx, readCtx context.Context, cfg config.Config, name string, args []string, token string, out io.Writer) error {
	c, _ := builtin.Find(name)
	return c.Connect.Run(ctx, connector.ConnectCall{Table: cfg.Connectors[c.Name], Args: args, Token: token, Out: out,
		Accounts: d.Accounts,
		Uses: func(scripts []string) ([]string, error) {
			return d.usesOf(readCtx, scripts)
		}})
}

// ConnectName is the connector's name as its table and variables spell it
// (KEEP_NAME_TOKEN); an error names those keep connect knows.
func ConnectName(name string) (string, error) {
	c, ok := builtin.Find(name)
	if !ok || c.Connect == nil {
		return "", fmt.Errorf("keep connect knows %s (got %q)", strings.Join(builtin.Connectable(), " and "), name)
	}
	return c.Name, nil
}

// usesOf lists the methods the deployed workflows and the named scripts
// call (engine.UsesOf).
func (d *Direct) usesOf(ctx context.Context, files []string) ([]string, error) {
	sources, err := d.LatestScripts(ctx)
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
	return engine.UsesOf(sources), nil
}

// DeployToRun deploys a script as keep run does: the person running it
// grants what it uses; test is its test file's source, recorded with it.
func (k *Keep) DeployToRun(ctx context.Context, file, src, name string, kind kt.DeployKind, filesRoot, test string) (kt.DeployResult, error) {
	return k.Engine.DeployWith(ctx, file, src, engine.DeployOptions{Name: name, Kind: kind, FilesRoot: filesRoot, Grant: true, Test: test})
}

// QueueProducers makes every producer of a workflow due now, due or not:
// keep run's development loop.
func (k *Keep) QueueProducers(ctx context.Context, wf string) error {
	_, err := engine.QueueAtStart(ctx, k.Store, wf, time.Now())
	return err
}

// CheckAddr refuses keep serve's --addr when it accepts connections from
// other machines and no token guards it.
func CheckAddr(addr, token string) error {
	if addr != "" && !api.IsLoopback(addr) && token == "" {
		return fmt.Errorf("--addr %s accepts connections from other machines: set a token with --token or KEEP_TOKEN", addr)
	}
	return nil
}

// CheckTest reads a workflow's test file as keep test would, against the
// connectors cfg knows with its files connector at filesRoot: a test keep
// cannot run is refused with its deploy.
func CheckTest(cfg config.Config, filesRoot, path, src string) error {
	_, err := testrun.Read(path, src, RegistryOf(cfg, filesRoot))
	return err
}

// RunUntilIdle runs k's workflows until nothing is left to do, or ctx
// ends. Then it stops at once: it waits for no connector call. A step
// between two calls (in a handler, committing) ends or reaches its next
// call (Engine.Parked); the calls the steps wait on then are given up on
// and returned — each safe to give up on by the ledger (a write is
// in_flight, reconciled by the next run; a read writes nothing), as a
// crash would leave them. Their steps are left to the process's exit.
func (k *Keep) RunUntilIdle(ctx context.Context) ([]kt.CallInFlight, error) {
	idle := make(chan error, 1)
	go func() { idle <- k.Scheduler.RunUntilIdle(ctx) }()
	select {
	case err := <-idle:
		return nil, err
	case <-ctx.Done():
	}
	parked := make(chan []kt.CallInFlight, 1)
	pctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		calls, _ := k.Engine.Parked(pctx)
		parked <- calls
	}()
	select {
	case err := <-idle:
		return nil, err
	case calls := <-parked:
		return calls, ctx.Err()
	}
}
