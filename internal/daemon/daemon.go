// Package daemon is the one place that wires keep together: the data
// directory, the store, the connectors, the engine and the scheduler.
// Nothing else constructs these.
package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/keep-run/keep/internal/apitype"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"

	"github.com/keep-run/keep/internal/account"
	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/builtin"
	khttp "github.com/keep-run/keep/internal/connector/http"
	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/hooks"
	"github.com/keep-run/keep/internal/intake"
	"github.com/keep-run/keep/internal/maintainer"
	"github.com/keep-run/keep/internal/metrics"
	"github.com/keep-run/keep/internal/netguard"
	"github.com/keep-run/keep/internal/notify"
	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/scheduler"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store/backend"
	"github.com/keep-run/keep/internal/testrun"
	"github.com/keep-run/keep/internal/web"
)

// Options configure a keep process.
type Options struct {
	// DataDir holds the database and, for keep serve, the files root. Defaults to ./keep-data.
	DataDir string
	// ConfigFile is a TOML file with [policy]; empty means built-in defaults.
	ConfigFile string
	// Allow adds hosts to keep.toml's [connectors.http] allow: keep bench
	// allows the sink it starts itself.
	Allow []string
	// FilesRootForAll, when set, roots the files connector of every
	// workflow there, whatever its deploy recorded (keep serve --files-root:
	// the operator's explicit choice).
	FilesRootForAll string
	// Store is the store's URL (backend.Parse); empty is DataDir/keep.db.
	Store string
	// Over, when set, is that store already opened by the caller (the
	// CLI's in-process API, inproc.API): the Keep runs over it, under the
	// engine locks as ever, and leaves it open at Close, so that a CLI
	// command opens the store once (issue 41).
	Over store.Store
	// FilesRoot is the folder of the files connector of workflows that
	// recorded none at deploy. Defaults to DataDir/files.
	FilesRoot string
	// Logger defaults to a text logger on stderr at warn level.
	Logger *slog.Logger
	// Notify receives what a person watching should know (keeptype.Notice).
	Notify func(kt.Notice)
	// PolicyOf, when set, names a workflow whose recorded policy
	// (kt.Workflow.Policy, recorded at its deploy) replaces the config's
	// [policy]: the CLI carries out a decision on it under its own policy.
	PolicyOf string
	// AtDurableStep, when set, is told each durable step the engine
	// reaches (engine.Crash*), as the crash tests' KEEP_TEST_CRASH_AFTER
	// is: tests take a person's decision there.
	AtDurableStep func(step string)
}

// ErrBusy means another keep process owns the data directory's engine.
var ErrBusy = errors.New("another keep process is running workflows on this data directory")

// DBPath returns the default database file of a data directory.
func DBPath(dataDir string) string { return backend.Default(dataDir).Path }

// OpenStore opens the store named by storeURL (the data directory's
// keep.db when empty) without taking the engine lock: what the CLI's reads
// and people's actions use, with or without a running keep serve.
func OpenStore(dataDir, storeURL string) (store.Store, error) {
	l, err := backend.Parse(storeURL, dataDir)
	if err != nil {
		return nil, err
	}
	return l.Open()
}

// Registry returns the connectors keep ships, with files rooted at root.
// The Google connectors have no account here (keep validate, the docs):
// their calls say to connect one.
func Registry(filesRoot string) *connector.Registry {
	cfg, _ := config.Parse("", "")
	return RegistryOf(cfg, filesRoot)
}

// RegistryOf is Registry with the connectors cfg declares (custom ones,
// the sql databases): what keep validate and keep connectors know.
func RegistryOf(cfg config.Config, filesRoot string) *connector.Registry {
	set, err := builtin.Build(&connector.Host{Config: cfg, Guard: netguard.New(khttp.Allow(cfg))})
	if err != nil {
		panic(err) // only a live host opens anything that can fail
	}
	defer set.Close()
	return set.Registry(filesRoot)
}

// Accounts opens the connected accounts of a store, sealed with the data
// directory's secret key (or KEEP_SECRET_KEY).
func Accounts(dataDir string, st store.Store) (*account.Accounts, error) {
	box, err := account.LoadKey(dataDir)
	if err != nil {
		return nil, err
	}
	return &account.Accounts{Store: st, Box: box}, nil
}

