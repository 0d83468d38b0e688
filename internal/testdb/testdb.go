// Package testdb gives tests a MariaDB/MySQL database of their own on the
// machine's server (KEEP_TEST_MARIADB, default root@127.0.0.1:3306). Without
// one a test is skipped with a line that says so — unless
// KEEP_REQUIRE_MARIADB is set (.ci/run sets it), where that is a failure.
// PostgreSQL's twin is store/postgres/pgtest.
package testdb

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// MariaDBURL is the server the tests use, as a mysql:// URL.
func MariaDBURL() string {
	if u := os.Getenv("KEEP_TEST_MARIADB"); u != "" {
		return u
	}
	return "mysql://root@127.0.0.1:3306/"
}

// FreshMariaDB makes a database of the test's own and returns its mysql://
// URL; the database is dropped when the test ends.
func FreshMariaDB(t testing.TB) string {
	t.Helper()
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User = "tcp", "127.0.0.1:3306", "root"
	base := MariaDBURL()
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err == nil {
		err = db.Ping()
	}
	if err != nil {
		if os.Getenv("KEEP_REQUIRE_MARIADB") != "" {
			t.Fatalf("MariaDB at %s is not reachable (KEEP_REQUIRE_MARIADB is set): %v", base, err)
		}
		t.Skipf("MariaDB at %s is not reachable, so this MariaDB test does not run here: %v", base, err)
	}
	var b [6]byte
	rand.Read(b[:])
	name := "keep_test_" + hex.EncodeToString(b[:])
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Exec("DROP DATABASE " + name)
		db.Close()
	})
	return base + name
}
