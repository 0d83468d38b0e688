package inproc

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/keep-run/keep/internal/account"
	"github.com/keep-run/keep/internal/daemon"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/backend"
	"github.com/keep-run/keep/internal/store/transfer"
)

// Direct is the data directory's store for the few CLI commands that need
// it by nature rather than keep's API (docs/design.md, "The CLI as a
// client of the API"): keep connect seals an account's tokens and reads
// the deployed scripts for their scopes, keep secret set and rm seal or
// forget a secret (its value never crosses the API), keep plan --revise
// reads the version it revises. The store is opened when first asked;
// Create makes it when there is none yet (a person may connect or set a
// secret before deploying), else a missing one is an error saying so.
type Direct struct {
	DataDir, Store string
	Create         bool
	st             store.Store
}

func (d *Direct) open() (store.Store, error) {
	if d.st != nil {
		return d.st, nil
	}
	loc, err := backend.Parse(d.Store, d.DataDir)
	if err != nil {
		return nil, err
	}
	if !d.Create {
		if err := mustExist(loc); err != nil {
			return nil, err
		}
	}
	st, err := loc.Open()
	if !d.Create && errors.Is(err, backend.ErrReadOnly) {
		// keep plan --revise only reads; a write (keep secret rm) then
		// fails saying the data directory is read-only.
		st, err = loc.OpenReadOnly()
	}
	if err != nil {
		return nil, err
	}
	d.st = st
	return st, nil
}

// mustExist refuses an embedded store that was never made.
func mustExist(loc backend.Location) error {
	if _, err := os.Stat(loc.Path); loc.Kind == backend.SQLite && err != nil {
		return fmt.Errorf("no keep data in %s (nothing deployed yet; run `keep deploy FILE` or `keep run FILE`, or pass --data)", loc.Path)
	}
	return nil
}

// Accounts are the connected accounts, sealed with the data directory's key.
func (d *Direct) Accounts() (*account.Accounts, error) {
	st, err := d.open()
	if err != nil {
		return nil, err
	}
	return daemon.Accounts(d.DataDir, st)
}

// Secrets are the named secrets, sealed with the same key.
func (d *Direct) Secrets() (*account.Secrets, error) {
	accts, err := d.Accounts()
	if err != nil {
		return nil, err
	}
	return &account.Secrets{Store: accts.Store, Box: accts.Box}, nil
}

// LatestScripts are the scripts of every workflow's latest version.
func (d *Direct) LatestScripts(ctx context.Context) ([]string, error) {
	st, err := d.open()
	if err != nil {
		return nil, err
	}
	return report.LatestScripts(ctx, st)
}

// ActiveVersion is a workflow's active version, its script included.
func (d *Direct) ActiveVersion(ctx context.Context, wf string) (kt.Version, error) {
	st, err := d.open()
	if err != nil {
		return kt.Version{}, err
	}
	var v kt.Version
	err = st.View(ctx, func(tx store.Tx) error {
		w, err := tx.WorkflowGet(wf)
		if errors.Is(err, kt.ErrNotFound) {
			return fmt.Errorf("there is no workflow %q (see keep status)", wf)
		}
		if err != nil {
			return err
		}
		v, err = tx.VersionGet(wf, w.ActiveVersion)
		return err
	})
	return v, err
}

// Close closes the store if it was opened.
func (d *Direct) Close() error {
	if d.st == nil {
		return nil
	}
	return d.st.Close()
}

// ErrSameStore refuses a migration onto the store it copies.
var ErrSameStore = errors.New("--from and --to name the same store")

// Migrated is what keep migrate copied, from where to where (as people
// see the stores: a password hidden).
type Migrated struct {
	transfer.Counts
	From, To string
}

// Migrate copies everything keep stores from the store from names (""
// for the data directory's keep.db) into the empty store to names,
// holding the source's engine lock so that no keep serve changes it
// meanwhile.
func Migrate(ctx context.Context, dataDir, from, to string) (Migrated, error) {
	src, err := backend.Parse(from, dataDir)
	if err != nil {
		return Migrated{}, err
	}
	dst, err := backend.Parse(to, dataDir)
	if err != nil {
		return Migrated{}, err
	}
	m := Migrated{From: src.Show(), To: dst.Show()}
	if _, err := os.Stat(src.Path); src.Kind == backend.SQLite && err != nil {
		return m, fmt.Errorf("no keep data at %s to copy (pass --data or --from)", src.Path)
	}
	if m.From == m.To {
		return m, fmt.Errorf("%w (%s)", ErrSameStore, m.From)
	}
	source, release, err := daemon.HoldStore(dataDir, src)
	if err != nil {
		return m, err
	}
	defer func() { release(); source.Close() }()
	dest, err := dst.Open()
	if err != nil {
		return m, err
	}
	defer dest.Close()
	m.Counts, err = transfer.Copy(ctx, source, dest)
	return m, err
}
