// Package inproc is the CLI's in-process side: what a command uses when
// no keep serve answers for the data directory — keep's API in the CLI's
// process on the store it opens once (API, and the engine that carries a
// decision out over that store), the store for the commands that need it
// by nature (Direct, Migrate), and keep's code run without a server
// (Validate, Types, Plan, …). The wiring keep serve and keep run own is
// package daemon's (docs/design.md, "The daemon split (issue 41)").
package inproc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"

	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/scheduler"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/backend"
)

// API is keep's API served inside the CLI's own process, on the data
// directory's store, when no keep serve answers for it: the CLI then has
// one path for every command (package apiclient, through a transport that
// calls Handler), whether keep serve runs or not. It takes no engine lock
// (a keep run beside it keeps its engine): its actions are written by
// control.Control as keep serve's are, and Changed lists the workflows they
// touched, which the CLI then carries out with an engine of its own.
//
// Why in process and not a unix socket: nothing but this process can
// reach a handler it calls itself, so there is no address to guard, no
// file to clean up after a kill -9, and no second process to start.
type API struct {
	Handler http.Handler
	Store   store.Store
	opts    APIOptions
	mu      sync.Mutex
	changed []string
}

// APIOptions configure a API.
type APIOptions struct {
	DataDir, Store string
	// ConfigFile is the config whose connectors a deploy validates
	// against and a repair approved is deployed with ("" for none).
	ConfigFile string
	// FilesRoot roots the files connector of what is validated.
	FilesRoot string
	// MustExist refuses a data directory with no store yet (reads and
	// actions) instead of creating one (deploy).
	MustExist bool
	// Reads serves a command that only reads: on a data directory that
	// cannot be written the store is opened for reads only (its actions
	// then fail saying so).
	Reads bool
}

// OpenAPI opens the store of a data directory and serves keep's API
// on it in this process.
func OpenAPI(o APIOptions) (*API, error) {
	cfg, err := config.Load(o.ConfigFile)
	if err != nil {
		return nil, err
	}
	loc, err := backend.Parse(o.Store, o.DataDir)
	if err != nil {
		return nil, err
	}
	if o.MustExist {
		if err := mustExist(loc); err != nil {
			return nil, err
		}
	}
	if loc.Kind == backend.SQLite {
		if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("create data directory %s: %w", o.DataDir, err)
		}
	}
	st, err := loc.Open()
	if o.Reads && errors.Is(err, backend.ErrReadOnly) {
		st, err = loc.OpenReadOnly()
	}
	if err != nil {
		return nil, err
	}
	if loc.Kind == backend.Postgres {
		// What the CLI stamps (a decision, a deploy) and judges (which
		// node is alive) is on the database's clock, as keep serve's is.
		if err := scheduler.FollowStoreClock(context.Background(), st); err != nil {
			st.Close()
			return nil, err
		}
	}
	root := o.FilesRoot
	if root == "" {
		root = "."
	}
	l := &API{Store: st, opts: o}
	// What it deploys records the policy of the config it was given
	// (kt.Workflow.Policy), as keep serve's and keep run's deploys do.
	var pol *config.Policy
	if o.ConfigFile != "" {
		pol = &cfg.Policy
	}
	eng := engine.New(engine.Options{Store: st, Registry: daemon.RegistryOf(cfg, root), Policy: pol})
	srv := &api.Server{Store: st, Engine: eng, Changed: l.note, Retention: engine.RetentionOf(cfg.Retention)}
	l.Handler = api.InProcess(srv.Handler())
	return l, nil
}

func (l *API) note(wf string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changed = append(l.changed, wf)
}

// Changed lists the workflows the API's actions changed, in order.
func (l *API) Changed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.changed...)
}

// Engine is an engine of this process over the API's own store (opened
// once for the whole command: the action, the engine that carries it out,
// the read after), under the data directory's engine lock, with the
// recorded policy of workflow wf and the connectors of the API's config:
// the CLI carries a decision out with it. daemon.ErrBusy while another
// keep process holds the lock.
func (l *API) Engine(wf string) (*daemon.Keep, error) {
	return daemon.Open(daemon.Options{DataDir: l.opts.DataDir, Store: l.opts.Store, ConfigFile: l.opts.ConfigFile, PolicyOf: wf, Over: l.Store})
}

// Close closes the store.
func (l *API) Close() error { return l.Store.Close() }
