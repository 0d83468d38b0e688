// Package engine is keep's run state machine: producer and consumer runs,
// their phases and statuses, commit, mutation execution with the ledger,
// reconciliation, the failure taxonomy with retries, people's actions, and
// start-up recovery. Every state transition is one store transaction.
package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	otrace "go.opentelemetry.io/otel/trace"

	"github.com/keep-run/keep/internal/clock"
	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// MaxJSONBytes bounds event payloads, handler state and PrepareResults (SPEC §6).
const MaxJSONBytes = kt.MaxJSONBytes

// Options configure an Engine.
type Options struct {
	Store store.Store
	// Registry holds the connectors of workflows that recorded no files
	// root; RegistryFor, when set, builds the connectors of a workflow that
	// did (kt.Workflow.FilesRoot), rooted there.
	Registry    *connector.Registry
	RegistryFor func(filesRoot string) *connector.Registry
	// Policy defaults to config.Defaults().
	Policy *config.Policy
	// Now is the clock the engine stamps and compares by: keep's time
	// (clock.Now: it never steps back) when nil. A test that sets it moves
	// the engine's monotonic readings with it (Engine.mono): the settle
	// window before a "not found" is believed is then on its clock too.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// AtDurableStep, when set, is called right after each named durable
	// step (the Crash* constants in run.go). Crash tests make it end the
	// process there (daemon wires KEEP_TEST_CRASH_AFTER); nil otherwise.
	AtDurableStep func(step string)
	// OnChange, when set, is called after every committed transition with the workflow name.
	OnChange func(workflow string)
	// Observer, when set, is told about finished runs and sandbox calls (metrics).
	Observer Observer
	// Notify, when set, is told what a person watching should know while
	// keep works on by itself: a retry scheduled, retries given up (keep
	// run prints them, so a wait is never silent).
	Notify func(kt.Notice)
	// Secret opens a named secret ({secret:NAME} in a call's headers) at
	// the moment of the call; a name keep does not have wraps
	// kt.ErrNotFound. Nil: no call may name one.
	Secret func(ctx context.Context, name string) (string, error)
	// Tracer, when set, makes the OpenTelemetry spans of runs, their
	// phases and their connector calls (otel.go; keep.toml's [otel]).
	// Nil: no spans at all.
	Tracer otrace.Tracer
	// Sandbox is the sandbox runtime the engine's handlers run on (its
	// owner's, the daemon's: issue 41); nil is the process's default.
	Sandbox *script.Runtime
}

// Observer receives measurements; the metrics package implements it.
type Observer interface {
	RunFinished(workflow string, handlerType kt.HandlerType, status kt.Status, d time.Duration)
	SandboxCall(phase string, d time.Duration)
	// Reconciled counts one question to a connector's reconcile about a
	// write whose outcome keep did not know (inline or in the background),
	// by its answer (applied, failed, retry, error).
	Reconciled(workflow, answer string)
	// Delivered counts one delivery to a declared webhook by what keep
	// made of it (kt.Delivery*): refused ones included, so an operator sees
	// a sender whose signatures fail.
	Delivered(workflow, webhook string, status kt.DeliveryStatus)
}

// Engine executes runs.
type Engine struct {
	sandbox     *script.Runtime
	store       store.Store
	registry    *connector.Registry
	registryFor func(string) *connector.Registry
	registries  map[string]*connector.Registry // by files root
	policy      config.Policy
	hasPolicy   bool // given by Options (recorded with what it deploys)
	// policies caches the decoded recorded policies (PolicyFor), by
	// their record.
	policies sync.Map
	// peekGuesses: what each consumer's prepare peeks first, read ahead
	// by the step's plan (peekahead.go).
	peekGuesses peekGuesses
	now         func() time.Time
	// mono is how long the engine has run (clock.Mono, or Options.Now's
	// elapsed time in a test that sets it): what in-process durations are
	// measured on.
	mono func() time.Duration
	// wall is the wall clock, for what is compared with clocks outside
	// keep (clock.Wall, or Options.Now).
	wall func() time.Time
	// sends notes, per ledger row, when this process sent it and when it
	// first saw it "not found" (settle.go).
	sends    sendMarks
	log      *slog.Logger
	atStep   func(step string)
	onChange func(string)
	observer Observer
	notify   func(kt.Notice)
	secret   func(context.Context, string) (string, error)
	tracer   otrace.Tracer

	// flight counts the steps under way and the calls they wait on.
	flight flight

	mu       sync.Mutex
	programs map[string]*script.Program
	// latest is each workflow's program compiled last (usually its
	// active version's): a step names its plan's reads by it.
	latest map[string]*script.Program
	// installation is the store's id, read once (installationID).
	installation string
}

