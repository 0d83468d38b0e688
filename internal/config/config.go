// Package config reads keep's host configuration (TOML) and holds the host
// policies of SPEC §6 with their defaults, applied in one place.
//
// It imports keeptype only.
package config

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/keep-run/keep/internal/netguard"
)

// Policy is the set of host policies. Every field's default is set by Defaults.
type Policy struct {
	// TransientRetries is how many automatic retries a transient failure gets. Defaults to 5.
	TransientRetries int
	// TransientBackoff is the first retry's delay; each next doubles. Defaults to 10s.
	TransientBackoff time.Duration
	// TransientBackoffMax caps the delay. Defaults to 10m.
	TransientBackoffMax time.Duration
	// ReconcileAttempts is how many background reconcile attempts follow the inline one. Defaults to 5.
	ReconcileAttempts int
	// ReconcileBackoff is the first background attempt's delay. Defaults to 10s.
	ReconcileBackoff time.Duration
	// ReconcileBackoffMax caps the delay. Defaults to 10m.
	ReconcileBackoffMax time.Duration
	// ReconcileSettle is how long after an uncertain call a reconcile's "it
	// did not happen" must be seen again before keep believes it: a slow
	// server may still apply the write after the call timed out. The call's
	// own timeout is used when it is longer. Defaults to 0 (the call's timeout).
	ReconcileSettle time.Duration
	// HandlerTimeout is the wall-time limit of one handler phase. Defaults to 300s.
	HandlerTimeout time.Duration
	// ToolTimeout is the limit of one connector call. Defaults to 30s.
	ToolTimeout time.Duration
	// MemoryLimit is the sandbox heap per run, in bytes. Defaults to 64 MiB.
	MemoryLimit int64
	// Workers bounds how many workflows step at the same time. Defaults to
	// 32: more steps in flight let more transitions share one fsync (group
	// commit: 0.7 fsyncs per run with 16, 0.4 with 32 in keep bench), and
	// runs waiting on slow services do not hold others up.
	Workers int
	// LeaseTTL is how long a node's lease of a workflow lasts without a
	// renewal (PostgreSQL, several nodes): a node that dies has its
	// workflows taken over within it. Defaults to 15s.
	LeaseTTL time.Duration
	// SandboxWorkers bounds the idle sandbox worker processes kept between
	// handler calls (≈ 15 MiB each); a script version without an idle one
	// starts a new process (≈ 10 ms). Defaults to 128.
	SandboxWorkers int
}

// Defaults returns the built-in policies of SPEC §6.
func Defaults() Policy {
	return Policy{
		TransientRetries: 5, TransientBackoff: 10 * time.Second, TransientBackoffMax: 10 * time.Minute,
		ReconcileAttempts: 5, ReconcileBackoff: 10 * time.Second, ReconcileBackoffMax: 10 * time.Minute,
		HandlerTimeout: 300 * time.Second, ToolTimeout: 30 * time.Second, MemoryLimit: 64 << 20,
		Workers: 32, SandboxWorkers: 128, LeaseTTL: 15 * time.Second,
	}
}

// Backoff returns base × 2^(n−1), capped, for the n-th retry (n ≥ 1).
func Backoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

// Config is the whole file.
type Config struct {
	Policy Policy
	Google Google
	SQL    SQL
	Email  Email
	Notify Notify
	// SlackEndpoint is a Slack stand-in's base URL ([connectors.slack]
	// endpoint, keep-fake slack); empty is Slack.
	SlackEndpoint string
	// HTTPAllow ([connectors.http] allow) names the hosts on this machine
	// or its private networks that the http connector, custom connectors
	// and the [notify] webhook may reach: "127.0.0.1:8090" (that port),
	// "localhost" (every port). Everything else internal is refused
	// (netguard). One list for all three: each reaches a URL.
	HTTPAllow []string
	// Custom are the connectors declared over HTTP ([connectors.custom.NAME]).
	Custom     map[string]Custom
	LLM        LLM
	Maintainer Maintainer
}

// LLM is [llm]: an OpenAI-compatible chat-completions endpoint.
// KEEP_LLM_BASE_URL and KEEP_LLM_MODEL override the file.
type LLM struct {
	BaseURL   string
	Model     string
	APIKeyEnv string // the environment variable holding the key (default KEEP_LLM_API_KEY)
}

