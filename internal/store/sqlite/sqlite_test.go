package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"

	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqldb"
	"github.com/keep-run/keep/internal/store/sqlite"
	"github.com/keep-run/keep/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store {
		s, err := sqlite.Open(filepath.Join(t.TempDir(), "keep.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestReopenKeepsDataAndMigratesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keep.db")
	for i := 0; i < 2; i++ {
		s, err := sqlite.Open(path)
		if err != nil {
			t.Fatalf("open #%d: %v", i+1, err)
		}
		if r, err := s.IntegrityCheck(); err != nil || r != "ok" {
			t.Fatalf("integrity %q %v", r, err)
		}
		s.Close()
	}
}

// TestGroupCommitOnAFullDisk fills a small disk with concurrent updates, so
// that SQLite fails in the middle of groups (and may roll a whole group's
// transaction back on its own). What each caller was told must be what is
// on disk: every update that returned nil is there after a reopen, every
// update that returned an error is not.
func TestGroupCommitOnAFullDisk(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2M", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	path := filepath.Join(dir, "keep.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	big := json.RawMessage(`"` + strings.Repeat("x", 20000) + `"`)
	const n = 400
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = s.Update(ctx, func(tx store.Tx) error {
				return tx.HandlerPut(kt.Handler{Workflow: "full", Name: fmt.Sprint(i), Type: kt.HandlerProducer, State: big})
			})
		}()
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if failed == 0 || failed == n {
		t.Fatalf("%d of %d updates failed: the disk should have filled part way", failed, n)
	}
	s.Close()
	// Room to reopen (the WAL is replayed into the database).
	s, err = sqlite.Open(path)
	if err != nil {
		t.Skipf("cannot reopen on the full disk: %v", err)
	}
	defer s.Close()
	if err := s.View(ctx, func(tx store.Tx) error {
		for i := 0; i < n; i++ {
			_, gerr := tx.HandlerGet("full", fmt.Sprint(i))
			switch {
			case errs[i] == nil && gerr != nil:
				return fmt.Errorf("update %d was acknowledged but is not on disk: %v", i, gerr)
			case errs[i] != nil && gerr == nil:
				return fmt.Errorf("update %d failed (%v) but is on disk", i, errs[i])
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d acknowledged, %d refused with an error (e.g. %v)", n-failed, failed, firstErr(errs))
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// A database written by a newer keep (a migration this one does not know)
// is refused with what to do (issue 14: the same rule on both backends).
func TestANewerSchemaIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keep.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(context.Background(), func(tx store.Tx) error {
		_, err := tx.(*sqldb.Tx).Runner().Exec(`INSERT INTO schema_migrations(name, applied_at) VALUES('999_from_the_future.sql', 1)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := sqlite.Open(path); err == nil || !strings.Contains(err.Error(), "999_from_the_future.sql") || !strings.Contains(err.Error(), "newer keep") {
		t.Fatalf("opening a newer schema: %v", err)
	}
}

// A lone Update waits for no company (issue 25, the serial path): group
// commit never holds a writer back to gather others. The caller that finds
// no commit under way leads and commits its own request at once, on its
// own goroutine, in a group of one: one commit carrying one transaction,
// with no hand-off to another goroutine that could wait for a window.
func TestALoneUpdateIsCommittedByItsCallerInAGroupOfOne(t *testing.T) {
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 3; i++ {
		before := s.Stats()
		caller, ranOn := goroutineID(), ""
		if err := s.Update(context.Background(), func(tx store.Tx) error {
			ranOn = goroutineID()
			return tx.WorkflowPut(kt.Workflow{Name: fmt.Sprintf("wf%d", i), ActiveVersion: 1})
		}); err != nil {
			t.Fatal(err)
		}
		after := s.Stats()
		if ranOn != caller {
			t.Fatalf("update %d ran on goroutine %s, its caller is %s: a lone writer was handed off", i, ranOn, caller)
		}
		if c, n := after.Commits-before.Commits, after.Transactions-before.Transactions; c != 1 || n != 1 {
			t.Fatalf("update %d: %d commits carrying %d transactions; want 1 and 1", i, c, n)
		}
	}
}

// goroutineID is the running goroutine's number, from its stack's header.
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return strings.Fields(string(b))[1]
}
