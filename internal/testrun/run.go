package testrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/builtin"
	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/hookreq"
	"github.com/keep-run/keep/internal/intake"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/netguard"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/scheduler"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqlite"
	"github.com/keep-run/keep/internal/transition"
)

// Options say what Run runs.
type Options struct {
	// Config is keep.toml's path: the workflow's policy and the
	// connectors it declares (custom ones). Empty: the keep.toml in the
	// test file's folder (RunSource: the script's), if there is one, else
	// keep's defaults.
	Config string
	// Only, when set, runs the case of that name alone.
	Only string
	// CaseLimit bounds one case's run (a script that never goes idle).
	// Defaults to 2 minutes.
	CaseLimit time.Duration
}

// Result is what a test file's cases did.
type Result struct {
	File     string `json:"file"`
	Workflow string `json:"workflow"`
	// Named is the workflow as the test file names it.
	Named string       `json:"-"`
	Cases []CaseResult `json:"cases"`
}

// Failed counts the cases that failed.
func (r *Result) Failed() int {
	n := 0
	for _, c := range r.Cases {
		if !c.OK {
			n++
		}
	}
	return n
}

// CaseResult is one case: ok, or the assertions it failed.
type CaseResult struct {
	Name     string    `json:"name"`
	Line     int       `json:"line"`
	OK       bool      `json:"ok"`
	Failures []Failure `json:"failures"`
	Elapsed  string    `json:"elapsed"`
}

// Failure is one assertion a case failed: which, where it is written,
// what it expected and what keep got.
type Failure struct {
	Assertion string `json:"assertion"`
	Line      int    `json:"line"`
	Message   string `json:"message"`
	Expected  string `json:"expected,omitempty"`
	Got       string `json:"got,omitempty"`
}

// Run reads the test file and runs its cases. An error is a test file (or
// its workflow) keep cannot run; an *Invalid says where and what to fix.
func Run(ctx context.Context, file string, o Options) (*Result, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read the test file: %w", err)
	}
	base, cfg, err := registryFor(o.Config, filepath.Dir(file))
	if err != nil {
		return nil, err
	}
	tf, err := Read(file, string(src), base)
	if err != nil {
		return nil, err
	}
	wfFile := tf.Workflow
	if !filepath.IsAbs(wfFile) {
		wfFile = filepath.Join(filepath.Dir(file), wfFile)
	}
	wfSrc, err := os.ReadFile(wfFile)
	if err != nil {
		return nil, &Invalid{File: file, Line: script.LinesOfTest(string(src)).Of("workflow"), Path: "workflow", Msg: fmt.Sprintf("%v: name the workflow's script, relative to the test file", err)}
	}
	s := suite{tf: tf, wf: Source{File: wfFile, Text: string(wfSrc)}, base: base, pol: testPolicy(cfg.Policy)}
	return s.run(ctx, o)
}

// Source is a script or a test file: where it is, and its text.
type Source struct {
	File, Text string
}

// RunSource runs a test (its source as recorded with a version) on the
// workflow source given, whatever script the test names: a Maintainer
// repair is tested so before it is activated.
func RunSource(ctx context.Context, test, workflow Source, o Options) (*Result, error) {
	base, cfg, err := registryFor(o.Config, filepath.Dir(workflow.File))
	if err != nil {
		return nil, err
	}
	tf, err := Read(test.File, test.Text, base)
	if err != nil {
		return nil, err
	}
	s := suite{tf: tf, wf: workflow, base: base, pol: testPolicy(cfg.Policy)}
	return s.run(ctx, o)
}

// suite is a test file's cases and what each runs with: the workflow's
// script, the connectors and the policy.
type suite struct {
	tf    *File
	wf    Source
	base  *connector.Registry
	pol   config.Policy
	limit time.Duration // one case's bound (Options.CaseLimit)
	// sandbox is the run's own sandbox runtime (issue 41): a keep test
	// inside keep serve (the Maintainer's) shares no worker, pool or stop
	// with the serving engine, and leaves none behind when it ends.
	sandbox *script.Runtime
}