// Set reports whether an endpoint is configured.
func (l LLM) Set() bool { return l.BaseURL != "" && l.Model != "" }

// Maintainer is [maintainer]: the agent that repairs failed:logic runs.
type Maintainer struct {
	Enabled          bool // default: true when [llm] is set
	MaxAttempts      int  // per failure (default 3)
	DailyTokenBudget int  // per workflow and day (default 200000)
}

// Custom is a connector declared in keep.toml over an HTTP API.
type Custom struct {
	BaseURL string            `toml:"base_url"`
	Doc     string            `toml:"doc"`
	Headers map[string]string `toml:"headers"` // ${VAR} takes the environment's value
	Sources []string          `toml:"sources"` // "source/type"
	Methods map[string]CustomMethod
}

// CustomMethod is one method of a custom connector.
type CustomMethod struct {
	Kind     string            `toml:"kind"`   // "read" (list/search), "readById" or "write"
	Method   string            `toml:"method"` // HTTP method (default GET for reads, POST for writes)
	Path     string            `toml:"path"`   // "/tickets/{id}": {param} from the call's arguments
	Doc      string            `toml:"doc"`
	Params   map[string]string `toml:"params"`   // name → what it is
	Required []string          `toml:"required"` // params a call must give
	Identity []string          `toml:"identity"` // the params that name a write's target
	// Reconcile is a probe: {method, path}, with {idempotencyKey} and {param}s.
	Reconcile map[string]string `toml:"reconcile"`
	// Errors maps HTTP statuses to classes (transient, logic, permission, precondition).
	Errors map[string]string `toml:"errors"`
}

// Notify is [notify]: how keep tells a person that a run needs them.
type Notify struct {
	// Webhook receives a POST with the card as JSON.
	Webhook string
	// Email receives a message, sent through [connectors.email] smtp.
	Email string
	// Slack is a channel the notices are posted to, as the bot of keep
	// connect slack.
	Slack string
	// PageURL is where links in notices point (keep serve's address).
	PageURL string
	// Digest is the time of day (UTC, "HH:MM") of the daily digest of
	// what still waits; empty: no digest.
	Digest string
}

// Email is [connectors.email]: the mailbox of the email connector.
type Email struct {
	IMAP, SMTP, From, SentFolder string
	// ServerKeepsSent: the SMTP server files what it sends into the Sent
	// folder itself, so "not in Sent" proves "not sent" (once a message of
	// keep's was seen filed by the server: the email connector checks).
	ServerKeepsSent bool
	// CAFile is a PEM file of the CA (private) that signed the servers'
	// certificates; empty trusts the system's CAs.
	CAFile string
	// StartTLS asks STARTTLS of imap:// and smtp:// servers on this
	// machine too (elsewhere it is always asked).
	StartTLS bool
}

// SQL is [connectors.sql]: the databases scripts may name, NAME = URL
// (postgres://…, mysql://user:pass@host:3306/db, sqlite:///path/to.db).
type SQL struct {
	Databases map[string]string
}

// Google is [connectors.google]: the OAuth client keep connects Google
// accounts with, and where Google is (keep-fake google, for trying keep
// and for tests). KEEP_GOOGLE_CLIENT_ID and KEEP_GOOGLE_CLIENT_SECRET
// override the file.
type Google struct {
	ClientID     string
	ClientSecret string
	// Endpoint is the base URL of a Google stand-in serving OAuth and the
	// APIs under one root; empty means Google itself.
	Endpoint string
}

type fileShape struct {
	Policy map[string]any `toml:"policy"`
}

