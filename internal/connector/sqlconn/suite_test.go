package sqlconn_test

import (
	"net/url"
	"path/filepath"
	"testing"

	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/connectortest"
	"github.com/keep-run/keep/internal/fake/fault"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
)

// suitePassword is the password in the PostgreSQL URL (the test server
// trusts local connections, so any password is accepted).
const suitePassword = "ghp_SqlSuitePassword0123456789abcdefABCD"

// notInjected are package fault's kinds, none of which the suite injects
// into a database, each with the reason.
var notInjected = map[string]string{
	fault.Status429:         "a database answers no HTTP status",
	fault.Status500:         "a database answers no HTTP status",
	fault.Status500After:    "a database answers no HTTP status",
	fault.Status503:         "a database answers no HTTP status",
	fault.Status401:         "a database answers no HTTP status",
	fault.Status403:         "a database answers no HTTP status",
	fault.Timeout:           "not injected: it needs a proxy in front of the database (the statement and its marker row commit together, so reconcile is exact)",
	fault.TimeoutAfterApply: "not injected: it needs a proxy in front of the database (the statement and its marker row commit together, so reconcile is exact)",
	fault.Drop:              "not injected: it needs a proxy in front of the database (the statement and its marker row commit together, so reconcile is exact)",
	fault.DropAfterApply:    "not injected: it needs a proxy in front of the database (the statement and its marker row commit together, so reconcile is exact)",
}

// sql.exec passes the connectors' shared suite against a real SQLite file
// and a real PostgreSQL schema.
func TestSuiteExec(t *testing.T) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			connectortest.Exercise(t, func(t *testing.T) *connectortest.Target {
				return sqlTarget(t, name)
			})
		})
	}
}

func sqlTarget(t *testing.T, name string) *connectortest.Target {
	tg := &connectortest.Target{Tool: "sql", Method: "exec", NotApplicable: notInjected,
		Arm: func(t *testing.T, kind string, _ int) { t.Fatalf("no fault %q is injected into a database", kind) }}
	ins := "INSERT INTO notes (text) VALUES (?)"
	var raw string
	switch name {
	case "sqlite":
		raw = "sqlite://" + filepath.Join(t.TempDir(), "app.db")
		tg.NoCredential = "a SQLite file is opened, not logged in to"
	case "postgres":
		u, err := url.Parse(pgtest.FreshSchema(t))
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(u.User.Username(), suitePassword)
		raw, tg.Secret, ins = u.String(), suitePassword, "INSERT INTO notes (text) VALUES ($1)"
	}
	db := dbOf(t, name, raw)
	if _, err := db.Exec("CREATE TABLE notes (text VARCHAR(200))"); err != nil {
		t.Fatal(err)
	}
	c, pools := newConn(map[string]string{"app": raw})
	t.Cleanup(func() { pools.Close() })
	tg.Registry = connector.NewRegistry(c)
	tg.Args = map[string]any{"db": "app", "sql": ins, "args": []any{"Order 7 shipped"}}
	tg.Changed = map[string]any{"db": "app", "sql": ins, "args": []any{"Order 7 shipped twice"}}
	tg.Applied = func(t *testing.T) int {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM notes").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	return tg
}
