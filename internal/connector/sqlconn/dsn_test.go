package sqlconn_test

import (
	"net/url"
	"strings"
	"testing"
)

func driverOf(name string) string {
	switch name {
	case "postgres":
		return "pgx"
	case "mariadb":
		return "mysql"
	}
	return "sqlite"
}

// dsn turns a test database's URL into its driver's DSN, to count rows.
func dsn(t *testing.T, name, raw string) string {
	switch name {
	case "postgres":
		return raw
	case "sqlite":
		return strings.TrimPrefix(raw, "sqlite://")
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.User.Username() + "@tcp(" + u.Host + ")" + u.Path
}
