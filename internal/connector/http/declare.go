package http

import (
	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/netguard"
)

// Config is [connectors.http].
type Config struct {
	Allow []string `toml:"allow" doc:"The hosts on this machine or its private networks that the http connector, custom connectors and the [notify] webhook may reach: \"127.0.0.1:8090\" (that port), \"localhost\" (every port); everything else internal is refused."`
}

// Declaration is the http connector's declaration.
var Declaration = connector.Declaration{
	Name: "http",
	Doc:  "Any HTTP API.",
	Config: config.Section{Name: "http", Doc: "what the connectors that reach URLs may reach.", New: func() any { return &Config{} }, Check: func(v any, _ *config.Config) error {
		for i, s := range v.(*Config).Allow {
			if _, _, err := netguard.Parse(s); err != nil {
				return config.KeyErrorf("allow", "[%d]: %v", i, err)
			}
		}
		return nil
	}},
	Build: func(table any, h *connector.Host) ([]*connector.Connector, error) {
		return []*connector.Connector{New(h.Guard)}, nil
	},
}

// Allow is what [connectors.http] allow names in cfg.
func Allow(cfg config.Config) []string { return config.Get[Config](cfg, "http").Allow }
