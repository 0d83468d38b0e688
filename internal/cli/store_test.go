package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --store names the store in one place: another SQLite file is used by
// every command (the data directory keeps no keep.db), and a store this
// version cannot open is refused with what to do, nothing written.
func TestStoreURLChoosesTheStore(t *testing.T) {
	t.Parallel()
	dir, data := quickstart(t)
	db := filepath.Join(t.TempDir(), "elsewhere.db")
	r := keep(t, "run", "--data", data, "--store", "sqlite://"+db, filepath.Join(dir, "workflow.js"))
	if r.code != 0 || strings.Count(r.out, "applied") != 3 {
		t.Fatalf("run on --store: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("the store file was not used: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "keep.db")); err == nil {
		t.Fatal("keep.db was created in the data directory although --store names another file")
	}
	r = keep(t, "status", "--data", data, "--store", "sqlite://"+db)
	if r.code != 0 || !strings.Contains(r.out, "quickstart") {
		t.Fatalf("status on --store: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	r = keep(t, "status", "--data", data, "--store", "mysql://root@localhost/keep")
	if r.code == 0 || !strings.Contains(r.err, `unknown kind of store "mysql"`) {
		t.Fatalf("an unknown store: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	r = keep(t, "run", "--data", data, "--store", "postgres://keep:pw@127.0.0.1/test", filepath.Join(dir, "workflow.js"))
	if r.code == 0 || !strings.Contains(r.err, "PostgreSQL store is not part of this version") || strings.Contains(r.err, ":pw@") {
		t.Fatalf("postgres: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
}
