package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/keep-run/keep/internal/store"
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
