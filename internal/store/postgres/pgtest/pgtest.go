// Package pgtest gives tests a PostgreSQL schema of their own on the
// machine's PostgreSQL (KEEP_TEST_POSTGRES, default 127.0.0.1:5432,
// database test, trust auth). Without one, a test is skipped with a line
// that says so — unless KEEP_REQUIRE_POSTGRES is set (.ci/run sets it),
// where that is a failure.
package pgtest

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx driver for database/sql
)

// URL is the PostgreSQL the tests use.
func URL() string {
	if u := os.Getenv("KEEP_TEST_POSTGRES"); u != "" {
		return u
	}
	return "postgres://127.0.0.1:5432/test?sslmode=disable"
}

// FreshSchema makes a schema of the test's own and returns the store URL
// that uses it; the schema is dropped when the test ends.
func FreshSchema(t testing.TB) string {
	t.Helper()
	base := URL()
	shown := base
	if u, err := url.Parse(base); err == nil {
		shown = u.Redacted()
	}
	db, err := sql.Open("pgx", base)
	if err == nil {
		err = db.Ping()
	}
	if err != nil {
		if os.Getenv("KEEP_REQUIRE_POSTGRES") != "" {
			t.Fatalf("PostgreSQL at %s is not reachable (KEEP_REQUIRE_POSTGRES is set): %v", shown, err)
		}
		t.Skipf("PostgreSQL at %s is not reachable, so this PostgreSQL test does not run here (set KEEP_TEST_POSTGRES to one): %v", shown, err)
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
