// Package backend chooses keep's store by its URL, in one place (as DBOS's
// DetectDialect does): `--store` or KEEP_STORE, by default the embedded
// SQLite file in the data directory.
//
// It may import store and its backends.
package backend

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

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
		return Location{}, fmt.Errorf("--store %q is not a URL (%v): use sqlite:///path/to/keep.db, or leave it out for %s", raw, err, Default(dataDir).Path)
	}
	switch strings.ToLower(u.Scheme) {
	case "sqlite", "sqlite3":
		path := u.Host + u.Path
		if u.Opaque != "" {
			path = u.Opaque
		}
		if path == "" {
			return Location{}, fmt.Errorf("--store %q names no file: use sqlite:///path/to/keep.db", raw)
		}
		return Location{Kind: SQLite, Path: path, URL: raw}, nil
	case "postgres", "postgresql":
		return Location{Kind: Postgres, URL: raw}, nil
	}
	return Location{}, fmt.Errorf("--store %q: unknown kind of store %q; keep stores its ledgers in SQLite (sqlite:///path/to/keep.db, the default is %s) or PostgreSQL (postgres://user@host/db)",
		raw, u.Scheme, Default(dataDir).Path)
}

// Open opens the store at l.
func (l Location) Open() (store.Store, error) {
	if l.Kind == Postgres {
		return postgres.Open(context.Background(), l.URL)
	}
	return sqlite.Open(l.Path)
}

// OpenReadOnly opens the store at l for reads only (a read-only data directory).
func (l Location) OpenReadOnly() (store.Store, error) {
	if l.Kind == Postgres {
		return l.Open()
	}
	return sqlite.OpenReadOnly(l.Path)
}

// Show names the store for people (a password hidden).
func (l Location) Show() string {
	if l.Kind == Postgres {
		return redactURL(l.URL)
	}
	return l.Path
}

// redactURL hides a password in a store URL.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(the store URL)"
	}
	return u.Redacted()
}
