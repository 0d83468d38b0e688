// Package backend chooses keep's store by its URL, in one place (as DBOS's
// DetectDialect does): `--store` or KEEP_STORE, by default the embedded
// SQLite file in the data directory.
package backend

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/postgres"
	"github.com/keep-run/keep/internal/store/sqlite"
)

// Kinds of store.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// Location is where a store is: its kind and, for SQLite, its file.
type Location struct {
	Kind string
	// Path is the SQLite database file.
	Path string
	// URL is the store as it was named ("" for the default).
	URL string
}

// Default is the data directory's own SQLite file.
func Default(dataDir string) Location {
	return Location{Kind: SQLite, Path: filepath.Join(dataDir, "keep.db")}
}

// Parse reads a store URL: "" is the data directory's keep.db;
// sqlite:///abs/path/keep.db or sqlite://relative/keep.db name another
// SQLite file; postgres:// (postgresql://) names a PostgreSQL database.
func Parse(raw, dataDir string) (Location, error) {
	if raw == "" {
		return Default(dataDir), nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the whole URL, password included: only its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Location{}, fmt.Errorf("--store %s is not a URL (%v): use sqlite:///path/to/keep.db, or leave it out for %s", shown(raw), err, Default(dataDir).Path)
	}
	switch strings.ToLower(u.Scheme) {
	case "sqlite", "sqlite3":
		path := u.Host + u.Path
		if u.Opaque != "" {
			path = u.Opaque
		}
		if path == "" {
			return Location{}, fmt.Errorf("--store %s names no file: use sqlite:///path/to/keep.db", shown(raw))
		}
		return Location{Kind: SQLite, Path: path, URL: raw}, nil
	case "postgres", "postgresql":
		return Location{Kind: Postgres, URL: raw}, nil
	}
	return Location{}, fmt.Errorf("--store %s: unknown kind of store %q; keep stores its ledgers in SQLite (sqlite:///path/to/keep.db, the default is %s) or PostgreSQL (postgres://user@host/db)",
		shown(raw), u.Scheme, Default(dataDir).Path)
}

// opens counts the stores this process opened, per location (Opens).
var opens sync.Map // Location.key() → *atomic.Int64

// key names the store at l in opens: its file, or its URL.
func (l Location) key() string {
	if l.Kind == Postgres {
		return l.URL
	}
	if abs, err := filepath.Abs(l.Path); err == nil {
		return abs
	}
	return l.Path
}

// Opens is how many times this process opened the store at l (Open and
// OpenReadOnly, whether they succeeded or not). Opening a store runs its
// migrations' checks and starts its pool: issue 41 holds a CLI command to
// one open, and a test counts them here.
func Opens(l Location) int64 {
	if n, ok := opens.Load(l.key()); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

func (l Location) count() {
	n, _ := opens.LoadOrStore(l.key(), new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

// Open opens the store at l.
func (l Location) Open() (store.Store, error) {
	l.count()
	if l.Kind == Postgres {
		return postgres.Open(context.Background(), l.URL)
	}
	return sqlite.Open(l.Path)
}

// ErrReadOnly means the data directory cannot be written (Open fails
// with it; OpenReadOnly still reads).
var ErrReadOnly = sqlite.ErrReadOnly

// OpenReadOnly opens the store at l for reads only (a read-only data directory).
func (l Location) OpenReadOnly() (store.Store, error) {
	if l.Kind == Postgres {
		return l.Open()
	}
	l.count()
	return sqlite.OpenReadOnly(l.Path)
}

// Show names the store for people (a password hidden).
func (l Location) Show() string {
	if l.Kind == Postgres {
		return redactURL(l.URL)
	}
	return l.Path
}

// hidden stands for a store URL that cannot be shown safely.
const hidden = "(the store URL, not shown: it may hold a password)"

// redactURL is a store URL as keep prints it: the userinfo's password and
// any in the query (?password=…) masked, as everywhere keep shows a URL
// (internal/redact). Text that does not parse as a URL with a scheme may
// be a connection string ("host=… password=…"): it is not shown at all.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" && strings.ContainsAny(raw, "=@:") {
		return hidden
	}
	return redact.URL(raw)
}

// shown is redactURL, quoted, for an error message.
func shown(raw string) string {
	if r := redactURL(raw); r != hidden {
		return strconv.Quote(r)
	}
	return hidden
}
