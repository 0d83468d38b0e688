package inproc

// Keep's own code that commands run in the CLI's process without reading
// the store (keep validate, connectors, types, plan, grant's preview,
// connect's usage), each reached through one function here: the CLI
// imports inproc, not engine, script, connector, dts or maintainer
// (docs/design.md, "The page and the API").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/builtin"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/dts"
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/maintainer"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/testrun"
)

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
	return p.Decl.WorkflowName(), script.Check(p, engine.ScriptConnectors(daemon.RegistryOf(cfg, "."))), nil
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
	return connector.Describe(daemon.RegistryOf(cfg, "."))
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
	m, err := daemon.RegistryOf(cfg, ".").Method(tool, method)
	if err != nil || len(m.Scopes) == 0 {
		return ""
	}
	return strings.TrimPrefix(m.Scopes[0], "https://www.googleapis.com/auth/")
}

// PlanRequest is one keep plan: the person's Words, File the script's
// name, Test why a test refuses the script ("" when it passes), Current
// the version it revises (nil for a new one).
type PlanRequest struct {
	Words, File string
	Test        func(ctx context.Context, testSrc, src string) string
	Current     *kt.Version
}

// Plan asks the Planner of cfg's [llm] for a script from a person's
// words and its test, validated, tested and reviewed (keep plan).
func Plan(ctx context.Context, cfg config.Config, r PlanRequest) (maintainer.Plan, error) {
	reg := daemon.RegistryOf(cfg, ".")
	eng := engine.New(engine.Options{Registry: reg})
	p := &maintainer.Planner{Model: maintainer.NewModel(cfg.LLM), Check: eng.Check, Registry: reg, MaxAttempts: cfg.Maintainer.MaxAttempts,
		File: r.File, Test: r.Test, TestFaults: testrun.Faults()}
	return p.Plan(ctx, r.Words, r.Current)
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

// ConnectRequest is one keep connect NAME ARGS (NAME as ConnectName
// answered; Token is --token; Out is where to talk to the person).
type ConnectRequest struct {
	Name  string
	Args  []string
	Token string
	Out   io.Writer
}

// Connect runs keep connect: the connector's own flow, its account sealed
// in this data directory's store; the scopes asked are those the deployed
// workflows and the scripts named in its arguments call. readCtx bounds
// reading the store.
func (d *Direct) Connect(ctx, readCtx context.Context, cfg config.Config, r ConnectRequest) error {
	c, _ := builtin.Find(r.Name)
	return c.Connect.Run(ctx, connector.ConnectCall{Table: cfg.Connectors[c.Name], Args: r.Args, Token: r.Token, Out: r.Out,
		Accounts: func() (connector.Accounts, error) {
			accts, err := d.Accounts()
			if err != nil {
				return nil, err // never a nil *account.Accounts in the interface
			}
			return accts, nil
		},
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

// CheckTest reads a workflow's test file as keep test would, against the
// connectors cfg knows with its files connector at filesRoot: a test keep
// cannot run is refused with its deploy.
func CheckTest(cfg config.Config, filesRoot, path, src string) error {
	_, err := testrun.Read(path, src, daemon.RegistryOf(cfg, filesRoot))
	return err
}
