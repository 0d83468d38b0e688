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

// A password in a --store URL never shows (issue 23, low): not in the
// userinfo, not in ?password=, not in a parse error (which quotes the
// whole URL), not in a connection string, not in the error of a
// PostgreSQL that cannot be reached.
func TestStorePasswordsNeverShow(t *testing.T) {
	for _, raw := range []string{
		"postgres://keep:s3cret@127.0.0.1:1/db?password=s3cret&connect_timeout=1",
		"postgres://keep:s3cret@127.0.0.1:1/db%zz",
		"mysql://keep:s3cret@127.0.0.1/db?password=s3cret",
		"host=127.0.0.1 user=keep password=s3cret",
		"postgres:///db?host=/nonexistent&password=s3cret&connect_timeout=1",
	} {
		var msgs []string
		l, err := Parse(raw, t.TempDir())
		if err != nil {
			msgs = append(msgs, err.Error())
		} else {
			msgs = append(msgs, l.Show())
			if st, err := l.Open(); err == nil {
				st.Close()
				t.Fatalf("%s opened", l.Show())
			} else {
				msgs = append(msgs, err.Error())
			}
		}
		for _, m := range msgs {
			if strings.Contains(m, "s3cret") {
				t.Errorf("a password shows: %s", m)
			}
			if m == "" {
				t.Errorf("an empty message for %s", l.Show())
			}
		}
		t.Log(msgs)
	}
}