// New builds an Engine.
func New(o Options) *Engine {
	e := &Engine{sandbox: o.Sandbox, store: o.Store, registry: o.Registry, registryFor: o.RegistryFor, registries: map[string]*connector.Registry{}, now: o.Now, log: o.Logger, atStep: o.AtDurableStep, onChange: o.OnChange, observer: o.Observer, notify: o.Notify, secret: o.Secret, tracer: o.Tracer, programs: map[string]*script.Program{}, latest: map[string]*script.Program{}}
	if o.Policy != nil {
		e.policy, e.hasPolicy = *o.Policy, true
	} else {
		e.policy = config.Defaults()
	}
	e.now, e.mono, e.wall = clock.Now, clock.Mono, clock.Wall
	if o.Now != nil {
		start := o.Now()
		e.now, e.wall = o.Now, o.Now
		e.mono = func() time.Duration { return o.Now().Sub(start) }
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	return e
}

// connectorsOf returns the connectors a workflow's runs call: rooted at
// the files root recorded at its deploy, or the engine's own.
func (e *Engine) connectorsOf(wf kt.Workflow) *connector.Registry {
	if wf.FilesRoot == "" || e.registryFor == nil {
		return e.registry
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.registries[wf.FilesRoot]
	if !ok {
		r = e.registryFor(wf.FilesRoot)
		e.registries[wf.FilesRoot] = r
	}
	return r
}

// installationID is the store's installation id, read once.
func (e *Engine) installationID(ctx context.Context) (string, error) {
	e.mu.Lock()
	id := e.installation
	e.mu.Unlock()
	if id != "" {
		return id, nil
	}
	if err := e.store.View(ctx, func(tx store.Tx) error {
		var err error
		id, err = tx.InstallationID()
		return err
	}); err != nil {
		return "", err
	}
	e.mu.Lock()
	e.installation = id
	e.mu.Unlock()
	return id, nil
}

// Policy returns the engine's host policies.
func (e *Engine) Policy() config.Policy { return e.policy }

// PolicyFor is the policy workflow wf's runs run under — timeouts,
// retries and their backoff, reconcile attempts, the memory limit: the
// one recorded at its deploy (kt.Workflow.Policy), whatever this process
// was started with; this engine's own for a workflow deployed before keep
// recorded it. The one place the engine picks a run's policy.
func (e *Engine) PolicyFor(wf kt.Workflow) (config.Policy, error) {
	if wf.Policy == "" {
		return e.policy, nil
	}
	if p, ok := e.policies.Load(wf.Policy); ok {
		return p.(config.Policy), nil
	}
	p, err := RecordedPolicy(wf.Name, wf.Policy)
	if err != nil {
		return config.Policy{}, err
	}
	e.policies.Store(wf.Policy, p)
	return p, nil
}

// RecordedPolicy decodes rec, the policy recorded for workflow wf at its
// deploy (kt.Workflow.Policy); a setting the record predates keeps its
// default. Stored JSON that does not decode is an error saying what to do.
func RecordedPolicy(wf, rec string) (config.Policy, error) {
	p := config.Defaults()
	if err := json.Unmarshal([]byte(rec), &p); err != nil {
		return config.Policy{}, kt.Damaged(kt.Damage{What: "the policy recorded for workflow " + wf, Table: "workflows", Row: "name=" + wf,
			Why: fmt.Sprintf("does not decode (%v)", err), Restore: "deploy it again to record it: keep deploy FILE (its script's file)"})
	}
	return p, nil
}

// Store returns the engine's store.
func (e *Engine) Store() store.Store { return e.store }

// NowMs is the engine's clock in Unix milliseconds, as records store it.
func (e *Engine) NowMs() int64 { return e.now().UnixMilli() }

// WallNow is the wall clock (e.wall; the engine's clock in an Engine a
// test built by hand).
func (e *Engine) WallNow() time.Time {
	if e.wall == nil {
		return e.now()
	}
	return e.wall()
}

// monoNow is e.mono (clock.Mono in an Engine a test built by hand).
func (e *Engine) monoNow() time.Duration {
	if e.mono == nil {
		return clock.Mono()
	}
	return e.mono()
}

// Changed wakes whatever waits for wf's next step (keep serve's
// scheduler): something was written that a step may take.
func (e *Engine) Changed(wf string) {
	if e.onChange != nil {
		e.onChange(wf)
	}
}

// update runs one transition transaction and announces the change.
func (e *Engine) update(ctx context.Context, wf string, fn func(store.Tx) error) error {
	if err := e.store.Update(ctx, fn); err != nil {
		return err
	}
	e.Changed(wf)
	return nil
}

// Program returns the compiled script of a workflow version, compiling it once.
// cachedProgram returns a version's program when it is compiled already.
func (e *Engine) cachedProgram(wf string, version int64) *script.Program {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.programs[programKey(wf, version)]
}

func programKey(wf string, version int64) string { return wf + "@" + strconv.FormatInt(version, 10) }

// Program returns the compiled script of a workflow version, compiling it once.
func (e *Engine) Program(ctx context.Context, wf string, version int64) (*script.Program, error) {
	key := programKey(wf, version)
	if p := e.cachedProgram(wf, version); p != nil {
		return p, nil
	}
	var v kt.Version
	if err := e.store.View(ctx, func(tx store.Tx) error {
		var err error
		v, err = tx.VersionGet(wf, version)
		return err
	}); err != nil {
		return nil, err
	}
	p, err := script.Compile(v.File, v.Script)
	if err != nil {
		return nil, fmt.Errorf("compile %s version %s: %w", wf, v.Label(), err)
	}
	e.mu.Lock()
	e.programs[key] = p
	e.latest[wf] = p
	e.mu.Unlock()
	return p, nil
}

// latestProgram is the workflow's program compiled last, nil before any.
func (e *Engine) latestProgram(wf string) *script.Program {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.latest[wf]
}

// ValidationError carries the problems that stopped a deploy.
type ValidationError struct {
	File     string
	Problems []kt.Problem
}

func (v *ValidationError) Error() string {
	s := fmt.Sprintf("%s is not valid:", v.File)
	for _, p := range v.Problems {
		if p.Severity == "error" {
			s += "\n  " + p.String()
		}
	}
	return s
}

// ScriptConnectors is what validation knows of a registry's connectors.
func ScriptConnectors(reg *connector.Registry) script.Connectors {
	return script.Connectors{Tools: reg.Tools(), Sources: reg.SourceTypes(), Writes: reg.Writes}
}

// Check compiles and validates a script without deploying it.
func (e *Engine) Check(file, source string) (*script.Program, []kt.Problem, error) {
	p, err := script.Compile(file, source)
	if err != nil {
		return nil, nil, err
	}
	problems := script.Check(p, ScriptConnectors(e.registry))
	if kt.HasErrors(problems) {
		return p, problems, &ValidationError{File: file, Problems: problems}
	}
	return p, problems, nil
}

// checkDeclaration is Check without the analysis's refusals (tests only).
func (e *Engine) checkDeclaration(file, source string) (*script.Program, []kt.Problem, error) {
	p, err := script.Compile(file, source)
	if err != nil {
		return nil, nil, err
	}
	problems := script.Validate(p, e.registry.Tools())
	if kt.HasErrors(problems) {
		return p, problems, &ValidationError{File: file, Problems: problems}
	}
	return p, problems, nil
}

// Deploy validates a script and makes it the workflow's active version.
// name, when set, overrides the declared name. A major version needs the
// choices of DeployOptions: use DeployWith.
//
// Deploy grants what the version uses: its callers run what they deploy
// (keep bench, tests). DeployWith grants only when DeployOptions.Grant says.
func (e *Engine) Deploy(ctx context.Context, file, source, name string, kind kt.DeployKind) (kt.DeployResult, error) {
	return e.DeployWith(ctx, file, source, DeployOptions{Name: name, Kind: kind, Grant: true, grantBySystem: true})
}

// DeployOptions are the choices a deploy carries (SPEC §9, ch 12 §12.6).
type DeployOptions struct {
	// Name overrides the script's declared name. Defaults to the declared one.
	Name string
	// Kind is minor (a repair, the default for an existing workflow) or major.
	Kind kt.DeployKind
	// Reprocess is what a major version does with done items: "none" (keep
	// progress), "all" (start fresh) or "KEY,KEY" (new attempts for these).
	// Required with a major version: intent changed, and keep does not guess.
	Reprocess string
	// AcceptOrphans activates a major version whose item keys change format,
	// after the person has seen which items will be orphaned.
	AcceptOrphans bool
	// FilesRoot, when set, is recorded as the folder the workflow's files
	// connector is rooted at, for keep run and keep serve alike (an
	// absolute path); empty keeps what was recorded.
	FilesRoot string
	// Grant grants what the version uses, with the deploy: the person
	// deploying allows it (keep run, keep deploy --grant).
	Grant bool
	// Test is the workflow's test file (keep test), recorded with the
	// version ("" none): keep deploy reads workflow.test.js beside the
	// script. KeepTest records the active version's instead (a repair
	// keeps the tests it must pass).
	Test     string
	KeepTest bool
	// IfActive, when not 0, deploys only while that version is still the
	// workflow's active one (checked in the deploy's transaction): a
	// repair checked against a version never replaces another one.
	IfActive int64
	// idChanges are the done items, events and inputs that would get other
	// ids on this version (DeployWith replays the active version's done
	// work on it, replay.go): a minor version is refused with them, a
	// major one says how many.
	idChanges []Difference
	// grantBySystem: the grant is the caller's (Deploy: keep bench, tests),
	// not a person's decision, and stays out of the decision log.
	grantBySystem bool
	// unchecked (tests only) deploys a script that the analysis refuses,
	// with the declaration's checks alone, so the run-time checks that
	// stand behind the analysis can be tried.
	unchecked bool
}

// ErrReprocessChoice is returned by a major deploy without a Reprocess choice.
var ErrReprocessChoice = &kt.ActionError{Msg: "a major version changes intent: choose what happens to the items already done — --reprocess=none (keep progress), --reprocess=all (start fresh) or --reprocess=KEY,KEY (new attempts for these items); nothing was deployed"}

// DeployWith validates a script and makes it the workflow's active version,
// applying the rules of a major version (a reprocess choice, consent to
// orphaned items) and of a minor one (item keys stay frozen: ch 12 §12.9).
func (e *Engine) DeployWith(ctx context.Context, file, source string, o DeployOptions) (kt.DeployResult, error) {
	name, kind := o.Name, o.Kind
	check := e.Check
	if o.unchecked {
		check = e.checkDeclaration
	}
	p, problems, err := check(file, source)
	if err != nil {
		return kt.DeployResult{Problems: problems}, err
	}
	if name == "" {
		name = p.Decl.WorkflowName()
	}
	if o.Reprocess != "" && kind != kt.DeployMajor {
		return kt.DeployResult{Problems: problems}, kt.Refuse("--reprocess goes with --major: a minor version keeps all progress; nothing was deployed")
	}
	res := kt.DeployResult{Workflow: name, Problems: problems}
	if o.idChanges, err = e.idChanges(ctx, name, source); err != nil {
		return res, err
	}
	now := e.NowMs()
	err = e.update(ctx, name, func(tx store.Tx) error {
		d := deployment{e: e, ctx: ctx, tx: tx, file: file, source: source, prog: p, o: o, now: now, res: &res}
		return d.write()
	})
	if err != nil {
		var ae *kt.ActionError
		if errors.As(err, &ae) {
			return res, err
		}
		return res, fmt.Errorf("deploy %s: %w", name, err)
	}
	if kind == kt.DeployMajor && !res.Unchanged {
		if res.Reprocessed, err = ReprocessAfterMajor(ctx, e.store, name, o.Reprocess, e.now()); err != nil {
			return res, err
		}
	}
	return res, nil
}

// deployment is one deploy inside its transaction: what each of its
// steps reads, and the result they fill (res).
type deployment struct {
	e            *Engine
	ctx          context.Context
	tx           store.Tx
	file, source string
	prog         *script.Program
	o            DeployOptions
	now          int64
	res          *kt.DeployResult
}

// write records a deploy in tx: the workflow, its new version (or
// nothing new when the script is the active one's and no kind was asked),
// the grants the deploy makes, the events a dropped consumer leaves
// waiting (res.Stranded) and the handlers of the new declaration.
func (d *deployment) write() error {
	e, tx, file, source, p, o, now, res := d.e, d.tx, d.file, d.source, d.prog, d.o, d.now, d.res
	name, kind := res.Workflow, o.Kind
	wf, err := tx.WorkflowGet(name)
	isNew := errors.Is(err, kt.ErrNotFound)
	if kt.IsDamaged(err) {
		// Its recorded files root and policy are damaged (issue 44): this
		// deploy records them afresh, taking nothing of the damaged row.
		wf.FilesRoot, wf.Policy, wf.UpdatedAt = o.FilesRoot, e.policyRecord(), now
		if err = tx.WorkflowPut(wf); err != nil {
			return err
		}
	}
	if err != nil && !isNew {
		return err
	}
	v := kt.Version{Workflow: name, Major: 1, Minor: 0, Script: source, File: file, Test: o.Test, CreatedAt: now}
	if isNew {
		wf = kt.Workflow{Name: name, CreatedAt: now}
	} else {
		cur, err := tx.VersionGet(name, wf.ActiveVersion)
		// A damaged active version (issue 44) is restored by this deploy:
		// a new version from the file, its number after the damaged one's.
		damaged := kt.IsDamaged(err)
		if err != nil && (!damaged || o.KeepTest) {
			return err
		}
		if o.IfActive != 0 && wf.ActiveVersion != o.IfActive {
			return &kt.ActionError{Code: kt.CodeNotApplicable, Msg: fmt.Sprintf("version %s of %s was deployed since the repair was checked against another version; nothing was deployed", cur.Label(), name)}
		}
		if o.KeepTest {
			v.Test = cur.Test
		}
		// A changed test is a new version: the tests a repair must pass
		// are the ones recorded with the version it repairs.
		if !damaged && cur.Script == source && cur.Test == v.Test && kind == "" {
			res.Version, res.Unchanged = cur, true
			if err := d.grant(); err != nil {
				return err
			}
			return e.recordDeployed(tx, wf, o.FilesRoot, res)
		}
		if err := nextVersion(tx, cur, &v, o, res); err != nil {
			return err
		}
		if damaged {
			res.Warnings = append(res.Warnings, fmt.Sprintf("version %s's stored script was damaged storage; version %s replaces it (which topics the damaged one read is not known, so its waiting events were not checked for a consumer)", cur.Label(), v.Label()))
		} else if res.Stranded, err = strandedBy(tx, name, cur, p.Decl, v.Label()); err != nil {
			return err
		}
	}
	if err := tx.VersionInsert(&v); err != nil {
		return err
	}
	wf.ActiveVersion, wf.UpdatedAt = v.ID, now
	if o.FilesRoot != "" {
		wf.FilesRoot = o.FilesRoot
	}
	if pol := e.policyRecord(); pol != "" {
		wf.Policy = pol
	}
	if err := tx.WorkflowPut(wf); err != nil {
		return err
	}
	res.Version, res.FilesRoot = v, wf.FilesRoot
	if err := d.grant(); err != nil {
		return err
	}
	return e.syncHandlers(tx, name, p.Decl, now)
}

// grant grants what the version uses when the deploy says so, and
// tells what still waits for a grant otherwise (DeployResult.Ungranted).
func (d *deployment) grant() error {
	ctx, tx, name, source, o, now, res := d.ctx, d.tx, d.res.Workflow, d.source, d.o, d.now, d.res
	gs, err := tx.GrantList(name)
	if err != nil {
		return err
	}
	var missing []string
	for _, u := range Uses(source) {
		if !GrantedIn(gs, u) {
			missing = append(missing, u)
		}
	}
	res.Unused = Unused(gs, source)
	if o.Grant {
		res.Granted = missing
		if o.grantBySystem {
			return transition.AddGrants(ctx, tx, name, missing, now)
		}
		return transition.GrantAll(ctx, tx, name, missing, now)
	}
	res.Ungranted = missing
	return nil
}

// recordFilesRoot records a new files root for a workflow whose script
// did not change.
// recordDeployed records, for a version deployed again unchanged, the
// folder of its files connector and the policy it is deployed under.
func (e *Engine) recordDeployed(tx store.Tx, wf kt.Workflow, root string, res *kt.DeployResult) error {
	res.FilesRoot = wf.FilesRoot
	pol := e.policyRecord()
	if (root == "" || root == wf.FilesRoot) && (pol == "" || pol == wf.Policy) {
		return nil
	}
	if root != "" {
		wf.FilesRoot = root
	}
	if pol != "" {
		wf.Policy = pol
	}
	wf.UpdatedAt = e.NowMs()
	res.FilesRoot = wf.FilesRoot
	return tx.WorkflowPut(wf)
}

// policyRecord is the policy this engine deploys under, as a workflow
// records it (kt.Workflow.Policy); "" when it was given none.
func (e *Engine) policyRecord() string {
	if !e.hasPolicy {
		return ""
	}
	b, err := json.Marshal(e.policy)
	if err != nil {
		return ""
	}
	return string(b)
}

// nextVersion numbers a new version of a deployed workflow (SPEC §9): a
// minor version is a repair and may not change the format of item keys; a
// major one says what happens to existing items and acknowledges orphans.
func nextVersion(tx store.Tx, cur kt.Version, v *kt.Version, o DeployOptions, res *kt.DeployResult) error {
	w, err := keyFormatWarning(tx, v.Workflow, v.Script)
	if err != nil {
		return err
	}
	ids := ""
	if n := len(o.idChanges); n > 0 {
		ids = fmt.Sprintf("replayed on it, %d piece(s) of done work would get other ids and be done again — %s", n, ListDifferences(o.idChanges))
	}
	if o.Kind != kt.DeployMajor {
		if ids != "" {
			if orph, err := incompleteItems(tx, v.Workflow); err != nil {
				return err
			} else if orph != "" {
				ids += "; " + orph
			}
			return kt.Refuse("a minor version is a repair, and a repair keeps the ids of done work: %s. Nothing was deployed. Keep the expressions that build item ids, messageIds and input ids as they were; if the intent changed, deploy it as a major version (--major --reprocess=…)", ids)
		}
		if w != "" {
			return kt.Refuse("a minor version is a repair, and a repair keeps item ids frozen (ch 12 §12.9): %s. Nothing was deployed. If the intent changed, deploy it as a major version (--major --reprocess=… --accept-orphans)", w)
		}
		v.Major, v.Minor = cur.Major, cur.Minor+1
		return nil
	}
	if o.Reprocess == "" {
		return ErrReprocessChoice
	}
	if err := checkReprocessKeys(tx, v.Workflow, o.Reprocess); err != nil {
		return err
	}
	// A major version that gives done or incomplete work other ids is
	// deployed only with the person's consent (ch 12 §12.6), whether the
	// item keys' format (keyFormatWarning) or the replay found it.
	if (w != "" || ids != "") && !o.AcceptOrphans {
		msg := w
		if ids != "" {
			if msg != "" {
				msg += "; "
			}
			msg += ids
			if w == "" {
				if orph, err := incompleteItems(tx, v.Workflow); err != nil {
					return err
				} else if orph != "" {
					msg += "; " + orph
				}
			}
		}
		return &kt.ActionError{Code: kt.CodeNeedsConsent, Msg: msg + ". Nothing was deployed: to activate it anyway, deploy again with --accept-orphans"}
	}
	v.Major, v.Minor = cur.Major+1, 0
	if w != "" {
		res.Warnings = append(res.Warnings, w)
	}
	if ids != "" {
		res.Warnings = append(res.Warnings, ids)
		if w == "" {
			orph, err := incompleteItems(tx, v.Workflow)
			if err != nil {
				return err
			}
			if orph != "" {
				res.Warnings = append(res.Warnings, orph)
			}
		}
	}
	return nil
}

// incompleteItems names the workflow's task items neither done nor
// skipped: when a version gives items other ids, these are left behind
// (orphaned) — "" when there are none.
func incompleteItems(tx store.Tx, wf string) (string, error) {
	ins, err := tx.InputList(wf)
	if err != nil {
		return "", err
	}
	var keys []string
	for _, in := range ins {
		if in.Kind == kt.KindTask && !itemDone(in.Status) {
			keys = append(keys, in.Key)
		}
	}
	if len(keys) == 0 {
		return "", nil
	}
	more := ""
	if len(keys) > 10 {
		keys, more = keys[:10], ", …"
	}
	return fmt.Sprintf("%d incomplete item(s) no version would touch again would be orphaned (%s%s; see `keep items %s --orphaned`, `keep skip` resolves them)", len(keys), strings.Join(keys, ", "), more, wf), nil
}

// checkReprocessKeys checks a KEY,KEY choice before anything is deployed.
func checkReprocessKeys(tx store.Tx, wf, choice string) error {
	if choice == "none" || choice == "all" {
		return nil
	}
	for _, key := range strings.Split(choice, ",") {
		if _, err := transition.FindItem(tx, wf, strings.TrimSpace(key)); err != nil {
			return kt.Refuse("--reprocess: %v; nothing was deployed", err)
		}
	}
	return nil
}

// syncHandlers makes the handler rows match a declaration: on deploy every
// producer and task is due now and every consumer dirty (SPEC §5); handlers
// that the new version dropped stop being scheduled but keep their state.
func (e *Engine) syncHandlers(tx store.Tx, wf string, d script.Declaration, now int64) error {
	existing, err := tx.HandlerList(wf)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	put := func(name string, typ kt.HandlerType) error {
		seen[name] = true
		h, err := tx.HandlerGet(wf, name)
		if err != nil && !errors.Is(err, kt.ErrNotFound) {
			return err
		}
		h.Workflow, h.Name, h.Type = wf, name, typ
		transition.Touch(&h, now)
		if typ == kt.HandlerConsumer {
			h.Dirty, h.NextRunAt = true, 0
		} else {
			h.NextRunAt = now
		}
		return tx.HandlerPut(h)
	}
	for n := range d.Producers {
		if err := put(n, kt.HandlerProducer); err != nil {
			return err
		}
	}
	for n := range d.Consumers {
		if err := put(n, kt.HandlerConsumer); err != nil {
			return err
		}
	}
	for n := range d.Tasks {
		if err := put(n, kt.HandlerTask); err != nil {
			return err
		}
	}
	for _, h := range existing {
		if !seen[h.Name] {
			h.Dirty, h.Queued, h.NextRunAt, h.WakeAt = false, false, 0, 0
			transition.Touch(&h, now)
			if err := tx.HandlerPut(h); err != nil {
				return err
			}
		}
	}
	return nil
}

// RecoverShared is Recover for a store several nodes share: only the
// identity migration; a run another node is carrying out is not touched.
func (e *Engine) RecoverShared(ctx context.Context) error {
	return e.store.Update(ctx, e.migrateConsumerIdentities)
}

// Recover runs at start-up: every run left active by a dead process is
// marked crashed; the scheduler then recovers each one (SPEC §5).
func (e *Engine) Recover(ctx context.Context) (int, error) {
	n := 0
	err := e.store.Update(ctx, func(tx store.Tx) error {
		runs, err := tx.RunsWithStatus(kt.StatusActive)
		if err != nil {
			return err
		}
		now := e.NowMs()
		for _, r := range runs {
			r.Status, r.UpdatedAt = kt.StatusCrashed, now
			r.ErrorClass, r.ErrorMessage = kt.ClassInternal, "keep stopped while this run was active; it will be recovered"
			if err := transition.PutRun(tx, &r); err != nil {
				return err
			}
			n++
		}
		// Producers that came due while keep was down run now (coalesced: once).
		return e.migrateConsumerIdentities(tx)
	})
	return n, err
}

// migrateConsumerIdentities moves the ledger rows of unfinished consumer
// runs to the identity rule of SPEC §7 (reservation set), so that a run
// written by an older keep finds its own mutation when mutate runs again.
// Rows of finished runs are left alone: no new run can reserve the same
// events at the same attempt. Item-script identities never change. It is
// idempotent, so it runs at every start-up.
func (e *Engine) migrateConsumerIdentities(tx store.Tx) error {
	for _, st := range []kt.MutationStatus{kt.MutationInFlight, kt.MutationNeedsReconcile, kt.MutationIndeterminate, kt.MutationFailed} {
		muts, err := tx.MutationsWithStatus(st)
		if err != nil {
			return err
		}
		for _, m := range muts {
			run, err := tx.RunGet(m.RunID)
			if err != nil || run.HandlerType != kt.HandlerConsumer || run.Status.Finished() {
				continue
			}
			meth, err := e.registry.Method(m.Tool, m.Method)
			if err != nil {
				continue
			}
			var args map[string]any
			if err := decodeStored("params", "mutations", m.ID, m.Params, &args); err != nil {
				return err
			}
			reserved, err := tx.EventsReservedBy(run.ID)
			if err != nil {
				return err
			}
			unit, err := UnitOfWork(tx, run, reserved)
			if err != nil {
				return err
			}
			identity, _ := meth.Split(args)
			subkey, _ := args["subkey"].(string)
			key := Identity{Workflow: m.Workflow, Handler: m.Handler, Tool: m.Tool, Method: m.Method, Params: identity, Subkey: subkey}.ConsumerKey(unit)
			if key == m.IdentityKey {
				continue
			}
			if _, err := tx.MutationByIdentity(key); err == nil {
				continue // already there (cannot happen for one run's unit of work)
			}
			m.IdentityKey = key
			if err := tx.MutationPut(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// canonical renders JSON with sorted keys, so equal values hash equally.
func canonical(v any) string {
	b, _ := json.Marshal(normalize(v))
	return string(b)
}

func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([]any, 0, len(keys))
		for _, k := range keys {
			out = append(out, []any{k, normalize(t[k])})
		}
		return map[string]any{"__sorted": out}
	case []any:
		out := make([]any, len(t))
		for i := range t {
			out[i] = normalize(t[i])
		}
		return out
	}
	return v
}

func hashOf(parts ...any) string {
	s := sha256.Sum256([]byte(canonical(parts)))
	return hex.EncodeToString(s[:])
}

// Identity is what the identity of a mutation (SPEC §7) is made of,
// besides its unit of work: where it is written from and what it writes to.
type Identity struct {
	Workflow, Handler string
	Tool, Method      string
	// Params are the method's identity params (its target).
	Params map[string]any
	Subkey string
}

// ItemKey is the identity of an item script's write: its unit of work is
// the items it belongs to, in their current attempt.
func (id Identity) ItemKey(itemKeys []string, attempt int) string {
	keys := append([]string(nil), itemKeys...)
	sort.Strings(keys)
	ks := make([]any, len(keys))
	for i, k := range keys {
		ks[i] = k
	}
	return hashOf(id.Workflow, id.Handler, ks, attempt, id.Tool, id.Method, id.Params, id.Subkey)
}

// ConsumerKey is the identity of a consumer run's write: its unit of work
// is the run's reservation set (UnitOfWork), not the inputs that caused the
// events — one input can cause many events, and each event's write is its
// own (issue 10: a second event's write was once answered from the first's
// cached result and never sent).
func (id Identity) ConsumerKey(unit []string) string {
	us := make([]any, len(unit))
	for i, u := range unit {
		us[i] = u
	}
	return hashOf("consumer", id.Workflow, id.Handler, us, id.Tool, id.Method, id.Params, id.Subkey)
}

// UnitOfWork is a consumer run's unit of work: the sorted (topic, messageId,
// event attempt) of the events it reserved, or, when it reserved none, the
// id of the first run of its retry chain. Replays of the run keep it; a
// reprocessed event (attempt + 1) makes a new one.
func UnitOfWork(tx store.Tx, run kt.Run, reserved []kt.Event) ([]string, error) {
	if len(reserved) > 0 {
		unit := make([]string, 0, len(reserved))
		for _, ev := range reserved {
			unit = append(unit, fmt.Sprintf("%s\x00%s\x00%d", ev.Topic, ev.MessageID, ev.Attempt))
		}
		sort.Strings(unit)
		return unit, nil
	}
	root := run
	for i := 0; root.RetryOf != "" && i < 100000; i++ {
		prev, err := tx.RunGet(root.RetryOf)
		if err != nil {
			return nil, fmt.Errorf("find the first run of the retry chain of %s: %w", run.ID, err)
		}
		root = prev
	}
	return []string{"run\x00" + root.ID}, nil
}

// PayloadHash hashes the payload params of a mutation.
func PayloadHash(payload map[string]any) string { return hashOf(payload) }

// CallHash hashes everything a person approves (SPEC §13): the tool, the
// method, the target as shown, the identity params and the payload. An
// approval binds this hash, so a repair that keeps the payload but sends it
// elsewhere (another URL, another recipient) must be approved again.
func CallHash(tool, method, target string, identity, payload map[string]any) string {
	return hashOf("call", tool, method, target, identity, payload)
}

// invoke runs one handler phase in the sandbox and reports its duration.
func (e *Engine) invoke(prog *script.Program, inv script.Invocation) (script.Outcome, error) {
	start := time.Now()
	out, err := prog.Invoke(inv)
	if e.observer != nil {
		e.observer.SandboxCall(inv.Phase, time.Since(start))
	}
	return out, err
}

func (e *Engine) runFinished(r *kt.Run) {
	if e.observer != nil {
		e.observer.RunFinished(r.Workflow, r.HandlerType, r.Status, time.Duration(e.NowMs()-r.CreatedAt)*time.Millisecond)
	}
}

// ReprocessAfterMajor applies `keep deploy --major --reprocess=...`: "all"
// starts a new attempt of every item that is not in progress, a list of keys
// starts one for each of them. It returns how many items were reprocessed.
func ReprocessAfterMajor(ctx context.Context, st store.Store, wf, choice string, now time.Time) (int, error) {
	if choice == "" || choice == "none" {
		return 0, nil
	}
	n := 0
	err := st.Update(ctx, func(tx store.Tx) error {
		var items []kt.Input
		if choice == "all" {
			all, err := tx.InputList(wf)
			if err != nil {
				return err
			}
			for _, it := range all {
				if it.Kind == kt.KindTask && it.Status == kt.ItemProcessing {
					continue
				}
				items = append(items, it)
			}
		} else {
			for _, key := range strings.Split(choice, ",") {
				it, err := transition.FindItem(tx, wf, strings.TrimSpace(key))
				if err != nil {
					return err
				}
				items = append(items, it)
			}
		}
		for _, it := range items {
			if _, err := transition.Reprocess(tx, it, now.UnixMilli()); err != nil {
				var ae *kt.ActionError
				if choice == "all" && errors.As(err, &ae) {
					continue // still in progress: left alone
				}
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// KeyPrefixes lists the item key prefixes a script gives withItem
// ("email:"), as script.Analyze reads the ids: the constant text an id
// starts with, up to its first colon.
func KeyPrefixes(source string) []string {
	a, err := script.Analyze(source)
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range a.Items {
		i := strings.Index(e.Prefix, ":")
		if i <= 0 {
			continue
		}
		p := e.Prefix[:i+1]
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// keyFormatWarning compares the item keys of a new major version with the
// existing items (ch 12 §12.6 "ID format change detection", best effort).
func keyFormatWarning(tx store.Tx, wf, source string) (string, error) {
	newPrefixes := KeyPrefixes(source)
	if len(newPrefixes) == 0 {
		return "", nil
	}
	items, err := tx.InputList(wf)
	if err != nil {
		return "", err
	}
	oldCount := map[string]int{}
	var samples []string
	incomplete := 0
	for _, it := range items {
		if it.Kind != kt.KindTask {
			continue
		}
		p := it.Key
		if i := strings.Index(p, ":"); i >= 0 {
			p = p[:i+1]
		}
		oldCount[p]++
		if !itemDone(it.Status) {
			incomplete++
			if len(samples) < 5 {
				samples = append(samples, it.Key)
			}
		}
	}
	for _, p := range newPrefixes {
		if oldCount[p] > 0 {
			return "", nil
		}
	}
	if len(oldCount) == 0 {
		return "", nil
	}
	var old []string
	for p := range oldCount {
		old = append(old, p)
	}
	sort.Strings(old)
	orphans := ""
	if incomplete > 0 {
		orphans = fmt.Sprintf(" (%s%s)", strings.Join(samples, ", "), map[bool]string{true: ", …", false: ""}[incomplete > len(samples)])
	}
	return fmt.Sprintf("item ids change format: existing items use %s, the new version uses %s. Old items will not be matched: their work may be done again under new ids (duplicate writes are possible), and %d incomplete old items will become orphaned%s (see `keep items %s --orphaned`; `keep skip` resolves them)",
		strings.Join(old, ", "), strings.Join(newPrefixes, ", "), incomplete, orphans, wf), nil
}

// QueueAtStart queues a workflow's producers and tasks, unless a run of it
// is open: `keep run FILE` is the development loop, and a producer that is
// not due yet runs at its start all the same (issue 12: a new order dropped
// in showed nothing). It is keep run's own doing, not a person's decision.
func QueueAtStart(ctx context.Context, st store.Store, wf string, now time.Time) (int, error) {
	n := 0
	err := st.Update(ctx, func(tx store.Tx) error {
		if _, err := tx.RunOpen(wf); err == nil {
			return nil
		}
		var err error
		n, err = transition.QueueScheduled(tx, wf, now.UnixMilli())
		return err
	})
	return n, err
}
