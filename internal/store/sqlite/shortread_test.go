package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqlite"
)

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func putWorkflow(t *testing.T, s *sqlite.Store, name string) {
	t.Helper()
	if err := s.Update(context.Background(), func(tx store.Tx) error {
		return tx.WorkflowPut(kt.Workflow{Name: name, ActiveVersion: 1})
	}); err != nil {
		t.Fatal(err)
	}
}

func hasWorkflow(t *testing.T, s *sqlite.Store, ctx context.Context, name string) (bool, error) {
	t.Helper()
	found := false
	err := s.View(ctx, func(tx store.Tx) error {
		_, err := tx.WorkflowGet(name)
		switch {
		case err == nil:
			found = true
		case !errors.Is(err, kt.ErrNotFound):
			return err
		}
		return nil
	})
	return found, err
}

// A short read (store.ShortRead: a step's plan) runs on the writer's
// connection while no commit is under way or waiting, and sees what was
// committed: with every reader connection taken it still answers, where
// a View not marked cannot.
func TestAShortReadRunsOnTheIdleWriter(t *testing.T) {
	s := openStore(t)
	putWorkflow(t, s, "wf")
	giveBack := s.HoldReaders()
	defer giveBack()
	// (Without the writer it would wait for a reader until this ends.)
	long, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	found, err := hasWorkflow(t, s, store.ShortRead(long), "wf")
	if err != nil || !found {
		t.Fatalf("a short read with every reader taken: found %v, %v; want the committed workflow", found, err)
	}
	// The control: a View not marked waits for a reader.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := hasWorkflow(t, s, ctx, "wf"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a View not marked, every reader taken: %v; want it to wait for a reader", err)
	}
}

// An Update that comes while a short read holds the writer waits for the
// read to end (which sees its snapshot, not the write), then commits: its
// caller is answered, and the write is there.
func TestAnUpdateDuringAShortReadCommitsWhenTheReadEnds(t *testing.T) {
	s := openStore(t)
	putWorkflow(t, s, "before")
	done := make(chan error, 1)
	err := s.View(store.ShortRead(context.Background()), func(tx store.Tx) error {
		go func() {
			done <- s.Update(context.Background(), func(tx store.Tx) error {
				return tx.WorkflowPut(kt.Workflow{Name: "during", ActiveVersion: 1})
			})
		}()
		// A minute is only the bound of a hang: the update queues at once.
		deadline := time.Now().Add(time.Minute)
		for s.Queued() == 0 {
			select {
			case err := <-done:
				t.Fatalf("the update ended (%v) while the short read held the writer", err)
			case <-time.After(time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatal("the update never queued behind the short read")
			}
		}
		if _, err := tx.WorkflowGet("during"); !errors.Is(err, kt.ErrNotFound) {
			t.Errorf("the short read saw the queued write: %v", err)
		}
		_, err := tx.WorkflowGet("before")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the update queued behind the short read: %v", err)
	}
	if found, err := hasWorkflow(t, s, context.Background(), "during"); err != nil || !found {
		t.Fatalf("after the short read: the queued update's write found %v, %v", found, err)
	}
}

// A short read never waits for a commit: with the writer busy (an Update
// under way) it reads on a reader connection.
func TestAShortReadDoesNotWaitForABusyWriter(t *testing.T) {
	s := openStore(t)
	putWorkflow(t, s, "wf")
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Update(context.Background(), func(tx store.Tx) error {
			close(inside)
			<-release
			return tx.WorkflowPut(kt.Workflow{Name: "late", ActiveVersion: 1})
		})
	}()
	<-inside
	found, err := hasWorkflow(t, s, store.ShortRead(context.Background()), "wf")
	close(release)
	if err != nil || !found {
		t.Fatalf("a short read while an update holds the writer: found %v, %v", found, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