// learnSecrets tells package redact every value keep knows to be secret
// before anything runs: the named secrets, the configuration's keys (the
// Google client secret, the model's API key). Account tokens are learned
// as they are handed out (account.Source).
func learnSecrets(cfg config.Config, secrets *account.Secrets, logger *slog.Logger) {
	redact.Learn(append(cfg.Secrets(), os.Getenv(cfg.LLM.APIKeyEnv))...)
	if err := secrets.LearnAll(context.Background()); err != nil {
		logger.Warn("the stored secrets could not be opened; calls that name them will fail", "err", err)
	}
}

// Keep is a running engine over a data directory.
type Keep struct {
	// Sandbox is this keep's sandbox runtime: its workers, pools and
	// counters, stopped by Close and by a signal (issue 41).
	Sandbox *script.Runtime
	Store   store.Store
	Engine  *engine.Engine
	// Webhooks carries out requests to the workflows' webhooks (the
	// listener's hooks.Deliverer) and takes held deliveries (TakeHeld).
	Webhooks  *intake.Webhooks
	Scheduler *scheduler.Scheduler
	Policy    config.Policy
	// Retention is keep.toml's [retention]: keep serve prunes by it
	// (Prune), and so does POST /api/v1/prune.
	Retention config.Retention
	Hub       *api.Hub
	Metrics   *metrics.Metrics
	DataDir   string
	// Instance names this process; keep serve writes it beside its address
	// (AddrFile), and the CLI checks it before sending anything (a stale
	// address may belong to another program, or to another data directory's
	// keep serve, by now).
	Instance string
	// apiSecret is the data directory's instance secret (APISecretFile).
	apiSecret string
	lock      *os.File
	release   func() // the store's own engine lock
	ownStore  bool   // Open opened Store (not Options.Over): Close closes it
	disown    func() // gives keep's files back to the checks of other keeps of this process (ownfiles)
	shared    bool   // several nodes share the store (leases)
	// stopListening ends the wake-ups by other nodes' commits.
	stopListening func()
	// accounts runs the page's Connect Google.
	accounts *pageAccounts
	// connectors are the connectors built for this process; closing
	// them closes what they opened (the sql pools).
	connectors *builtin.Set
	// notifier tells people about blocked runs ([notify]); nil: none.
	notifier *notify.Notifier
	notified chan struct{}
	// maintainer repairs failed:logic runs ([llm], [maintainer]); nil: none.
	maintainer *maintainer.Maintainer
	maintain   chan struct{}
	// log is keep's logger (masked).
	log *slog.Logger
	// tracing sends the runs' spans to keep.toml's [otel] collector; nil: none.
	tracing *tracing
}

// recordedTests runs a workflow's recorded tests on a repair, with the
// connectors and policy of keep's config.
func recordedTests(cfgFile string) func(ctx context.Context, test, file, src string) (string, error) {
	return func(ctx context.Context, test, file, src string) (string, error) {
		testFile := strings.TrimSuffix(file, filepath.Ext(file)) + ".test.js"
		res, err := testrun.RunSource(ctx, testrun.Source{File: testFile, Text: test}, testrun.Source{File: file, Text: src}, testrun.Options{Config: cfgFile})
		if err != nil {
			return "", err
		}
		return res.FirstFailure(), nil
	}
}

// policyOf replaces pol by the policy workflow wf was deployed under, when
// it recorded one ("" wf: nothing to do).
func policyOf(st store.Store, wf string, pol *config.Policy) error {
	if wf == "" {
		return nil
	}
	var rec string
	err := st.View(context.Background(), func(tx store.Tx) error {
		w, err := tx.WorkflowGet(wf)
		rec = w.Policy
		return err
	})
	if err != nil || rec == "" {
		return err
	}
	p, err := engine.RecordedPolicy(wf, rec)
	if err != nil {
		return err
	}
	*pol = p
	return nil
}

// atStep calls both hooks a durable step is told to; nil when neither is set.
func atStep(hooks ...func(string)) func(string) {
	var set []func(string)
	for _, h := range hooks {
		if h != nil {
			set = append(set, h)
		}
	}
	if len(set) == 0 {
		return nil
	}
	return func(step string) {
		for _, h := range set {
			h(step)
		}
	}
}

