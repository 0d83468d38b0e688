package builtin_test

import (
	"flag"
	"reflect"
	"testing"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector/builtin"
	"github.com/keep-run/keep/internal/testbin"
)

var update = flag.Bool("update", false, "rewrite the generated keep.toml reference in docs/scripts.md")

const (
	begin = "<!-- generated from the config schemas (builtin.ConfigMarkdown): begin -->\n"
	end   = "<!-- generated from the config schemas (builtin.ConfigMarkdown): end -->"
)

// docs/scripts.md's keep.toml reference is made from the tables' schemas:
// a key added, removed or changed without the document fails here.
// Rewrite it with: go test ./internal/connector/builtin -run TestConfigDocIsCurrent -update
func TestConfigDocIsCurrent(t *testing.T) {
	testbin.CurrentDoc(t, "../../../docs/scripts.md", begin, end, builtin.ConfigMarkdown(), *update,
		"go test ./internal/connector/builtin -run TestConfigDocIsCurrent -update")
}

// Every key of every table says what it is.
func TestEveryKeyHasADoc(t *testing.T) {
	var tables []config.Section
	tables = append(tables, config.Tables()...)
	tables = append(tables, config.Sections()...)
	for _, s := range tables {
		undocumented(t, s.Name, reflect.TypeOf(s.New()))
	}
}

func undocumented(t *testing.T, table string, ty reflect.Type) {
	for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Map {
		ty = ty.Elem()
	}
	if ty.Kind() != reflect.Struct {
		return
	}
	for i := 0; i < ty.NumField(); i++ {
		f := ty.Field(i)
		if f.Tag.Get("toml") == "" {
			t.Errorf("[%s] %s has no toml key", table, f.Name)
			continue
		}
		if f.Tag.Get("doc") == "" {
			t.Errorf("[%s] %s has no doc", table, f.Tag.Get("toml"))
		}
		undocumented(t, table+"."+f.Tag.Get("toml"), f.Type)
	}
}

// Every connector keep ships has its table registered, and every
// connector name is one declaration's: the registry's names come from All.
func TestEveryDeclarationIsWired(t *testing.T) {
	names := map[string]bool{}
	for _, d := range builtin.All {
		if names[d.Name] {
			t.Errorf("two declarations named %s", d.Name)
		}
		names[d.Name] = true
		if d.Build == nil {
			t.Errorf("%s: no Build", d.Name)
		}
		if d.Config.New != nil && d.Config.Name != d.Name {
			t.Errorf("%s: its table is named %s", d.Name, d.Config.Name)
		}
	}
	cfg, err := config.Parse("keep.toml", "[connectors.sql.databases]\nshop = \"sqlite:///tmp/shop.db\"\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range config.Sections() {
		if !names[s.Name] {
			t.Errorf("the table [connectors.%s] belongs to no declaration", s.Name)
		}
		if cfg.Connectors[s.Name] == nil {
			t.Errorf("[connectors.%s] was not decoded", s.Name)
		}
	}
}