// Load reads a TOML config file over the defaults. Unknown keys and bad
// values are errors that name the file, the key and what is expected.
func Load(path string) (Config, error) {
	cfg := Config{Policy: Defaults()}
	if path == "" {
		err := parseConnectors("", nil, &cfg) // the environment's client
		if err == nil {
			err = parseLLM("", nil, nil, &cfg) // and endpoint
		}
		return cfg, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return Parse(path, string(b))
}

// Parse reads config text; name is used in messages.
func Parse(name, text string) (Config, error) {
	cfg := Config{Policy: Defaults()}
	var raw map[string]any
	md, err := toml.Decode(text, &raw)
	if err != nil {
		return cfg, fmt.Errorf("config %s: %v", name, err)
	}
	_ = md
	for k := range raw {
		if k != "policy" && k != "connectors" && k != "notify" && k != "llm" && k != "maintainer" {
			return cfg, fmt.Errorf("config %s: unknown section or key %q (known: [policy], [connectors.*], [notify], [llm], [maintainer])", name, k)
		}
	}
	if err := parseConnectors(name, raw["connectors"], &cfg); err != nil {
		return cfg, err
	}
	if err := parseNotify(name, raw["notify"], &cfg); err != nil {
		return cfg, err
	}
	if err := parseCustom(name, text, &cfg); err != nil {
		return cfg, err
	}
	if err := parseLLM(name, raw["llm"], raw["maintainer"], &cfg); err != nil {
		return cfg, err
	}
	if cfg.Notify.Email != "" && (cfg.Email.SMTP == "" || cfg.Email.From == "") {
		return cfg, fmt.Errorf("config %s: [notify] email sends through [connectors.email]: set its smtp and from too", name)
	}
	pol, _ := raw["policy"].(map[string]any)
	if raw["policy"] != nil && pol == nil {
		return cfg, fmt.Errorf("config %s: policy must be a table: [policy]", name)
	}
	p := &cfg.Policy
	for k, v := range pol {
		where := fmt.Sprintf("config %s: [policy] %s", name, k)
		var err error
		switch k {
		case "transient_retries":
			p.TransientRetries, err = count(v)
		case "reconcile_attempts":
			p.ReconcileAttempts, err = count(v)
		case "transient_backoff":
			p.TransientBackoff, err = duration(v)
		case "transient_backoff_max":
			p.TransientBackoffMax, err = duration(v)
		case "reconcile_backoff":
			p.ReconcileBackoff, err = duration(v)
		case "reconcile_backoff_max":
			p.ReconcileBackoffMax, err = duration(v)
		case "reconcile_settle":
			p.ReconcileSettle, err = duration(v)
		case "lease_ttl":
			p.LeaseTTL, err = duration(v)
		case "handler_timeout":
			p.HandlerTimeout, err = duration(v)
		case "tool_timeout":
			p.ToolTimeout, err = duration(v)
		case "memory_limit":
			p.MemoryLimit, err = size(v)
			if err == nil && p.MemoryLimit < 1<<20 {
				err = fmt.Errorf("must be at least 1MiB")
			}
		case "sandbox_workers":
			p.SandboxWorkers, err = count(v)
			if err == nil && p.SandboxWorkers < 1 {
				err = fmt.Errorf("must be at least 1")
			}
		case "workers":
			p.Workers, err = count(v)
			if err == nil && p.Workers < 1 {
				err = fmt.Errorf("must be at least 1")
			}
		default:
			return cfg, fmt.Errorf("config %s: unknown policy key %q (known: transient_retries, transient_backoff, transient_backoff_max, reconcile_attempts, reconcile_backoff, reconcile_backoff_max, reconcile_settle, handler_timeout, tool_timeout, memory_limit, workers, sandbox_workers, lease_ttl)", name, k)
		}
		if err != nil {
			return cfg, fmt.Errorf("%s: %v", where, err)
		}
	}
	return cfg, nil
}

func parseConnectors(name string, v any, cfg *Config) error {
	defer func() {
		if id := os.Getenv("KEEP_GOOGLE_CLIENT_ID"); id != "" {
			cfg.Google.ClientID = id
		}
		if sec := os.Getenv("KEEP_GOOGLE_CLIENT_SECRET"); sec != "" {
			cfg.Google.ClientSecret = sec
		}
	}()
	if v == nil {
		return nil
	}
	conns, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("config %s: connectors must be a table: [connectors.google]", name)
	}
	for k, sect := range conns {
		if k == "sql" {
			if err := parseSQL(name, sect, cfg); err != nil {
				return err
			}
			continue
		}
		if k == "email" {
			if err := parseEmail(name, sect, cfg); err != nil {
				return err
			}
			continue
		}
		if k == "custom" {
			continue // parseCustom reads it, strictly
		}
		if k == "http" {
			if err := parseHTTP(name, sect, cfg); err != nil {
				return err
			}
			continue
		}
		if k == "slack" {
			sl, ok := sect.(map[string]any)
			if !ok {
				return fmt.Errorf("config %s: [connectors.slack] must be a table", name)
			}
			for key, val := range sl {
				str, isStr := val.(string)
				u, err := url.Parse(str)
				if key != "endpoint" || !isStr || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return fmt.Errorf("config %s: [connectors.slack] knows only endpoint = \"http://…\" (what keep-fake slack prints; the token is stored by keep connect slack --token)", name)
				}
				cfg.SlackEndpoint = strings.TrimRight(str, "/")
			}
			continue
		}
		if k != "google" {
			return fmt.Errorf("config %s: unknown connector section [connectors.%s] (known: [connectors.google], [connectors.slack], [connectors.http], [connectors.sql.databases], [connectors.email], [connectors.custom.NAME])", name, k)
		}
		g, ok := sect.(map[string]any)
		if !ok {
			return fmt.Errorf("config %s: [connectors.google] must be a table", name)
		}
		for key, val := range g {
			str, isStr := val.(string)
			if !isStr {
				return fmt.Errorf("config %s: [connectors.google] %s must be a string, got %v", name, key, val)
			}
			switch key {
			case "client_id":
				cfg.Google.ClientID = str
			case "client_secret":
				cfg.Google.ClientSecret = str
			case "endpoint":
				u, err := url.Parse(str)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return fmt.Errorf("config %s: [connectors.google] endpoint must be an http(s) URL like \"http://127.0.0.1:8080\" (what keep-fake google prints), got %q", name, str)
				}
				cfg.Google.Endpoint = strings.TrimRight(str, "/")
			default:
				return fmt.Errorf("config %s: unknown key [connectors.google] %s (known: client_id, client_secret, endpoint)", name, key)
			}
		}
	}
	return nil
}

