package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/backend"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Deleting engine.lock must not let a second engine run the same data
// directory (issue 11 #12): keep.db itself is locked as well.
func TestASecondEngineIsRefusedEvenWithoutEngineLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k, err := Open(Options{DataDir: dir, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if _, err := Open(Options{DataDir: dir, Logger: quiet()}); !errors.Is(err, ErrBusy) {
		t.Fatalf("second engine with the lock in place: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "engine.lock")); err != nil {
		t.Fatal(err)
	}
	k2, err := Open(Options{DataDir: dir, Logger: quiet()})
	if err == nil {
		k2.Close()
		t.Fatal("a second engine started on the same data directory after engine.lock was deleted")
	}
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "keep.db") {
		t.Fatalf("want a clear busy error naming keep.db, got %v", err)
	}
}

// A 0-byte keep.db is not a new database (issue 11 #15): starting over on it
// would redo every write the lost ledger recorded.
func TestAnEmptyDatabaseFileIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(DBPath(dir), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := Open(Options{DataDir: dir, Logger: quiet()})
	if err == nil {
		k.Close()
		t.Fatal("keep opened a 0-byte keep.db as a new database")
	}
	if !strings.Contains(err.Error(), "empty (0 bytes)") || !strings.Contains(err.Error(), "backup") {
		t.Fatalf("the error does not say what happened and what to do: %v", err)
	}
	if fi, _ := os.Stat(DBPath(dir)); fi.Size() != 0 {
		t.Fatalf("the refused file was changed: %d bytes", fi.Size())
	}
}

// A declared sql database that is keep's own store is refused at start
// (issue 23 #2): through it a script's statements would grant itself
// anything and move its files root.
func TestKeepsOwnStoreIsNotAnSQLTarget(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k, err := Open(Options{DataDir: dir, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	k.Close()
	// The same file by another path: a symlink to the data directory.
	link := filepath.Join(t.TempDir(), "data")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "keep.toml")
	os.WriteFile(cfg, []byte("[connectors.sql.databases]\napp = \"sqlite://"+filepath.Join(link, "keep.db")+"\"\n"), 0o644)
	k, err = Open(Options{DataDir: dir, ConfigFile: cfg, Logger: quiet()})
	if err == nil {
		k.Close()
		t.Fatal("keep started with its own keep.db declared as an sql database")
	}
	if !strings.Contains(err.Error(), "[connectors.sql.databases] app") || !strings.Contains(err.Error(), "keep's own store") {
		t.Fatalf("the error does not say which declaration and why: %v", err)
	}
	// A database in the data directory is refused too: the folder is
	// keep's alone (issue 38, package ownfiles).
	os.WriteFile(cfg, []byte("[connectors.sql.databases]\napp = \"sqlite://"+filepath.Join(dir, "app.db")+"\"\n"), 0o644)
	if k, err = Open(Options{DataDir: dir, ConfigFile: cfg, Logger: quiet()}); err == nil {
		k.Close()
		t.Fatal("keep started with a database in its data directory declared as an sql database")
	}
	// A file elsewhere is fine.
	os.WriteFile(cfg, []byte("[connectors.sql.databases]\napp = \"sqlite://"+filepath.Join(t.TempDir(), "app.db")+"\"\n"), 0o644)
	k, err = Open(Options{DataDir: dir, ConfigFile: cfg, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	k.Close()
}

// An engine over a store its caller opened (Options.Over: the CLI's
// in-process API, issue 41) takes the engine locks as ever — a second
// engine is refused beside it — and leaves the store open at Close: the
// caller reads on after it.
func TestAnEngineOverTheCallersStoreLeavesItOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := backend.Default(dir).Open()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	before := backend.Opens(backend.Default(dir))
	k, err := Open(Options{DataDir: dir, Logger: quiet(), Over: st})
	if err != nil {
		t.Fatal(err)
	}
	if n := backend.Opens(backend.Default(dir)) - before; n != 0 {
		t.Fatalf("Open over an opened store opened it again (%d times)", n)
	}
	if _, err := Open(Options{DataDir: dir, Logger: quiet(), Over: st}); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second engine over the same store: %v", err)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.View(context.Background(), func(tx store.Tx) error { _, err := tx.WorkflowList(); return err }); err != nil {
		t.Fatalf("the caller's store after the engine's Close: %v", err)
	}
	// The locks went with the engine: another may start now.
	k, err = Open(Options{DataDir: dir, Logger: quiet(), Over: st})
	if err != nil {
		t.Fatal(err)
	}
	k.Close()
}
