package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqlite"
)

// fillRuns writes n done runs with a trace of size bytes each.
func fillRuns(t *testing.T, s store.Store, n, size int) []string {
	t.Helper()
	trace := json.RawMessage(`"` + strings.Repeat("x", size) + `"`)
	var ids []string
	for i := 0; i < n; i += 100 {
		if err := s.Update(context.Background(), func(tx store.Tx) error {
			for j := i; j < i+100 && j < n; j++ {
				id := fmt.Sprintf("run-%05d", j)
				ids = append(ids, id)
				at := int64(1000 + j)
				if err := tx.RunPut(kt.Run{ID: id, Workflow: "w", Version: 1, Handler: "p", HandlerType: kt.HandlerProducer, Phase: kt.PhaseCommitted,
					Status: kt.StatusCommitted, Trace: trace, CreatedAt: at, UpdatedAt: at, FinishedAt: at}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// pruneAll drops the bodies of ids and compacts, returning what was freed.
func pruneAll(t *testing.T, s *sqlite.Store, ids []string) int64 {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < len(ids); i += 200 {
		end := min(i+200, len(ids))
		if err := s.Update(ctx, func(tx store.Tx) error {
			_, _, err := tx.PruneBodies(store.PruneRuns, ids[i:end], 1)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	freed, err := s.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return freed
}

// TestPruneGivesTheDiskBack (issue 44 #3): a new keep.db is made with
// incremental vacuum; after a prune, Compact hands the freed pages back
// and the file shrinks. Pages, not timings, are asserted.
func TestPruneGivesTheDiskBack(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keep.db")
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids := fillRuns(t, s, 1000, 8000)
	if _, err := s.Compact(context.Background()); err != nil { // checkpoints the WAL: the file holds it all
		t.Fatal(err)
	}
	before, err := s.Size(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	onDisk := fileSize(t, path)
	freed := pruneAll(t, s, ids)
	after, err := s.Size(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("keep.db: %d bytes before, %d after the prune (freed %d); the file %d → %d", before, after, freed, onDisk, fileSize(t, path))
	if freed < 6_000_000 || after > before-6_000_000 {
		t.Fatalf("a prune of 1,000 traces of 8 KB freed %d bytes (%d → %d), want ≥ 6 MB", freed, before, after)
	}
	if got := fileSize(t, path); got > onDisk-6_000_000 {
		t.Fatalf("keep.db is %d bytes after the prune, was %d: the disk was not given back", got, onDisk)
	}
}

// TestCompactTurnsAnOldFileIncremental: a keep.db made before issue 44
// (auto_vacuum NONE) is turned once by Compact's VACUUM; its rows are
// all there afterwards, and the next prune frees pages incrementally.
func TestCompactTurnsAnOldFileIncremental(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keep.db")
	// An old file: made without auto_vacuum, as keep made them before.
	old, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(`CREATE TABLE before_44 (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	old.Close()
	s, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mode := func() int {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var m int
		if err := db.QueryRow("PRAGMA auto_vacuum").Scan(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := mode(); m != 0 {
		t.Fatalf("the old file's auto_vacuum is %d before Compact, want 0 (NONE): the test does not make an old file", m)
	}
	ids := fillRuns(t, s, 300, 8000)
	if freed := pruneAll(t, s, ids); freed < 2_000_000 {
		t.Fatalf("the first Compact of an old file freed %d bytes, want ≥ 2 MB", freed)
	}
	if m := mode(); m != 2 {
		t.Fatalf("auto_vacuum is %d after Compact, want 2 (INCREMENTAL)", m)
	}
	if err := s.View(context.Background(), func(tx store.Tx) error {
		r, err := tx.RunGet(ids[299])
		if err != nil || r.Status != kt.StatusCommitted {
			return fmt.Errorf("a run after the VACUUM: %+v, %v", r, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