func (s suite) run(ctx context.Context, o Options) (*Result, error) {
	if o.Only != "" && !hasCase(s.tf, o.Only) {
		return nil, &Invalid{File: s.tf.Path, Msg: fmt.Sprintf("has no case named %q (--run)", o.Only)}
	}
	s.limit = o.CaseLimit
	if s.limit == 0 {
		s.limit = 2 * time.Minute
	}
	s.sandbox = script.NewRuntime()
	defer s.sandbox.Close()
	res := &Result{File: s.tf.Path, Workflow: s.wf.File, Named: s.tf.Workflow}
	for i := range s.tf.Cases {
		c := &s.tf.Cases[i]
		if o.Only != "" && c.Name != o.Only {
			continue
		}
		start := time.Now()
		cr, err := s.runCase(ctx, c)
		if err != nil {
			return res, err
		}
		cr.Elapsed = time.Since(start).Round(time.Millisecond).String()
		res.Cases = append(res.Cases, cr)
	}
	return res, nil
}

// FirstFailure says the first failed case and why, for people ("" when
// every case passed).
func (r *Result) FirstFailure() string {
	for _, c := range r.Cases {
		if c.OK {
			continue
		}
		f := c.Failures[0]
		s := fmt.Sprintf("case %q fails: %s (line %d): %s", c.Name, f.Assertion, f.Line, f.Message)
		if f.Expected != "" || f.Got != "" {
			s += fmt.Sprintf(" — expected %s, got %s", f.Expected, f.Got)
		}
		return s
	}
	return ""
}

func hasCase(f *File, name string) bool {
	for _, c := range f.Cases {
		if c.Name == name {
			return true
		}
	}
	return false
}

// registryFor builds the connectors of keep and of the config (without
// credentials or connections: their calls are replaced).
func registryFor(cfgPath, wfDir string) (*connector.Registry, config.Config, error) {
	if cfgPath == "" {
		if _, err := os.Stat(filepath.Join(wfDir, "keep.toml")); err == nil {
			cfgPath = filepath.Join(wfDir, "keep.toml")
		}
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, cfg, err
	}
	set, err := builtin.Build(&connector.Host{Config: cfg, Guard: netguard.New(nil)})
	if err != nil {
		return nil, cfg, err
	}
	return set.Registry(wfDir), cfg, nil
}

// testPolicy is the workflow's policy with keep's own waits shortened:
// every retry, reconcile attempt and settle happens as in production, in
// the same order and number, but a case does not wait 10 s for each. A
// 429's Retry-After is the test's own (retryAfter) and is waited for.
func testPolicy(p config.Policy) config.Policy {
	const short = 10 * time.Millisecond
	p.TransientBackoff, p.TransientBackoffMax = short, short
	p.ReconcileBackoff, p.ReconcileBackoffMax = short, short
	p.ReconcileSettle = 0
	// The settle rule waits for the call's own limit; a fake answers at
	// once, so a short one changes nothing but the wait.
	p.ToolTimeout = 100 * time.Millisecond
	p.Workers = 1
	return p
}