// parseHTTP reads [connectors.http]: allow = ["host:port", "host"].
func parseHTTP(name string, v any, cfg *Config) error {
	sect, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("config %s: [connectors.http] must be a table", name)
	}
	for k, val := range sect {
		if k != "allow" {
			return fmt.Errorf("config %s: unknown key [connectors.http] %s (known: allow = [\"127.0.0.1:8090\", \"localhost\"])", name, k)
		}
		list, ok := val.([]any)
		if !ok {
			return fmt.Errorf("config %s: [connectors.http] allow must be a list of hosts: allow = [\"127.0.0.1:8090\", \"localhost\"]", name)
		}
		for i, e := range list {
			s, isStr := e.(string)
			if !isStr {
				return fmt.Errorf("config %s: [connectors.http] allow[%d] must be a string like \"127.0.0.1:8090\", got %v", name, i, e)
			}
			if _, _, err := netguard.Parse(s); err != nil {
				return fmt.Errorf("config %s: [connectors.http] allow[%d]: %v", name, i, err)
			}
			cfg.HTTPAllow = append(cfg.HTTPAllow, s)
		}
	}
	return nil
}

func parseLLM(name string, llm, maint any, cfg *Config) error {
	cfg.LLM.APIKeyEnv = "KEEP_LLM_API_KEY"
	cfg.Maintainer = Maintainer{MaxAttempts: 3, DailyTokenBudget: 200000}
	if llm != nil {
		sect, ok := llm.(map[string]any)
		if !ok {
			return fmt.Errorf("config %s: llm must be a table: [llm]", name)
		}
		for k, v := range sect {
			str, isStr := v.(string)
			if !isStr {
				return fmt.Errorf("config %s: [llm] %s must be a string", name, k)
			}
			switch k {
			case "base_url":
				u, err := url.Parse(str)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return fmt.Errorf("config %s: [llm] base_url must be an http(s) URL ending in /v1, like \"https://api.openai.com/v1\" or \"http://127.0.0.1:11434/v1\" (Ollama), got %q", name, str)
				}
				cfg.LLM.BaseURL = strings.TrimRight(str, "/")
			case "model":
				cfg.LLM.Model = str
			case "api_key_env":
				cfg.LLM.APIKeyEnv = str
			default:
				return fmt.Errorf("config %s: unknown key [llm] %s (known: base_url, model, api_key_env)", name, k)
			}
		}
	}
	if v := os.Getenv("KEEP_LLM_BASE_URL"); v != "" {
		cfg.LLM.BaseURL = strings.TrimRight(v, "/")
	}
	if v := os.Getenv("KEEP_LLM_MODEL"); v != "" {
		cfg.LLM.Model = v
	}
	if cfg.LLM.BaseURL != "" && cfg.LLM.Model == "" {
		return fmt.Errorf("config %s: [llm] needs model = \"…\" (the model's name at %s)", name, cfg.LLM.BaseURL)
	}
	cfg.Maintainer.Enabled = cfg.LLM.Set()
	if maint == nil {
		return nil
	}
	sect, ok := maint.(map[string]any)
	if !ok {
		return fmt.Errorf("config %s: maintainer must be a table: [maintainer]", name)
	}
	for k, v := range sect {
		where := fmt.Sprintf("config %s: [maintainer] %s", name, k)
		var err error
		switch k {
		case "enabled":
			b, isBool := v.(bool)
			if !isBool {
				return fmt.Errorf("%s must be true or false", where)
			}
			cfg.Maintainer.Enabled = b && cfg.LLM.Set()
			if b && !cfg.LLM.Set() {
				return fmt.Errorf("%s: the Maintainer needs [llm] base_url and model", where)
			}
		case "max_attempts":
			cfg.Maintainer.MaxAttempts, err = count(v)
			if err == nil && cfg.Maintainer.MaxAttempts < 1 {
				err = fmt.Errorf("must be at least 1")
			}
		case "daily_token_budget":
			n, isInt := v.(int64)
			if !isInt || n < 1000 {
				err = fmt.Errorf("must be a whole number of tokens, at least 1000")
			}
			cfg.Maintainer.DailyTokenBudget = int(n)
		default:
			return fmt.Errorf("config %s: unknown key [maintainer] %s (known: enabled, max_attempts, daily_token_budget)", name, k)
		}
		if err != nil {
			return fmt.Errorf("%s: %v", where, err)
		}
	}
	return nil
}

