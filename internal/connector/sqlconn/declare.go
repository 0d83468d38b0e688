package sqlconn

import (
	"net/url"
	"regexp"
	"strings"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
)

// Config is [connectors.sql].
type Config struct {
	Databases map[string]string   `toml:"databases" doc:"The databases scripts may name, NAME = \"URL\": postgres://user@host:5432/db, mysql://user:pass@host:3306/db or sqlite:///path/to.db. Scripts write db: \"NAME\", never a URL."`
	Allow     map[string][]string `toml:"allow" doc:"What keep cannot judge and refuses by default, allowed knowingly per database, NAME = [\"…\"]: \"superuser\" (a PostgreSQL role with superuser, CREATEROLE, the server-files, server-program or signal roles, or EXECUTE on pg_read_file and the like; a MariaDB user or current role with SUPER, FILE, CONNECTION ADMIN or FEDERATED ADMIN, or a MariaDB user that may use any role), a PostgreSQL extension keep does not know (\"dblink\", \"postgres_fdw\": a statement then reaches other databases, keep's store among them), a MariaDB storage engine (\"FEDERATED\", \"CONNECT\")."`
}

// Declaration is the sql connector's declaration.
var Declaration = connector.Declaration{
	Name: "sql",
	Doc:  "PostgreSQL, MariaDB/MySQL and SQLite databases declared in keep.toml.",
	Config: config.Section{Name: "sql", Doc: "the databases scripts may query and write. Credentials stay in keep.toml.",
		New: func() any { return &Config{} }, Check: checkConfig},
	Build: func(table any, h *connector.Host) ([]*connector.Connector, error) {
		cfg := table.(*Config)
		c, pools := New(cfg.Databases, Allow(cfg.Allow), KeepsStore(h.StoreURL))
		h.OnClose(pools.Close)
		return []*connector.Connector{c}, nil
	},
}

var dbNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

func checkConfig(v any, _ *config.Config) error {
	for db, items := range v.(*Config).Allow {
		if _, ok := v.(*Config).Databases[db]; !ok {
			return config.KeyErrorf("allow."+db, "names no database of [connectors.sql.databases]")
		}
		for _, it := range items {
			if strings.TrimSpace(it) == "" {
				return config.KeyErrorf("allow."+db, "holds an empty name: \"superuser\", an extension or a storage engine")
			}
		}
	}
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
		if _, _, err := dsnOf(u); err != nil {
			return config.KeyErrorf(key, "%v", err)
		}
	}
	return nil
}

// Databases are the databases cfg declares.
func Databases(cfg config.Config) map[string]string {
	return config.Get[Config](cfg, "sql").Databases
}