// crashAt is the crash tests' hook: with KEEP_TEST_CRASH_AFTER set to a
// durable step (engine.Crash*), the process exits right after that step, as
// if it had been killed there. nil when unset.
func crashAt(step string) func(string) {
	stopAt := os.Getenv("KEEP_TEST_STOP_AT")
	if step == "" && stopAt == "" {
		return nil
	}
	var stopped atomic.Bool
	return func(reached string) {
		if reached == step {
			fmt.Fprintf(os.Stderr, "keep: test crash point %s reached, exiting\n", reached)
			os.Exit(137)
		}
		// KEEP_TEST_STOP_AT: the process stops itself (SIGSTOP) the first
		// time it reaches the step, as a node paused by its machine would;
		// the test continues it (SIGCONT) when it likes.
		if reached == stopAt && stopped.CompareAndSwap(false, true) {
			fmt.Fprintf(os.Stderr, "keep: test stop point %s reached, stopping\n", reached)
			// SIGSTOP stops the threads a moment after kill returns; this
			// goroutine must not run on meanwhile: it waits for SIGCONT.
			cont := make(chan os.Signal, 1)
			signal.Notify(cont, syscall.SIGCONT)
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			<-cont
			signal.Stop(cont)
			fmt.Fprintf(os.Stderr, "keep: continued after the test stop point %s\n", reached)
		}
	}
}

// Notify sends the notices of [notify] until ctx ends (keep serve): at
// once when a workflow changes, and every few seconds, so that a channel
// that failed is tried again.
func (k *Keep) Notify(ctx context.Context) {
	if k.notifier != nil {
		k.notifier.Run(ctx, 5*time.Second, k.notified)
	}
}

// Maintain repairs failed:logic runs until ctx ends (keep serve, with [llm]).
func (k *Keep) Maintain(ctx context.Context) {
	if k.maintainer != nil {
		k.maintainer.Run(ctx, 5*time.Second, k.maintain)
	}
}

