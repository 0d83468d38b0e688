package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"

	"github.com/keep-run/keep/internal/api"
	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/scheduler"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/backend"
)

// LocalAPI is keep's API served inside the CLI's own process, on the data
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
type LocalAPI struct {
	Handler http.Handler
	Store   store.Store
	mu      sync.Mutex
	changed []string
}

// LocalOptions configure a LocalAPI.
type LocalOptions struct {
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

// OpenLocalAPI opens the store of a data directory and serves keep's API
// on it in this process.
func OpenLocalAPI(o LocalOptions) (*LocalAPI, error) {
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
	l := &LocalAPI{Store: st}
	// What it deploys records the policy of the config it was given
	// (kt.Workflow.Policy), as keep serve's and keep run's deploys do.
	var pol *config.Policy
	if o.ConfigFile != "" {
		pol = &cfg.Policy
	}
	eng := engine.New(engine.Options{Store: st, Registry: RegistryOf(cfg, root), Policy: pol})
	srv := &api.Server{Store: st, Engine: eng, Changed: l.note, Retention: engine.RetentionOf(cfg.Retention)}
	l.Handler = api.InProcess(srv.Handler())
	return l, nil
}

func (l *LocalAPI) note(wf string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changed = append(l.changed, wf)
}

// Changed lists the workflows the API's actions changed, in order.
func (l *LocalAPI) Changed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.changed...)
}

// Close closes the store.
func (l *LocalAPI) Close() error { return l.Store.Close() }
