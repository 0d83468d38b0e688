// Package builtin is the one list of the connectors keep ships. The
// daemon builds them from it, the config reads their tables' schemas from
// it, `keep connect` and `keep connectors` and docs/scripts.md read it: a
// new connector is one new package and one line in All.
package builtin

import (
	"fmt"
	"sort"
	"strings"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/custom"
	"github.com/keep-run/keep/internal/connector/email"
	"github.com/keep-run/keep/internal/connector/files"
	"github.com/keep-run/keep/internal/connector/google"
	khttp "github.com/keep-run/keep/internal/connector/http"
	"github.com/keep-run/keep/internal/connector/slackconn"
	"github.com/keep-run/keep/internal/connector/sqlconn"
	"github.com/keep-run/keep/internal/connector/system"
)

// All are the declarations of every connector keep ships.
var All = []connector.Declaration{
	files.Declaration,
	system.Declaration,
	khttp.Declaration,
	sqlconn.Declaration,
	email.Declaration,
	slackconn.Declaration,
	google.Declaration,
	custom.Declaration(ownName),
}

// ownName reaches reserved through a variable set at init: reserved reads All.
func ownName(name string) bool { return isReserved(name) }

var isReserved func(string) bool

func init() {
	isReserved = reserved
	for _, d := range All {
		if d.Config.New != nil {
			config.Register(d.Config)
		}
	}
}

// reserved reports whether name is one of keep's own connectors (a custom
// connector may not take it).
func reserved(name string) bool {
	for _, d := range All {
		if d.Name == "custom" {
			continue
		}
		cs, err := d.Build(table(config.Config{}, d), &connector.Host{})
		if err != nil {
			continue
		}
		for _, c := range cs {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}

// table is d's decoded table in cfg (its defaults when cfg has none).
func table(cfg config.Config, d connector.Declaration) any {
	if d.Config.New == nil {
		return nil
	}
	if v, ok := cfg.Connectors[d.Config.Name]; ok {
		return v
	}
	return d.Config.New()
}

// Find returns the declaration named name.
func Find(name string) (connector.Declaration, bool) {
	for _, d := range All {
		if d.Name == name {
			return d, true
		}
	}
	return connector.Declaration{}, false
}

// Connectable lists the names `keep connect` takes.
func Connectable() []string {
	var out []string
	for _, d := range All {
		if d.Connect != nil {
			out = append(out, d.Name)
		}
	}
	sort.Strings(out)
	return out
}

// Set is the connectors built from every declaration for one host.
type Set struct {
	host    *connector.Host
	shared  []*connector.Connector
	perRoot []connector.Declaration
}

// Build builds every declaration's connectors for h (h.Config holds the
// tables).
func Build(h *connector.Host) (*Set, error) {
	s := &Set{host: h}
	for _, d := range All {
		if d.PerRoot {
			s.perRoot = append(s.perRoot, d)
			continue
		}
		cs, err := d.Build(table(h.Config, d), h)
		if err != nil {
			return nil, fmt.Errorf("connector %s: %w", d.Name, err)
		}
		s.shared = append(s.shared, cs...)
	}
	return s, nil
}

// Registry is the set's connectors with the files root root.
func (s *Set) Registry(root string) *connector.Registry {
	cs := append([]*connector.Connector(nil), s.shared...)
	h := *s.host
	h.FilesRoot = root
	for _, d := range s.perRoot {
		built, err := d.Build(table(h.Config, d), &h)
		if err != nil {
			panic(fmt.Sprintf("connector %s: %v", d.Name, err)) // a per-root build has nothing that can fail
		}
		cs = append(cs, built...)
	}
	return connector.NewRegistry(cs...)
}

// Close closes what the connectors opened (the sql pools).
func (s *Set) Close() { s.host.Close() }

// ConfigMarkdown is the reference of keep.toml for docs/scripts.md: keep's
// own tables, then each connector's, from their schemas.
func ConfigMarkdown() string {
	var b strings.Builder
	for _, t := range config.Tables() {
		b.WriteString(config.Markdown(t.Name, t.Doc, t.New()))
	}
	for _, d := range All {
		if d.Config.New != nil {
			b.WriteString(config.Markdown("connectors."+d.Config.Name, d.Config.Doc, d.Config.New()))
		}
	}
	return b.String()
}
