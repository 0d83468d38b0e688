package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/keep-run/keep/internal/account"
	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/clock"
	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/builtin"
	"github.com/keep-run/keep/internal/connector/email"
	"github.com/keep-run/keep/internal/connector/google"
	khttp "github.com/keep-run/keep/internal/connector/http"
	"github.com/keep-run/keep/internal/connector/slackconn"
	"github.com/keep-run/keep/internal/connector/sqlconn"
	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/intake"
	"github.com/keep-run/keep/internal/maintainer"
	"github.com/keep-run/keep/internal/metrics"
	"github.com/keep-run/keep/internal/netguard"
	"github.com/keep-run/keep/internal/notify"
	"github.com/keep-run/keep/internal/ownfiles"
	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/scheduler"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/backend"
	"github.com/keep-run/keep/internal/testrun"
)

// Open takes the engine lock of the data directory and wires an engine:
// the lock, the store, the connectors, then the engine and the scheduler
// over them. What it opened is closed again when a later step fails.
func Open(o Options) (k *Keep, err error) {
	if o.DataDir == "" {
		o.DataDir = "keep-data"
	}
	cfg, err := config.Load(o.ConfigFile)
	if err != nil {
		return nil, err
	}
	var opened undoList
	defer func() {
		if err != nil {
			opened.undo()
		}
	}()
	lock, apiSecret, tightened, err := lockDataDir(o.DataDir)
	if err != nil {
		return nil, err
	}
	opened.add(func() { lock.Close() })
	disown, err := registerOwnFiles(o, cfg)
	if err != nil {
		return nil, err
	}
	opened.add(disown)
	st, release, shared, err := openOwnStore(o, &cfg)
	if err != nil {
		return nil, err
	}
	opened.add(release)
	if o.Over == nil {
		opened.add(func() { st.Close() })
	}
	if shared {
		// Before anything is stamped: this node's time is the database's
		// (every node compares by it), whatever its own wall clock says.
		if err = scheduler.FollowStoreClock(context.Background(), st); err != nil {
			return nil, err
		}
	}
	if cfg.Policy.Sandbox != "" {
		// The process's choice, as its compiled interpreter is one.
		if err = script.SetSandbox(cfg.Policy.Sandbox); err != nil {
			return nil, fmt.Errorf("[policy] %w", err)
		}
	}
	accts, err := Accounts(o.DataDir, st)
	if err != nil {
		return nil, err
	}
	host := &connector.Host{Config: cfg, Accounts: accts, Guard: netguard.New(append(khttp.Allow(cfg), o.Allow...)), Live: true, StoreURL: postgresStore(o)}
	conns, err := builtin.Build(host)
	if err != nil {
		return nil, err
	}
	opened.add(func() { conns.Close() })
	perWorkflow, err := filesRoots(&o, conns)
	if err != nil {
		return nil, err
	}
	logger := maskedLogger(o.Logger)
	if len(tightened) > 0 {
		logger.Warn("keep's data directory was open to others on this machine; made it keep's alone", "changed", strings.Join(tightened, ", "))
	}
	if clock.TestBuild {
		logger.Warn("this keep is a test build (-tags keeptestclock): its wall clock is stepped by the file KEEP_TEST_CLOCK_FILE names; never run it in production")
	}
	k = newKeep(cfg, st, host, conns, logger)
	k.DataDir, k.lock, k.release, k.apiSecret, k.shared, k.disown, k.ownStore = o.DataDir, lock, release, apiSecret, shared, disown, o.Over == nil
	if err = k.wireEngine(o, cfg, accts, perWorkflow, logger); err != nil {
		return nil, err
	}
	k.wireScheduler(cfg, logger)
	return k, nil
}

// newSandbox is a keep's own sandbox runtime: two keeps in one process
// share no worker, pool, spare or stop (issue 41).
func newSandbox(pol config.Policy) *script.Runtime {
	rt := script.NewRuntime()
	rt.SetIdleWorkers(pol.SandboxWorkers)
	return rt
}

// undoList closes what Open opened, the last first.
type undoList []func()

func (u *undoList) add(f func()) { *u = append(*u, f) }

func (u undoList) undo() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
}

