package backend

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		raw, kind, path, err string
	}{
		{"", SQLite, filepath.Join(dir, "keep.db"), ""},
		{"sqlite:///var/lib/keep/keep.db", SQLite, "/var/lib/keep/keep.db", ""},
		{"sqlite://data/keep.db", SQLite, "data/keep.db", ""},
		{"sqlite:keep.db", SQLite, "keep.db", ""},
		{"postgres://keep@127.0.0.1/test", Postgres, "", ""},
		{"sqlite://", "", "", "names no file"},
		{"mysql://root@localhost/keep", "", "", `unknown kind of store "mysql"`},
	} {
		l, err := Parse(c.raw, dir)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want one saying %q", c.raw, err, c.err)
			}
			continue
		}
		if err != nil || l.Kind != c.kind || l.Path != c.path {
			t.Errorf("%q: %+v %v, want %s %s", c.raw, l, err, c.kind, c.path)
		}
	}
}

func TestOpenSQLiteFileAndAnUnreachablePostgres(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	l, err := Parse("sqlite://"+path, "ignored")
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Open()
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	st.Close()
	l, _ = Parse("postgres://keep:secret@db.invalid/keep", "")
	_, err = l.Open()
	if err == nil || !strings.Contains(err.Error(), "cannot be reached") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("opening an unreachable PostgreSQL: %v, want a clear error without the password", err)
	}
}
