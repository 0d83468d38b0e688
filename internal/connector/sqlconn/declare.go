package sqlconn

import (
	"net/url"
	"regexp"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
)

// Config is [connectors.sql].
type Config struct {
	Databases map[string]string `toml:"databases" doc:"The databases scripts may name, NAME = \"URL\": postgres://user@host:5432/db, mysql://user:pass@host:3306/db or sqlite:///path/to.db. Scripts write db: \"NAME\", never a URL."`
}

// Declaration is the sql connector's declaration.
var Declaration = connector.Declaration{
	Name: "sql",
	Doc:  "PostgreSQL, MariaDB/MySQL and SQLite databases declared in keep.toml.",
	Config: config.Section{Name: "sql", Doc: "the databases scripts may query and write. Credentials stay in keep.toml.",
		New: func() any { return &Config{} }, Check: checkConfig},
	Build: func(table any, h *connector.Host) ([]*connector.Connector, error) {
		c, pools := New(table.(*Config).Databases)
		h.OnClose(pools.Close)
		return []*connector.Connector{c}, nil
	},
}

var dbNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

func checkConfig(v any, _ *config.Config) error {
	for db, u := range v.(*Config).Databases {
		key := "databases." + db
		if !dbNameRe.MatchString(db) {
			return config.KeyErrorf(key, "is not a database name: letters, digits, _ and - (scripts write it as db: \"NAME\")")
		}
		pu, err := url.Parse(u)
		if err != nil {
			return config.KeyErrorf(key, "is not a URL: %v", err)
		}
		switch pu.Scheme {
		case "postgres", "postgresql", "mysql", "sqlite":
		default:
			return config.KeyErrorf(key, "must start with postgres://, mysql:// or sqlite:// (got %q)", pu.Scheme+"://")
		}
	}
	return nil
}

// Databases are the databases cfg declares.
func Databases(cfg config.Config) map[string]string {
	return config.Get[Config](cfg, "sql").Databases
}