var nameRe = regexp.MustCompile(`^[a-z][A-Za-z0-9_]*$`)

// builtIn are the connectors keep ships; a custom one may not take a name.
var builtIn = map[string]bool{"files": true, "http": true, "system": true, "sql": true, "email": true, "slack": true, "gmail": true, "sheets": true, "calendar": true}

// parseCustom reads [connectors.custom.NAME] strictly: unknown keys, bad
// kinds, URLs, classes and identity params are errors naming the place.
func parseCustom(name, text string, cfg *Config) error {
	var shape struct {
		Connectors struct {
			Custom map[string]Custom `toml:"custom"`
		} `toml:"connectors"`
	}
	md, err := toml.Decode(text, &shape)
	if err != nil {
		return fmt.Errorf("config %s: %v", name, err)
	}
	for _, k := range md.Undecoded() {
		if len(k) > 1 && k[0] == "connectors" && k[1] == "custom" {
			return fmt.Errorf("config %s: unknown key [%s] (a custom connector has base_url, doc, headers, sources, methods.NAME; a method has kind, method, path, doc, params, required, identity, reconcile, errors)", name, k.String())
		}
	}
	for cname, c := range shape.Connectors.Custom {
		where := fmt.Sprintf("config %s: [connectors.custom.%s]", name, cname)
		if !nameRe.MatchString(cname) || builtIn[cname] {
			return fmt.Errorf("%s: a connector's name is a JavaScript identifier (ctx.%s.method) and not one of keep's own", where, cname)
		}
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s: base_url must be an http(s) URL, got %q", where, c.BaseURL)
		}
		for _, src := range c.Sources {
			if s, t, ok := strings.Cut(src, "/"); !ok || s == "" || t == "" {
				return fmt.Errorf("%s: sources are \"source/type\", like \"crm/ticket\"; got %q", where, src)
			}
		}
		if len(c.Methods) == 0 {
			return fmt.Errorf("%s: declare at least one method: [connectors.custom.%s.methods.NAME]", where, cname)
		}
		for mname, m := range c.Methods {
			mw := fmt.Sprintf("config %s: [connectors.custom.%s.methods.%s]", name, cname, mname)
			if !nameRe.MatchString(mname) {
				return fmt.Errorf("%s: a method's name is a JavaScript identifier", mw)
			}
			switch m.Kind {
			case "read", "readById", "write":
			default:
				return fmt.Errorf("%s: kind must be \"read\" (list or search), \"readById\" (one thing by its id: mutate may call it) or \"write\", got %q", mw, m.Kind)
			}
			if !strings.HasPrefix(m.Path, "/") {
				return fmt.Errorf("%s: path must start with /, like \"/tickets/{id}\"", mw)
			}
			for _, id := range append(append([]string{}, m.Identity...), m.Required...) {
				if _, ok := m.Params[id]; !ok {
					return fmt.Errorf("%s: %q is not one of its params (declare it in params)", mw, id)
				}
			}
			if m.Kind == "write" && len(m.Identity) == 0 {
				return fmt.Errorf("%s: a write needs identity: the params that name what it changes", mw)
			}
			for k := range m.Reconcile {
				if k != "method" && k != "path" {
					return fmt.Errorf("%s: reconcile has method and path only", mw)
				}
			}
			if m.Reconcile != nil && !strings.HasPrefix(m.Reconcile["path"], "/") {
				return fmt.Errorf("%s: reconcile.path must start with /, like \"/tickets/by-key/{idempotencyKey}\"", mw)
			}
			for status, class := range m.Errors {
				if n, err := strconv.Atoi(status); err != nil || n < 400 || n > 599 {
					return fmt.Errorf("%s: errors maps HTTP statuses 400–599, got %q", mw, status)
				}
				switch class {
				case "transient", "logic", "permission", "precondition":
				default:
					return fmt.Errorf("%s: errors.%s must be transient, logic, permission or precondition, got %q", mw, status, class)
				}
			}
		}
		if cfg.Custom == nil {
			cfg.Custom = map[string]Custom{}
		}
		cfg.Custom[cname] = c
	}
	return nil
}

