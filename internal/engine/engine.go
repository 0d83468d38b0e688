// Package engine is keep's run state machine: producer and consumer runs,
// their phases and statuses, commit, mutation execution with the ledger,
// reconciliation, the failure taxonomy with retries, start-up recovery, and
// the judging of a version a deploy calls (Check, IDChanges, Update);
// deploy itself, a person's act, is control's. Every state transition is
// one store transaction.
package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
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

// Now is the engine's clock (Options.Now): a deploy dates its version,
// its handler rows and its grants by it, as the engine dates its runs.
func (e *Engine) Now() time.Time { return e.now() }

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

// Update runs fn in one transaction under the store's writers' lock and
// then wakes whoever waits on wf's changes (Options.OnChange): a deploy
// writes its version this way, as the engine's own steps do (update).
func (e *Engine) Update(ctx context.Context, wf string, fn func(store.Tx) error) error {
	return e.update(ctx, wf, fn)
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

// CheckDeclaration is Check without the analysis's refusals: the
// declaration's checks alone. For tests only (control.DeployUnchecked),
// so the run-time checks that stand behind the analysis can be tried.
func (e *Engine) CheckDeclaration(file, source string) (*script.Program, []kt.Problem, error) {
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

// PolicyRecord is the policy this engine deploys under, as a workflow
// records it (kt.Workflow.Policy); "" when it was given none. A deploy
// records it with the version; the engine reads it back (policyFor).
func (e *Engine) PolicyRecord() string {
	if !e.hasPolicy {
		return ""
	}
	b, err := json.Marshal(e.policy)
	if err != nil {
		return ""
	}
	return string(b)
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