// TakeHeld takes the held webhook deliveries whose reason is gone (issue
// 40: a grant given, a secret set, a version deployed, by whichever
// process) until ctx ends (keep serve): at once and each second. A take
// is settled only while its delivery is still held, so nodes that share a
// store take each once.
func (k *Keep) TakeHeld(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if err := k.Webhooks.TakeAllHeld(ctx); err != nil && ctx.Err() == nil {
			k.log.Warn("take held webhook deliveries", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Prune prunes finished work's history by [retention] until ctx ends
// (keep serve): a first pass a minute after the start (or after the
// interval, when that is shorter), then every interval. Each pass deletes
// in small transactions (engine.Prune), so runs keep flowing; a pass that
// fails is logged and tried again at the next interval.
func (k *Keep) Prune(ctx context.Context) {
	p := engine.RetentionOf(k.Retention)
	if p.Horizon <= 0 {
		return
	}
	wait := time.Minute
	if i := k.Retention.Interval; i > 0 && i < wait {
		wait = i
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if wait = k.Retention.Interval; wait <= 0 {
			wait = time.Hour
		}
		rep, err := k.Engine.Prune(ctx, p, false)
		if err != nil {
			if ctx.Err() == nil {
				k.log.Warn("prune history", "error", err)
			}
			continue
		}
		args := []any{"freed_bytes", rep.Freed}
		for _, c := range rep.Kinds {
			args = append(args, c.Kind, c.Rows)
		}
		k.log.Info("pruned history past the retention", args...)
	}
}

// SetPageURL is where notices link to, unless [notify] page_url says.
func (k *Keep) SetPageURL(u string) {
	if k.notifier != nil && k.notifier.PageURL == "" {
		k.notifier.PageURL = u
	}
}

// Changed tells the scheduler and open pages of a person's action on wf
// ("" when it is not one workflow's): the scheduler steps wf at once,
// without a pass over the store (issue 43: a run-now's producer starts
// after the run-now's commit, not after a read of every workflow's work).
func (k *Keep) Changed(wf string) {
	k.Scheduler.Changed(wf)
	k.Hub.Publish(wf)
}

// HTTPHandler serves the API, the pages, live updates and metrics, all
// behind one guard (the instance secret or the token for the API's state
// changes, CSRF for the page's, security headers).
func (k *Keep) HTTPHandler(token string) http.Handler {
	return k.HTTPHandlerWith(HTTPOptions{Token: token})
}

// HTTPOptions choose what keep serve's address serves.
type HTTPOptions struct {
	// Token is keep serve's --token ("" for none).
	Token string
	// Pprof serves Go's profiles under /debug/pprof/ (keep serve --pprof),
	// to whoever proves who they are (ProfilesPath).
	Pprof bool
	// WebhooksURL is where keep serve --webhooks-addr serves the webhooks
	// ("http://ADDR"; "" for nowhere): the API shows each webhook's URL.
	WebhooksURL string
}

// WebhooksServer serves the webhooks (POST /hooks/{wf}/{name}) and
// nothing else, on an address of their own (keep serve --webhooks-addr),
// within the listener's bounds (hooks.Server): no API route and no page is
// reachable through it, and the API's guard is not in its path — each
// webhook is verified as its script declares.
func (k *Keep) WebhooksServer() *http.Server {
	return hooks.Server(k.Webhooks, k.log)
}

// ServeWebhooks serves the webhooks on ln (WebhooksServer, at most
// hooks.MaxConns connections at once) until the server it returns is closed.
func (k *Keep) ServeWebhooks(ln net.Listener) *http.Server {
	srv := k.WebhooksServer()
	go hooks.Serve(srv, ln)
	return srv
}

// ProfilesPath is where keep serve --pprof serves Go's profiles.
const ProfilesPath = "/debug/pprof/"

// HTTPHandlerWith is HTTPHandler with the options keep serve was given.
func (k *Keep) HTTPHandlerWith(o HTTPOptions) http.Handler {
	token := o.Token
	guard := api.NewGuard(token, k.apiSecret)
	mux := http.NewServeMux()
	if o.Pprof {
		mux.Handle(ProfilesPath, profiles())
	}
	apiHandler := (&api.Server{Store: k.Store, Engine: k.Engine, Changed: k.Changed, Problem: k.Scheduler.Problem, WebhooksURL: o.WebhooksURL, Retention: engine.RetentionOf(k.Retention)}).Handler()
	mux.Handle("/api/", apiHandler)
	mux.HandleFunc("GET "+apitype.InstancePath, func(w http.ResponseWriter, r *http.Request) {
		api.JSON(w, http.StatusOK, map[string]string{"instance": k.Instance})
	})
	mux.Handle("GET /events", k.Hub)
	mux.Handle("GET /metrics", k.Metrics.Handler())
	page := web.New(guard, apiHandler, k.Changed)
	page.Problem = k.Scheduler.Problem
	page.Accounts = k.accounts
	mux.Handle("/", page.Handler())
	return guard.Wrap(mux, "/login")
}

// API is keep's API on this Keep's store and engine for a caller in this
// process, without keep serve's guard (api.InProcess): keep run reads
// what it prints through it, as every other command reads through the API.
func (k *Keep) API() http.Handler {
	return api.InProcess((&api.Server{Store: k.Store, Engine: k.Engine, Changed: k.Changed, Problem: k.Scheduler.Problem, Retention: engine.RetentionOf(k.Retention)}).Handler())
}

// AddrFile is where keep serve writes the address of its API and its
// Instance, so the CLI beside it can use the API.
func AddrFile(dataDir string) string { return filepath.Join(dataDir, "serve.addr") }

// WriteAddr records where this keep serves, readable by its owner only.
func (k *Keep) WriteAddr(addr string) error {
	return writeWhole(AddrFile(k.DataDir), []byte(addr+" "+k.Instance+"\n"), 0o600)
}

// ReadAddr reads the address and instance a keep serve recorded.
func ReadAddr(dataDir string) (addr, instance string, err error) {
	b, err := os.ReadFile(AddrFile(dataDir))
	if err != nil {
		return "", "", err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return "", "", fmt.Errorf("%s is not an address and an instance id", AddrFile(dataDir))
	}
	return f[0], f[1], nil
}

func newInstanceID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Recover marks runs left active by a dead process as crashed.
//
// On a shared store (several nodes) nothing is marked crashed at start: an
// active run may be another node's, and the lease's new owner recovers a
// dead node's run when it takes the workflow over.
func (k *Keep) Recover(ctx context.Context) (int, error) {
	if k.shared {
		return 0, k.Engine.RecoverShared(ctx)
	}
	return k.Engine.Recover(ctx)
}

// flockSoon takes the engine lock, trying for a moment: a process that forks
// (any exec from this one, or a test's) briefly holds a copy of the lock's
// descriptor between fork and exec, so a lock just released can look taken.
// Another keep engine holds it for good and is still refused.
func flockSoon(f *os.File) error {
	var err error
	for i := 0; i < 10; i++ {
		if err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// HoldStore opens the store at loc and takes its engine lock (and the
// data directory's), for a command that must not run beside an engine
// (keep migrate reads a consistent source). release frees the locks.
func HoldStore(dataDir string, loc backend.Location) (store.Store, func(), error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dataDir, "engine.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, nil, err
	}
	if err := flockSoon(lock); err != nil {
		lock.Close()
		return nil, nil, fmt.Errorf("%w (%s); stop it first", ErrBusy, dataDir)
	}
	st, err := loc.Open()
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	release, err := lockStore(loc, st, dataDir)
	if err != nil {
		st.Close()
		lock.Close()
		return nil, nil, err
	}
	return st, func() { release(); lock.Close() }, nil
}

// lockStore takes the store's own engine lock, beside the data
// directory's: engine.lock can be deleted (then a second engine would take
// a new one and run the same workflows), keep.db cannot without losing the
// data (SQLite's own locks are fcntl locks, which flock does not touch); a
// PostgreSQL database is shared by machines that share no directory.
func lockStore(loc backend.Location, st store.Store, dataDir string) (func(), error) {
	if pg, ok := st.(interface {
		LockEngine(context.Context) (func(), error)
	}); ok {
		release, err := pg.LockEngine(context.Background())
		if err != nil {
			return nil, fmt.Errorf("%w (%s: %v); stop it, or use `keep deploy` and the other commands, which work beside it", ErrBusy, loc.Show(), err)
		}
		return release, nil
	}
	dbLock, err := os.OpenFile(loc.Path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	if err := flockSoon(dbLock); err != nil {
		dbLock.Close()
		return nil, fmt.Errorf("%w (%s holds keep.db); stop it, or use `keep deploy` and the other commands, which work beside it", ErrBusy, dataDir)
	}
	return func() { dbLock.Close() }, nil
}

// Close sends the traces still queued and releases the store and the lock.
func (k *Keep) Close() error {
	k.tracing.stop()
	if k.stopListening != nil {
		k.stopListening()
	}
	if k.Engine == nil || k.Engine.CallsInFlight() == 0 {
		// A call keep run gave up on (--timeout) still holds its
		// connector: a pool's Close would wait for it. The process's exit
		// ends it instead.
		k.connectors.Close()
	}
	k.release()
	if k.Sandbox != nil {
		k.Sandbox.Close()
	}
	var err error
	if k.ownStore {
		err = k.Store.Close()
	}
	k.lock.Close()
	if k.disown != nil {
		k.disown()
	}
	return err
}

// profiles serves net/http/pprof's pages to a request that carries the
// token or the data directory's instance secret (or a page session of a
// keep serve with a token), and to nothing else, even on a tokenless keep
// serve that lets anyone on this machine read its page: a profile shows
// keep's command line, and a goroutine dump shows what each run is doing.
func profiles() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(ProfilesPath, pprof.Index)
	mux.HandleFunc(ProfilesPath+"cmdline", pprof.Cmdline)
	mux.HandleFunc(ProfilesPath+"profile", pprof.Profile)
	mux.HandleFunc(ProfilesPath+"symbol", pprof.Symbol)
	mux.HandleFunc(ProfilesPath+"trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := api.AuthOf(r); a != api.AuthToken && a != api.AuthSecret && a != api.AuthSession {
			w.Header().Set("WWW-Authenticate", `Bearer realm="keep"`)
			api.Error(w, http.StatusUnauthorized, "unauthorized", "keep's profiles need proof of who you are: send Authorization: Bearer <keep serve's --token>, or the instance secret of its data directory (DATA/"+api.APISecretName+"), e.g. curl -H \"Authorization: Bearer $(cat DATA/"+api.APISecretName+")\" ADDR"+ProfilesPath+"profile?seconds=30 > cpu.pprof")
			return
		}
		// Profiles are not pages: Go's own headers, not the page's CSP.
		w.Header().Del("Content-Security-Policy")
		mux.ServeHTTP(w, r)
	})
}