var digestRe = regexp.MustCompile(`^([01]\d|2[0-3]):[0-5]\d$`)

func parseNotify(name string, v any, cfg *Config) error {
	if v == nil {
		return nil
	}
	sect, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("config %s: notify must be a table: [notify]", name)
	}
	for k, val := range sect {
		where := fmt.Sprintf("config %s: [notify] %s", name, k)
		str, isStr := val.(string)
		if !isStr {
			return fmt.Errorf("%s must be a string", where)
		}
		isURL := func() error {
			u, err := url.Parse(str)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("%s must be an http(s) URL, got %q", where, str)
			}
			return nil
		}
		var err error
		switch k {
		case "webhook":
			err, cfg.Notify.Webhook = isURL(), str
		case "page_url":
			err, cfg.Notify.PageURL = isURL(), strings.TrimRight(str, "/")
		case "email":
			cfg.Notify.Email = str
			if !strings.Contains(str, "@") {
				err = fmt.Errorf("%s must be an email address", where)
			}
		case "slack":
			cfg.Notify.Slack = str
			if strings.TrimSpace(str) == "" {
				err = fmt.Errorf("%s must name a channel, like \"#ops\" or \"C0123456\"", where)
			}
		case "digest":
			cfg.Notify.Digest = str
			if !digestRe.MatchString(str) {
				err = fmt.Errorf("%s must be a time of day in UTC like \"09:00\", got %q", where, str)
			}
		default:
			err = fmt.Errorf("config %s: unknown key [notify] %s (known: webhook, email, slack, page_url, digest)", name, k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func parseEmail(name string, v any, cfg *Config) error {
	sect, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("config %s: [connectors.email] must be a table", name)
	}
	for k, val := range sect {
		where := fmt.Sprintf("config %s: [connectors.email] %s", name, k)
		if k == "server_keeps_sent" || k == "starttls" {
			b, isBool := val.(bool)
			if !isBool {
				return fmt.Errorf("%s must be true or false", where)
			}
			if k == "starttls" {
				cfg.Email.StartTLS = b
			} else {
				cfg.Email.ServerKeepsSent = b
			}
			continue
		}
		str, isStr := val.(string)
		if !isStr {
			return fmt.Errorf("%s must be a string", where)
		}
		scheme := func(allowed ...string) error {
			u, err := url.Parse(str)
			if err == nil {
				for _, a := range allowed {
					if u.Scheme == a && u.Host != "" {
						return nil
					}
				}
			}
			return fmt.Errorf("%s must be a URL like \"%s://user:password@host\" (%s)", where, allowed[0], strings.Join(allowed, "://, ")+"://")
		}
		var err error
		switch k {
		case "imap":
			err, cfg.Email.IMAP = scheme("imaps", "imap"), str
		case "smtp":
			err, cfg.Email.SMTP = scheme("smtps", "smtp"), str
		case "from":
			cfg.Email.From = str
			if !strings.Contains(str, "@") {
				err = fmt.Errorf("%s must be an email address", where)
			}
		case "sent_folder":
			cfg.Email.SentFolder = str
		case "ca_file":
			cfg.Email.CAFile = str
			if b, rerr := os.ReadFile(str); rerr != nil {
				err = fmt.Errorf("%s: %v", where, rerr)
			} else if !x509.NewCertPool().AppendCertsFromPEM(b) {
				err = fmt.Errorf("%s: %s holds no PEM certificate (a CA's, \"-----BEGIN CERTIFICATE-----\")", where, str)
			}
		default:
			err = fmt.Errorf("config %s: unknown key [connectors.email] %s (known: imap, smtp, from, sent_folder, server_keeps_sent, starttls, ca_file)", name, k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

var dbNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

func parseSQL(name string, v any, cfg *Config) error {
	sect, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("config %s: [connectors.sql] must be a table", name)
	}
	for k, val := range sect {
		if k != "databases" {
			return fmt.Errorf("config %s: unknown key [connectors.sql] %s (known: [connectors.sql.databases])", name, k)
		}
		dbs, ok := val.(map[string]any)
		if !ok {
			return fmt.Errorf("config %s: [connectors.sql.databases] must be a table of NAME = \"URL\"", name)
		}
		cfg.SQL.Databases = map[string]string{}
		for db, u := range dbs {
			where := fmt.Sprintf("config %s: [connectors.sql.databases] %s", name, db)
			str, isStr := u.(string)
			if !isStr {
				return fmt.Errorf("%s must be a URL string like \"postgres://user@host:5432/db\"", where)
			}
			if !dbNameRe.MatchString(db) {
				return fmt.Errorf("%s: a database's name is letters, digits, _ and - (scripts write it as db: \"NAME\")", where)
			}
			pu, err := url.Parse(str)
			if err != nil {
				return fmt.Errorf("%s: %v", where, err)
			}
			switch pu.Scheme {
			case "postgres", "postgresql", "mysql", "sqlite":
			default:
				return fmt.Errorf("%s: the URL must start with postgres://, mysql:// or sqlite:// (got %q)", where, pu.Scheme+"://")
			}
			cfg.SQL.Databases[db] = str
		}
	}
	return nil
}

func count(v any) (int, error) {
	n, ok := v.(int64)
	if !ok || n < 0 || n > 1000 {
		return 0, fmt.Errorf("must be a whole number from 0 to 1000, got %v", v)
	}
	return int(n), nil
}

func duration(v any) (time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("must be a duration string like \"200ms\", \"10s\" or \"5m\", got %v", v)
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("must be a positive duration like \"200ms\", \"10s\" or \"5m\", got %q", s)
	}
	return d, nil
}

var sizeRe = regexp.MustCompile(`^(\d+)\s*(B|KiB|MiB|GiB|KB|MB|GB)?$`)

func size(v any) (int64, error) {
	s, ok := v.(string)
	if !ok {
		if n, ok := v.(int64); ok && n > 0 {
			return n, nil
		}
		return 0, fmt.Errorf("must be a size like \"64MiB\", got %v", v)
	}
	m := sizeRe.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("must be a size like \"64MiB\" (units B, KiB, MiB, GiB), got %q", s)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	mult := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1000, "MB": 1000000, "GB": 1000000000}[m[2]]
	return n * mult, nil
}
