package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/storetest"
)

// testURL is the PostgreSQL the tests use: KEEP_TEST_POSTGRES, or the one
// on this machine (127.0.0.1:5432, database test, trust auth).
func testURL() string {
	if u := os.Getenv("KEEP_TEST_POSTGRES"); u != "" {
		return u
	}
	return "postgres://127.0.0.1:5432/test?sslmode=disable"
}

// freshSchema makes a schema of the test's own and returns the URL that
// uses it; it is dropped when the test ends. Without a reachable
// PostgreSQL the test is skipped, saying so — unless KEEP_REQUIRE_POSTGRES
// is set (.ci/run sets it), where that is a failure.
func freshSchema(t *testing.T) string {
	t.Helper()
	base := testURL()
	db, err := sql.Open("pgx", base)
	if err == nil {
		err = db.Ping()
	}
	if err != nil {
		if os.Getenv("KEEP_REQUIRE_POSTGRES") != "" {
			t.Fatalf("PostgreSQL at %s is not reachable (KEEP_REQUIRE_POSTGRES is set): %v", Redact(base), err)
		}
		t.Skipf("PostgreSQL at %s is not reachable, so the PostgreSQL store is not tested here (set KEEP_TEST_POSTGRES to one): %v", Redact(base), err)
	}
	var b [6]byte
	rand.Read(b[:])
	schema := "keep_test_" + hex.EncodeToString(b[:])
	if _, err := db.Exec(`CREATE SCHEMA ` + schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
		db.Close()
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "search_path=" + schema
}

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
