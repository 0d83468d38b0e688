package custom

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
)

// Custom is one connector declared in keep.toml over an HTTP API,
// [connectors.custom.NAME].
type Custom struct {
	BaseURL string                  `toml:"base_url" doc:"The API's base URL."`
	Doc     string                  `toml:"doc" doc:"What the connector reaches, for keep connectors and the Planner."`
	Headers map[string]string       `toml:"headers" doc:"Headers of every request; ${VAR} takes the environment's value, {secret:NAME} a secret of keep secret set, which must be scoped to base_url's host (keep secret scope NAME --host HOST)."`
	Sources []string                `toml:"sources" doc:"The registerInput sources it offers, \"source/type\"."`
	Methods map[string]CustomMethod `toml:"methods" doc:"Its methods, [connectors.custom.NAME.methods.METHOD]."`
}

// CustomMethod is one method of a custom connector.
type CustomMethod struct {
	Kind     string            `toml:"kind" doc:"\"read\" (list or search), \"readById\" or \"write\"."`
	Method   string            `toml:"method" doc:"The HTTP method (default GET for reads, POST for writes)."`
	Path     string            `toml:"path" doc:"\"/tickets/{id}\": {param} from the call's arguments."`
	Doc      string            `toml:"doc" doc:"What it does."`
	Params   map[string]string `toml:"params" doc:"Its params, name = what it is."`
	Required []string          `toml:"required" doc:"The params a call must give."`
	Identity []string          `toml:"identity" doc:"The params that name a write's target."`
	// Reconcile is a probe: {method, path}, with {idempotencyKey} and {param}s.
	Reconcile map[string]string `toml:"reconcile" doc:"A probe that finds a write: {method, path}, with {idempotencyKey} and {param}s."`
	// Errors maps HTTP statuses to classes (transient, logic, permission, precondition).
	Errors map[string]string `toml:"errors" doc:"HTTP statuses mapped to classes: transient, logic, permission or precondition."`
}

// Config is [connectors.custom]: the connectors by name.
type Config map[string]Custom

// Declaration declares the custom connectors; reserved reports the names
// of keep's own connectors, which a custom one may not take.
func Declaration(reserved func(name string) bool) connector.Declaration {
	return connector.Declaration{
		Name: "custom",
		Doc:  "Connectors of your own over an HTTP API, declared in keep.toml.",
		Config: config.Section{Name: "custom", Doc: "connectors declared over an HTTP API, one table each: [connectors.custom.NAME] and its [connectors.custom.NAME.methods.METHOD].",
			New: func() any { return &Config{} }, Check: func(v any, _ *config.Config) error { return check(*v.(*Config), reserved) }},
		Build: func(table any, h *connector.Host) ([]*connector.Connector, error) {
			var out []*connector.Connector
			for name, c := range *table.(*Config) {
				out = append(out, New(name, c, h.Guard))
			}
			return out, nil
		},
	}
}

var nameRe = regexp.MustCompile(`^[a-z][A-Za-z0-9_]*$`)

// check reads the declarations strictly: bad kinds, URLs, classes and
// identity params are errors naming the place.
func check(cs Config, reserved func(string) bool) error {
	for cname, c := range cs {
		if !nameRe.MatchString(cname) || reserved(cname) {
			return config.KeyErrorf(cname, "is not a connector name: a JavaScript identifier (ctx.%s.method) and not one of keep's own", cname)
		}
		if config.HTTPURL(c.BaseURL) != nil {
			return config.KeyErrorf(cname+".base_url", "must be an http(s) URL, got %q", c.BaseURL)
		}
		for _, src := range c.Sources {
			if s, t, ok := strings.Cut(src, "/"); !ok || s == "" || t == "" {
				return config.KeyErrorf(cname+".sources", "are \"source/type\", like \"crm/ticket\"; got %q", src)
			}
		}
		if len(c.Methods) == 0 {
			return config.KeyErrorf(cname, "declares no method: add [connectors.custom.%s.methods.NAME]", cname)
		}
		for mname, m := range c.Methods {
			if err := checkMethod(m); err != nil {
				return config.KeyErrorf(cname+".methods."+mname, "%v", err)
			}
			if !nameRe.MatchString(mname) {
				return config.KeyErrorf(cname+".methods."+mname, "is not a method name: a JavaScript identifier")
			}
		}
	}
	return nil
}

func checkMethod(m CustomMethod) error {
	switch m.Kind {
	case "read", "readById", "write":
	default:
		return fmt.Errorf("kind must be \"read\" (list or search), \"readById\" (one thing by its id: mutate may call it) or \"write\", got %q", m.Kind)
	}
	if !strings.HasPrefix(m.Path, "/") {
		return fmt.Errorf("path must start with /, like \"/tickets/{id}\"")
	}
	for _, id := range append(append([]string{}, m.Identity...), m.Required...) {
		if _, ok := m.Params[id]; !ok {
			return fmt.Errorf("%q is not one of its params (declare it in params)", id)
		}
	}
	if m.Kind == "write" && len(m.Identity) == 0 {
		return fmt.Errorf("a write needs identity: the params that name what it changes")
	}
	for k := range m.Reconcile {
		if k != "method" && k != "path" {
			return fmt.Errorf("reconcile has method and path only")
		}
	}
	if m.Reconcile != nil && !strings.HasPrefix(m.Reconcile["path"], "/") {
		return fmt.Errorf("reconcile.path must start with /, like \"/tickets/by-key/{idempotencyKey}\"")
	}
	for status, class := range m.Errors {
		if n, err := strconv.Atoi(status); err != nil || n < 400 || n > 599 {
			return fmt.Errorf("errors maps HTTP statuses 400–599, got %q", status)
		}
		switch class {
		case "transient", "logic", "permission", "precondition":
		default:
			return fmt.Errorf("errors.%s must be transient, logic, permission or precondition, got %q", status, class)
		}
	}
	return nil
}