// runCase deploys the workflow on a store of its own, runs it until idle
// as keep run does, and checks what it did.
func (s suite) runCase(ctx context.Context, c *Case) (CaseResult, error) {
	pol, limit := s.pol, s.limit
	cr := CaseResult{Name: c.Name, Line: c.Line, Failures: []Failure{}}
	dir, err := os.MkdirTemp("", "keep-test-")
	if err != nil {
		return cr, err
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(filepath.Join(dir, "keep.db"))
	if err != nil {
		return cr, err
	}
	defer st.Close()
	fk := newFakes(c)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var sched *scheduler.Scheduler
	eng := engine.New(engine.Options{Sandbox: s.sandbox, Store: st, Registry: fk.registry(s.base), Policy: &pol, Logger: logger,
		OnChange: func(string) { sched.Wake() }, Secret: testSecret})
	sched = scheduler.New(scheduler.Options{Engine: eng, Logger: logger, Workers: pol.Workers})
	dep, err := control.Deploy(ctx, eng, s.wf.File, s.wf.Text, control.DeployOptions{FilesRoot: dir, Grant: true})
	if err != nil {
		return cr, deployError(s.wf.File, err)
	}
	if err := postEvents(ctx, st, c, dep.Workflow); err != nil {
		return cr, err
	}
	failures, err := s.deliver(ctx, eng, c, dep.Workflow)
	if err != nil {
		return cr, err
	}
	cr.Failures = append(cr.Failures, failures...)
	if _, err := engine.QueueAtStart(ctx, st, dep.Workflow, time.Now()); err != nil {
		return cr, err
	}
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	idle := func() (bool, error) {
		if err := sched.RunUntilIdle(rctx); err != nil {
			if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
				return false, err
			}
			cr.Failures = append(cr.Failures, Failure{Assertion: "idle", Line: c.Line, Message: fmt.Sprintf("the workflow was still not idle after %s: a retry or reconcile that never ends, or a producer that always finds work", limit)})
			return false, nil
		}
		if errs := sched.Errors(); len(errs) > 0 {
			return false, fmt.Errorf("keep hit an internal error: %v", errs[0])
		}
		return true, nil
	}
	ok, err := idle()
	for i := 0; ok && err == nil && i < len(c.Decisions); i++ {
		var f *Failure
		if f, err = decide(ctx, st, dep.Workflow, c.Decisions[i], i); f != nil {
			cr.Failures = append(cr.Failures, *f)
			break
		}
		if err == nil {
			ok, err = idle()
		}
	}
	if err != nil {
		return cr, err
	}
	got, err := observe(context.WithoutCancel(ctx), st, dep.Workflow, fk)
	if err != nil {
		return cr, err
	}
	cr.Failures = append(cr.Failures, check(c, got)...)
	cr.OK = len(cr.Failures) == 0
	return cr, nil
}

// deployError says why the workflow cannot be deployed, at its lines.
func deployError(file string, err error) error {
	var ve *engine.ValidationError
	if errors.As(err, &ve) {
		msg := fmt.Sprintf("%s is not valid, so no case ran:", file)
		for _, p := range ve.Problems {
			if p.Severity != "warning" {
				msg += fmt.Sprintf("\n  %s:%s", file, p.String())
			}
		}
		return &Invalid{Msg: msg}
	}
	var se *script.SyntaxError
	if errors.As(err, &se) {
		return &Invalid{Msg: se.Error()}
	}
	return err
}

// observed is what keep recorded for a case, and what the fakes saw.
type observed struct {
	inputs    []apitype.Input
	items     []apitype.Item
	runs      []apitype.Run
	cards     []apitype.Card
	writes    []write
	unmatched []string
}

func observe(ctx context.Context, s store.Store, wf string, fk *fakes) (observed, error) {
	var o observed
	var err error
	// A test's store is small: all of it is read.
	if o.inputs, err = report.AllInputs(ctx, s, wf); err != nil {
		return o, err
	}
	if o.items, err = report.AllItems(ctx, s, wf, false); err != nil {
		return o, err
	}
	if o.runs, err = report.AllRuns(ctx, s, wf); err != nil {
		return o, err
	}
	if o.cards, err = report.Blocked(ctx, s, wf); err != nil {
		return o, err
	}
	fk.mu.Lock()
	o.writes = append([]write(nil), fk.writes...)
	o.unmatched = append([]string(nil), fk.unmatched...)
	fk.mu.Unlock()
	return o, nil
}

// testSecret is every secret a test's keep has: its webhook requests are
// signed with it, as a sender holding the real one signs them.
func testSecret(_ context.Context, name string) (string, error) {
	return "keep-test-secret:" + name, nil
}

