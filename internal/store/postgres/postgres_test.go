package postgres

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/store/storetest"
)

func freshSchema(t *testing.T) string { return pgtest.FreshSchema(t) }

func TestStoreConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store {
		s, err := Open(context.Background(), freshSchema(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// A database written by a newer keep (a migration this one does not know)
// is refused, with what to do; nothing is changed.
func TestANewerSchemaIsRefused(t *testing.T) {
	u := freshSchema(t)
	s, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := sql.Open("pgx", u)
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO schema_migrations(name, applied_at) VALUES('999_from_the_future.sql', 1)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(context.Background(), u); err == nil || !strings.Contains(err.Error(), "999_from_the_future.sql") || !strings.Contains(err.Error(), "newer keep") {
		t.Fatalf("opening a newer schema: %v", err)
	}
}

func TestRebind(t *testing.T) {
	for in, want := range map[string]string{
		`SELECT a FROM t WHERE x=? AND y=?`:           `SELECT a FROM t WHERE x=$1 AND y=$2`,
		`SELECT 1 WHERE s='?' AND r<>'' AND z=?`:      `SELECT 1 WHERE s='?' AND r<>'' AND z=$1`,
		`INSERT INTO e(a,b) VALUES(?,?) RETURNING id`: `INSERT INTO e(a,b) VALUES($1,$2) RETURNING id`,
	} {
		if got := rebind(in); got != want {
			t.Errorf("rebind(%q) = %q, want %q", in, got, want)
		}
	}
}

// A commit by one node wakes the others (LISTEN/NOTIFY).
func TestACommitWakesTheOtherNodes(t *testing.T) {
	u := freshSchema(t)
	a, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	woke := make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Listen(ctx, func() { woke <- struct{}{} })
	// Until b listens, commits are missed: commit until one arrives.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := a.Update(context.Background(), func(tx store.Tx) error {
			return tx.WorkflowPut(kt.Workflow{Name: "w", CreatedAt: 1, UpdatedAt: 1})
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-woke:
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no node was woken by a commit within 30 s")
		}
	}
}
