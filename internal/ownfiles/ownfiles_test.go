package ownfiles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Path finds keep's files by what they are: a hard link to the store, a
// config that does not exist yet, a file made in the data directory after
// Register; another file is not keep's, and nothing is once released.
func TestPathJudgesIdentityNotText(t *testing.T) {
	base := t.TempDir()
	data, store := filepath.Join(base, "data"), filepath.Join(base, "db", "app.db")
	must(t, os.MkdirAll(data, 0o700))
	must(t, os.MkdirAll(filepath.Dir(store), 0o700))
	must(t, os.WriteFile(store, []byte("db"), 0o600))
	must(t, os.Link(store, filepath.Join(base, "hard")))
	release, err := Register(House{DataDir: data, Store: store, Configs: []string{filepath.Join(base, "keep.toml")}})
	must(t, err)
	defer release()
	must(t, os.WriteFile(filepath.Join(data, "later"), []byte("x"), 0o600))
	must(t, os.Link(filepath.Join(data, "later"), filepath.Join(base, "later-hard")))
	for p, what := range map[string]string{
		filepath.Join(base, "hard"): "store", filepath.Join(base, "db", "app.db-wal"): "store", filepath.Join(base, "keep.toml"): "config",
		filepath.Join(base, "later-hard"): "data directory", data: "data directory", filepath.Join(data, "new"): "data directory",
	} {
		if r := Path(p); r == nil || !strings.Contains(r.What, what) {
			t.Errorf("%s: %v, want keep's own %s", p, r, what)
		}
	}
	must(t, os.WriteFile(filepath.Join(base, "other"), []byte("x"), 0o600))
	if r := Path(filepath.Join(base, "other")); r != nil {
		t.Errorf("another file: %v", r)
	}
	release()
	if r := Path(filepath.Join(base, "hard")); r != nil {
		t.Errorf("released: %v", r)
	}
}

// Tighten makes a data directory keep's alone and says what it changed;
// a folder with the sticky bit (/tmp given as --data) is only named.
func TestTighten(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	changed, err := Tighten(dir)
	if err != nil || len(changed) != 0 {
		t.Fatalf("a new data directory: %v %v", changed, err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("made %v", fi.Mode().Perm())
	}
	must(t, os.Chmod(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "keep.db"), nil, 0o644))
	must(t, os.MkdirAll(filepath.Join(dir, ScriptsFolder), 0o755))
	changed, err = Tighten(dir)
	if err != nil || strings.Join(changed, ";") != dir+" 0755 -> 0700;"+filepath.Join(dir, "keep.db")+" 0644 -> 0600" {
		t.Fatalf("tightened %q %v", changed, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, ScriptsFolder)); fi.Mode().Perm() != 0o755 {
		t.Fatalf("the scripts' folder was changed")
	}
	shared := t.TempDir()
	must(t, os.Chmod(shared, 0o777|os.ModeSticky))
	must(t, os.WriteFile(filepath.Join(shared, "x"), nil, 0o600))
	changed, err = Tighten(shared)
	if fi, _ := os.Stat(shared); err != nil || fi.Mode().Perm() != 0o777 || len(changed) != 1 || !strings.Contains(changed[0], "shared folder") {
		t.Fatalf("a sticky folder: %v %v %v", fi.Mode(), changed, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