// lockDataDir makes the data directory (0700, its files 0600: an existing
// one with looser modes is tightened, and tightened says what changed),
// takes its engine lock (ErrBusy while another keep process holds it) and
// reads its instance secret.
func lockDataDir(dataDir string) (lock *os.File, apiSecret string, tightened []string, err error) {
	if tightened, err = ownfiles.Tighten(dataDir); err != nil {
		return nil, "", nil, err
	}
	lock, err = os.OpenFile(filepath.Join(dataDir, "engine.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, "", nil, fmt.Errorf("open the engine lock in %s: %w", dataDir, err)
	}
	if err := flockSoon(lock); err != nil {
		lock.Close()
		return nil, "", nil, fmt.Errorf("%w (%s); stop it, or use `keep deploy` and the other commands, which work beside it", ErrBusy, dataDir)
	}
	apiSecret, err = loadAPISecret(dataDir)
	if err != nil {
		lock.Close()
		return nil, "", nil, err
	}
	return lock, apiSecret, tightened, nil
}

// registerOwnFiles makes keep's own files out of every script's reach
// (package ownfiles): the data directory, every keep.toml keep reads
// (--config, the recorded one, the one of the folder keep started in,
// which it would read at its next start), the files keep.toml names that
// keep reads (ca_file), keep's own program and the SQLite store's files.
func registerOwnFiles(o Options, cfg config.Config) (release func(), err error) {
	configs := []string{ConfigPath(o.DataDir), "keep.toml"}
	if o.ConfigFile != "" {
		configs = append(configs, o.ConfigFile)
	}
	h := ownfiles.House{DataDir: o.DataDir, Configs: configs, Named: cfg.Files()}
	// keep's own program: keep starts every sandbox worker from it, by its
	// path (os.Executable), and a person starts keep from it again.
	if exe, err := os.Executable(); err == nil {
		h.Program = exe
	}
	if loc, err := backend.Parse(o.Store, o.DataDir); err == nil && loc.Kind == backend.SQLite {
		h.Store = loc.Path
	}
	return ownfiles.Register(h)
}

// openOwnStore opens the store the engine runs on (o.Over when the caller
// opened it already), refusing one a sql
// connector also names, and puts the recorded policy of o.PolicyOf in
// cfg. On PostgreSQL several nodes share the store (shared), each stepping
// the workflows it holds the lease of; SQLite has one engine, which holds
// keep.db itself (release lets it go).
func openOwnStore(o Options, cfg *config.Config) (st store.Store, release func(), shared bool, err error) {
	loc, err := backend.Parse(o.Store, o.DataDir)
	if err != nil {
		return nil, nil, false, err
	}
	storePath, storeURL := loc.Path, ""
	if loc.Kind == backend.Postgres {
		storePath, storeURL = "", loc.URL
	}
	if err := sqlconn.RefuseKeepsStore(sqlconn.Databases(*cfg), storePath, storeURL); err != nil {
		return nil, nil, false, err
	}
	closeOwn := func() {}
	if st = o.Over; st == nil {
		if st, err = loc.Open(); err != nil {
			return nil, nil, false, err
		}
		closeOwn = func() { st.Close() }
	}
	if err := policyOf(st, o.PolicyOf, &cfg.Policy); err != nil {
		closeOwn()
		return nil, nil, false, err
	}
	shared, release = loc.Kind == backend.Postgres, func() {}
	if !shared {
		if release, err = lockStore(loc, st, o.DataDir); err != nil {
			closeOwn()
			return nil, nil, false, err
		}
	}
	return st, release, shared, nil
}

// postgresStore is keep's store URL when it is PostgreSQL, else "".
func postgresStore(o Options) string {
	if loc, err := backend.Parse(o.Store, o.DataDir); err == nil && loc.Kind == backend.Postgres {
		return loc.URL
	}
	return ""
}

// filesRoots settles the files roots: keep serve --files-root roots every
// workflow there (no registry per workflow), else each workflow's recorded
// root, and o.FilesRoot (DataDir/files by default) for those without one.
func filesRoots(o *Options, conns *builtin.Set) (perWorkflow func(string) *connector.Registry, err error) {
	perWorkflow = conns.Registry
	if o.FilesRootForAll != "" {
		o.FilesRoot, perWorkflow = o.FilesRootForAll, nil
	}
	if o.FilesRoot == "" {
		o.FilesRoot = filepath.Join(o.DataDir, ownfiles.ScriptsFolder)
		if err := os.MkdirAll(o.FilesRoot, 0o755); err != nil {
			return nil, err
		}
	}
	return perWorkflow, nil
}

// maskedLogger is logger (a text logger on stderr at warn level when nil)
// with every line masked like everything else keep shows.
func maskedLogger(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(redact.Logger(logger.Handler()))
}

// newKeep is the Keep over an open store, before its engine: notices,
// the page's accounts (the host's), the hub and the metrics.
func newKeep(cfg config.Config, st store.Store, host *connector.Host, conns *builtin.Set, logger *slog.Logger) *Keep {
	slackBot := slackconn.Bot(cfg.Connectors[slackconn.Provider], host)
	k := &Keep{notifier: notify.New(st, cfg.Notify, notify.Senders{Mail: email.ConfigOf(cfg), Slack: slackBot.Notify, Guard: host.Guard}, logger), notified: make(chan struct{}, 1), maintain: make(chan struct{}, 1), connectors: conns,
		accounts: &pageAccounts{cfg: config.Get[google.Config](cfg, google.Provider), accts: host.Accounts, st: st, flows: map[string]pendingFlow{}},
		Sandbox:  newSandbox(cfg.Policy), Store: st, Policy: cfg.Policy, Retention: cfg.Retention, Hub: api.NewHub(), Metrics: metrics.New(st), Instance: newInstanceID(), log: logger}
	if k.notifier != nil {
		k.notifier.Now = clock.Now // keep's time, as every stamp it compares with (design.md, "Time")
	}
	k.Metrics.CounterFunc("keep_sandbox_vms_created_total", "JavaScript VMs created (each serves many handler calls).", func() float64 { c, _ := k.Sandbox.VMStats(); return float64(c) })
	k.Metrics.CounterFunc("keep_sandbox_vms_discarded_total", "VMs closed after a call that did not end cleanly (a throw, a timeout, an abort).", func() float64 { _, d := k.Sandbox.VMStats(); return float64(d) })
	return k
}

// wireEngine builds the engine (and the Maintainer, when enabled): its
// commits wake the scheduler, the open pages, the notifier and the
// Maintainer. The secrets are learned before anything runs; the spans go
// to keep.toml's [otel] collector when it names one.
func (k *Keep) wireEngine(o Options, cfg config.Config, accts *account.Accounts, perWorkflow func(string) *connector.Registry, logger *slog.Logger) error {
	secrets := &account.Secrets{Store: k.Store, Box: accts.Box}
	learnSecrets(cfg, secrets, logger)
	var err error
	// keep.toml's [otel] headers are keep's own export to the person's
	// collector, no workflow's call: not scoped to hosts (issue 38 #4 is
	// about what scripts send).
	open := func(name, _ string) (string, error) { return secrets.Get(context.Background(), name) }
	if k.tracing, err = startTracing(cfg.OTel, k.Instance, open, logger); err != nil {
		return err
	}
	k.Engine = engine.New(engine.Options{Sandbox: k.Sandbox, Store: k.Store, Registry: k.connectors.Registry(o.FilesRoot), RegistryFor: perWorkflow, Policy: &cfg.Policy, Logger: logger,
		AtDurableStep: atStep(o.AtDurableStep, crashAt(os.Getenv("KEEP_TEST_CRASH_AFTER"))), Observer: k.Metrics, Notify: o.Notify, Secret: secrets.Get, Tracer: k.tracing.tracer(),
		OnChange: func(wf string) {
			k.Scheduler.Changed(wf)
			k.Hub.Publish(wf)
			select {
			case k.notified <- struct{}{}:
			default:
			}
			select {
			case k.maintain <- struct{}{}:
			default:
			}
		}})
	k.Webhooks = intake.NewWebhooks(k.Engine)
	if cfg.Maintainer.Enabled {
		k.maintainer = &maintainer.Maintainer{Store: k.Store, Engine: k.Engine, Registry: RegistryOf(cfg, "."), Model: maintainer.NewModel(cfg.LLM),
			Config: cfg.Maintainer, Now: clock.Now, Log: logger, Tests: recordedTests(o.ConfigFile), TestFaults: testrun.Faults()}
	}
	return nil
}

// wireScheduler builds the scheduler (a node of its own on a shared
// store), wakes it on other nodes' commits when the store tells of them,
// and gives the Maintainer its leases.
func (k *Keep) wireScheduler(cfg config.Config, logger *slog.Logger) {
	node := ""
	if k.shared {
		node = k.Instance
	}
	sched := scheduler.New(scheduler.Options{Engine: k.Engine, Logger: logger, Workers: cfg.Policy.Workers, Node: node, LeaseTTL: cfg.Policy.LeaseTTL})
	if l, ok := k.Store.(interface {
		ListenByKind(ctx context.Context, changed, stepped func())
	}); ok {
		// Other nodes' commits (a decision taken on another node, new
		// work) wake this one at once, and its open pages; their steps'
		// commits only its pages (the lease holder steps on).
		lctx, cancel := context.WithCancel(context.Background())
		k.stopListening = cancel
		go l.ListenByKind(lctx, func() {
			sched.Wake()
			k.Hub.Publish("")
		}, func() { k.Hub.Publish("") })
	}
	k.Scheduler = sched
	if k.maintainer != nil {
		k.maintainer.Lease = sched.WithLease
		k.Metrics.CounterFunc("keep_maintainer_waits_total", "Times the Maintainer found a failed run's workflow taken (another node repairs it, or a step ran here) and left it for later.", func() float64 { return float64(k.maintainer.Waits()) })
	}
}
