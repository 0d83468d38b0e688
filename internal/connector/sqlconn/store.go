package sqlconn

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keep-run/keep/internal/ownfiles"
	"github.com/keep-run/keep/internal/redact"
)

// RefuseKeepsStore says which declared database is keep's own store: a
// script's statements there would rewrite keep's grants and ledgers.
// storePath is the SQLite store's file, storeURL the PostgreSQL store's
// URL (one of them is empty). SQLite files compare by their resolved
// path and as files (a hard link); PostgreSQL by host, port, database and schema.
func RefuseKeepsStore(databases map[string]string, storePath, storeURL string) error {
	names := make([]string, 0, len(databases))
	for n := range databases {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		raw := databases[name]
		driver, _, err := dsnOf(raw)
		if err != nil {
			continue // open reports it on the first call
		}
		same := false
		switch {
		case driver == "sqlite":
			u, _ := url.Parse(raw)
			// Any of keep's own files (package ownfiles: the store's
			// -wal, secret.key, a hard link to keep.db…) is refused as
			// the files connector refuses it.
			if r := ownfiles.Path(u.Path); r != nil {
				return fmt.Errorf("keep.toml [connectors.sql.databases] %s = %q is keep's own store or another of keep's files, which no script may reach: %s is keep's own (%s). Declare the application's database instead (keep's store is not a target)",
					name, redact.URL(raw), r.Where, r.What)
			}
			same = storePath != "" && (resolved(u.Path) == resolved(storePath) || sameFile(u.Path, storePath))
		case driver == "pgx" && storeURL != "":
			same = samePostgres(raw, storeURL)
		}
		if same {
			return fmt.Errorf("keep.toml [connectors.sql.databases] %s = %q is keep's own store: a script's statements there would reach keep's grants and ledgers. Declare the application's database instead (keep's store is not a target)",
				name, redact.URL(raw))
		}
	}
	return nil
}

// sameFile says whether two paths are one file: a hard link too.
func sameFile(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

func resolved(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	return filepath.Clean(p)
}

func samePostgres(a, b string) bool {
	ca, err1 := pgconn.ParseConfig(a)
	cb, err2 := pgconn.ParseConfig(b)
	if err1 != nil || err2 != nil {
		return false
	}
	host := func(h string) string {
		switch strings.ToLower(h) {
		case "localhost", "::1", "127.0.0.1":
			return "loopback"
		}
		return strings.ToLower(h)
	}
	schema := func(c *pgconn.Config) string {
		first, _, _ := strings.Cut(c.RuntimeParams["search_path"], ",")
		if first = strings.Trim(strings.TrimSpace(first), `"`); first == "" {
			return "public"
		}
		return first
	}
	return host(ca.Host) == host(cb.Host) && ca.Port == cb.Port && ca.Database == cb.Database && schema(ca) == schema(cb)
}