// deliver sends a case's webhook requests as keep serve's listener hands
// them to the engine, each signed in its webhook's verify format. A
// request keep does not accept (the handler threw, no delivery id where
// dedupe says) fails the case; one to a webhook the workflow has not is
// an invalid test.
func (s suite) deliver(ctx context.Context, eng *engine.Engine, c *Case, wf string) ([]Failure, error) {
	if len(c.Deliveries) == 0 {
		return nil, nil
	}
	decl, err := script.Declare(s.wf.File, s.wf.Text)
	if err != nil {
		return nil, err
	}
	var out []Failure
	nth := map[string]int{}
	for _, d := range c.Deliveries {
		i := nth[d.Webhook]
		nth[d.Webhook]++
		where := pathText([]string{"cases", c.Name, "webhooks", d.Webhook})
		wh, _, ok := decl.Webhook(d.Webhook)
		if !ok {
			return nil, &Invalid{File: c.file, Line: d.line, Path: where, Msg: fmt.Sprintf("workflow %s has no webhook %q (its webhooks: %s)", wf, d.Webhook, strings.Join(decl.WebhookNames(), ", "))}
		}
		h := hookreq.Hook{Workflow: wf, Name: d.Webhook, Method: "POST", Header: http.Header{}, Query: url.Values{}, Body: d.Body}
		for k, v := range d.Headers {
			h.Header.Set(k, v)
		}
		for k, v := range d.Query {
			h.Query.Set(k, v)
		}
		secret, _ := testSecret(ctx, wh.Verify.Secret)
		if err := hookreq.Sign(wh, secret, &h, time.Now()); err != nil {
			return nil, &Invalid{File: c.file, Line: d.line, Path: where, Msg: err.Error()}
		}
		got, err := intake.NewWebhooks(eng).Deliver(ctx, h)
		if err != nil {
			return nil, err
		}
		if got.Why != hookreq.WhyAccepted && got.Why != hookreq.WhyDuplicate {
			out = append(out, Failure{Assertion: fmt.Sprintf("webhooks[%q][%d]", d.Webhook, i), Line: d.line,
				Message: fmt.Sprintf("keep did not accept the delivery (%s): %s", got.Why, got.Message)})
		}
	}
	return out, nil
}

// decide takes a person's decision on the blocked run whose card says
// d.Card, through control.Control, which keep resolve and the page reach through the API; a
// decision no card offers fails the case.
func decide(ctx context.Context, st store.Store, wf string, d Decision, i int) (*Failure, error) {
	cards, err := report.Blocked(ctx, st, wf)
	if err != nil {
		return nil, err
	}
	var texts []string
	for _, cd := range cards {
		t := cardText(cd)
		texts = append(texts, t)
		if !strings.Contains(t, d.Card) {
			continue
		}
		ctrl := &control.Control{Store: st}
		if _, err := ctrl.Do(transition.WithActor(ctx, "keep test"), control.Request{Action: kt.Action(d.Action), Run: cd.RunID, Workflow: wf}); err != nil {
			var ae *kt.ActionError
			if errors.As(err, &ae) {
				return &Failure{Assertion: fmt.Sprintf("decide[%d]", i), Line: d.line, Message: fmt.Sprintf("%s on the run whose card says %q was refused: %v", d.Action, d.Card, err), Got: t}, nil
			}
			return nil, err
		}
		return nil, nil
	}
	return &Failure{Assertion: fmt.Sprintf("decide[%d]", i), Line: d.line, Message: fmt.Sprintf("no blocked run's card says %q, so nobody could %s it", d.Card, d.Action),
		Expected: fmt.Sprintf("a card containing %q", d.Card), Got: orNone(texts)}, nil
}

// postEvents posts a case's events as keep publish does: each input and
// its event in one step. A refused one (a topic not open to the API) is an
// invalid test at the event's line.
func postEvents(ctx context.Context, st store.Store, c *Case, wf string) error {
	for _, ev := range c.Events {
		ctrl := &control.Control{Store: st}
		_, err := ctrl.Do(ctx, control.Request{Action: kt.ActPublish, Workflow: wf, Topic: ev.Topic,
			Event: intake.APIEvent{ID: ev.ID, Title: ev.Title, Payload: ev.Payload}})
		var ae *kt.ActionError
		if errors.As(err, &ae) {
			return &Invalid{File: c.file, Line: ev.line, Path: pathText([]string{"cases", c.Name, "events", ev.Topic}), Msg: err.Error()}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
