// Package config reads keep's host configuration (TOML) strictly, each
// table decoded from its schema (Section): keep's own ([policy], [notify],
// [llm], [maintainer], [otel]) and the connectors' ([connectors.NAME]), which
// their declarations register (package connector/builtin). It holds the
// host policies of SPEC §6 with their defaults, written once in the tags.
//
// It imports nothing of keep.
package config

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"
)

// Policy is [policy], the host policies of SPEC §6. Each key's doc and
// default are written once, in its tags (Section): Defaults, the decoder,
// its messages and the reference in docs/scripts.md read them.
type Policy struct {
	TransientRetries    int           `toml:"transient_retries" default:"5" min:"0" max:"1000" doc:"How many automatic retries a transient failure gets."`
	TransientBackoff    time.Duration `toml:"transient_backoff" default:"'10s'" doc:"The first retry's delay; each next one doubles."`
	TransientBackoffMax time.Duration `toml:"transient_backoff_max" default:"'10m'" doc:"The longest delay between retries."`
	ReconcileAttempts   int           `toml:"reconcile_attempts" default:"5" min:"0" max:"1000" doc:"How many background reconcile attempts follow the inline one."`
	ReconcileBackoff    time.Duration `toml:"reconcile_backoff" default:"'10s'" doc:"The first background reconcile attempt's delay; each next one doubles."`
	ReconcileBackoffMax time.Duration `toml:"reconcile_backoff_max" default:"'10m'" doc:"The longest delay between reconcile attempts."`
	ReconcileSettle     time.Duration `toml:"reconcile_settle" doc:"How long after an uncertain call a reconcile's \"it did not happen\" must be seen again before keep believes it: a slow server may still apply the write after the call timed out. Unset, the call's own time limit; the call's limit is used when it is longer."`
	HandlerTimeout      time.Duration `toml:"handler_timeout" default:"'300s'" doc:"The wall-time limit of one handler phase."`
	ToolTimeout         time.Duration `toml:"tool_timeout" default:"'30s'" doc:"The time limit of one connector call."`
	MemoryLimit         Size          `toml:"memory_limit" default:"'64MiB'" min:"1MiB" doc:"The sandbox's heap per run."`
	Workers             int           `toml:"workers" default:"32" min:"1" max:"1000" doc:"How many workflows step at the same time: more steps in flight let more transitions share one fsync (0.7 fsyncs per run with 16, 0.4 with 32 in keep bench), and runs waiting on slow services do not hold others up."`
	LeaseTTL            time.Duration `toml:"lease_ttl" default:"'15s'" doc:"How long a node's lease of a workflow lasts without a renewal (PostgreSQL, several nodes): a node that dies has its workflows taken over within it."`
	WebhookMaxBody      Size          `toml:"webhook_max_body" default:"'1MiB'" min:"1KiB" max:"16MiB" doc:"The largest body a webhook takes (POST /hooks/WORKFLOW/NAME); a larger one is answered 413 and never reaches the handler."`
	SandboxWorkers      int           `toml:"sandbox_workers" default:"128" min:"1" max:"1000" doc:"The idle sandbox worker processes kept between handler calls (≈ 15 MiB each) with sandbox = \"worker\"; a script version without an idle one starts a new process (≈ 10 ms)."`
	Sandbox             string        `toml:"sandbox" default:"'wasm'" oneof:"wasm worker" doc:"Where handlers run: \"wasm\", QuickJS compiled to WebAssembly in keep's own process, an instance per workflow, stopped at its time limit from outside (no process hop: ≈ 0.1 ms of CPU per handler call); \"worker\", sandbox worker processes (≈ 0.2 ms per call). The environment's KEEP_SANDBOX, when set, wins."`
}

// Defaults returns the built-in policies of SPEC §6 (the tags' defaults).
func Defaults() Policy { return policyDefaults() }

var policyDefaults = sync.OnceValue(func() Policy {
	var p Policy
	defaults(&p)
	return p
})

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
	Policy     Policy
	Notify     Notify
	LLM        LLM
	Maintainer Maintainer
	OTel       OTel
	Retention  Retention
	// Connectors are the connectors' tables ([connectors.NAME]) by name,
	// each a pointer to its declared struct, defaults applied, present
	// or not (Get reads one).
	Connectors map[string]any
}

// file is keep.toml's shape: the tables keep knows, the connectors'
// decoded by their own schemas.
type file struct {
	Policy     Policy                    `toml:"policy"`
	Connectors map[string]toml.Primitive `toml:"connectors"`
	Notify     Notify                    `toml:"notify"`
	LLM        LLM                       `toml:"llm"`
	Maintainer Maintainer                `toml:"maintainer"`
	OTel       OTel                      `toml:"otel"`
	Retention  Retention                 `toml:"retention"`
}

// Tables are keep's own tables, for the reference (docs/scripts.md).
func Tables() []Section {
	return []Section{
		{Name: "policy", Doc: "the host policies: retries, reconciliation, time and memory limits, concurrency. A workflow runs under the policy it was deployed with, whichever keep serve runs it: deploy it again to change it (workers, lease_ttl, sandbox_workers and sandbox are the running keep's).", New: func() any { return &Policy{} }},
		{Name: "notify", Doc: "how keep tells a person that a run needs them.", New: func() any { return &Notify{} }},
		{Name: "llm", Doc: "an OpenAI-compatible chat-completions endpoint, for the Maintainer and keep plan. `KEEP_LLM_BASE_URL` and `KEEP_LLM_MODEL` override the file.", New: func() any { return &LLM{} }},
		{Name: "maintainer", Doc: "the agent that repairs runs failed with a logic error (needs [llm]).", New: func() any { return &Maintainer{} }},
		{Name: "retention", Doc: "how long finished work's history is kept (issue 44). Past `days`, the traces and payloads of done and skipped runs, consumed events, applied ledger rows and settled webhook deliveries are dropped; the rows that make work idempotent stay (input ids, messageIds, item keys, write identities and outcomes, the decision log), as does everything of unfinished work (blocked, waiting, failed runs) and the newest done runs the Maintainer replays. keep serve prunes every `interval`; `keep prune [--dry-run]` does it now. SQLite gives the freed pages back to the disk (incremental vacuum); PostgreSQL's autovacuum reuses them.", New: func() any { return &Retention{} }},
		{Name: "otel", Doc: "traces of runs for an OpenTelemetry collector, sent by OTLP over HTTP (protobuf): a span per run, a child per phase (prepare, mutate, next; producer, task) and per connector call, with the run's id, workflow, handler and input, each call's tool, method and outcome. Without `endpoint` it is off: no exporter, and the engine makes no spans at all. The traces `keep show run` and the page show do not depend on it.", New: func() any { return &OTel{} }},
	}
}

// LLM is [llm].
type LLM struct {
	BaseURL   string `toml:"base_url" doc:"The endpoint, ending in /v1, like \"https://api.openai.com/v1\" or \"http://127.0.0.1:11434/v1\" (Ollama)."`
	Model     string `toml:"model" doc:"The model's name at base_url (required with it)."`
	APIKeyEnv string `toml:"api_key_env" default:"'KEEP_LLM_API_KEY'" doc:"The environment variable that holds the API key."`
}

// Set reports whether an endpoint is configured.
func (l LLM) Set() bool { return l.BaseURL != "" && l.Model != "" }

// Maintainer is [maintainer].
type Maintainer struct {
	Enabled          bool `toml:"enabled" doc:"Whether keep serve repairs failed:logic runs. Defaults to true when [llm] is set."`
	MaxAttempts      int  `toml:"max_attempts" default:"3" min:"1" max:"1000" doc:"Repair attempts per failure."`
	DailyTokenBudget int  `toml:"daily_token_budget" default:"200000" min:"1000" doc:"Tokens per workflow and day."`
}

// OTel is [otel]: where keep sends the traces of its runs (package
// daemon builds the exporter; the engine makes the spans).
type OTel struct {
	Endpoint    string            `toml:"endpoint" doc:"The collector's OTLP/HTTP address, like \"http://127.0.0.1:4318\": keep posts its traces to /v1/traces there (a URL that ends in /v1/traces is used as it is). Unset: no traces, no exporter, no cost."`
	ServiceName string            `toml:"service_name" default:"'keep'" doc:"The service.name the traces carry."`
	Headers     map[string]string `toml:"headers" secret:"true" doc:"Headers of every export, like a collector's token: Authorization = \"Bearer ${OTEL_TOKEN}\"; ${VAR} takes the environment's value, {secret:NAME} a secret of keep secret set."`
	SampleRatio float64           `toml:"sample_ratio" default:"1.0" min:"0" max:"1" doc:"The share of runs traced, from 0 (none) to 1 (every run)."`
	Timeout     time.Duration     `toml:"timeout" default:"'10s'" doc:"How long one export may take; keep's exit (keep run's end, keep serve's stop) waits at most this long to send the last traces."`
}

// Retention is [retention]: the policy of history (engine.Prune applies it).
type Retention struct {
	Days         int           `toml:"days" default:"14" min:"0" max:"36500" doc:"How many days the traces and payloads of finished work are kept (n8n keeps executions 14 days); 0 keeps them forever."`
	KeepDoneRuns int           `toml:"keep_done_runs" default:"200" min:"0" max:"100000" doc:"The newest done runs of each workflow's version kept whole whatever their age: the Maintainer replays them to judge a new version (it reads at most 200)."`
	Interval     time.Duration `toml:"interval" default:"'1h'" min:"1m" doc:"How often keep serve prunes (at least a minute: each pass takes the writer for its batches and gives the disk back)."`
	Batch        int           `toml:"batch" default:"200" min:"1" max:"10000" doc:"Rows pruned per write transaction: small, so runs keep flowing between batches."`
}

// Horizon is how long finished work's bodies are kept (0: forever).
func (r Retention) Horizon() time.Duration { return time.Duration(r.Days) * 24 * time.Hour }

// Set reports whether traces are sent.
func (o OTel) Set() bool { return o.Endpoint != "" }

// TracesURL is where the traces are posted: the endpoint's /v1/traces,
// as OTEL_EXPORTER_OTLP_ENDPOINT is read, unless the endpoint names it.
func (o OTel) TracesURL() string {
	if strings.HasSuffix(o.Endpoint, "/v1/traces") {
		return o.Endpoint
	}
	return strings.TrimRight(o.Endpoint, "/") + "/v1/traces"
}

// Notify is [notify].
type Notify struct {
	Webhook string `toml:"webhook" doc:"An http(s) URL that receives a POST with the card as JSON."`
	Email   string `toml:"email" doc:"An address that receives a message, sent through [connectors.email] smtp."`
	Slack   string `toml:"slack" doc:"A channel the notices are posted to, as the bot of keep connect slack, like \"#ops\"."`
	PageURL string `toml:"page_url" doc:"Where links in notices point (default: keep serve's address)."`
	Digest  string `toml:"digest" doc:"The time of day (UTC, \"HH:MM\") of the daily digest of what still waits; unset: no digest."`
}

// Load reads a TOML config file over the defaults ("" is none: the
// defaults and the environment's overrides). Unknown keys and bad values
// are errors that name the file, the table, the key and what is expected.
func Load(path string) (Config, error) {
	if path == "" {
		return Parse("", "")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{Policy: Defaults()}, fmt.Errorf("config %s: %w", path, err)
	}
	return Parse(path, string(b))
}

// Parse reads config text strictly; name is used in messages.
func Parse(name, text string) (Config, error) {
	cfg, err := parse(text)
	if err != nil {
		return cfg, fmt.Errorf("config %s: %w", name, err)
	}
	return cfg, nil
}

func parse(text string) (Config, error) {
	f := file{Policy: Defaults()}
	defaults(&f.LLM)
	defaults(&f.Maintainer)
	defaults(&f.OTel)
	defaults(&f.Retention)
	cfg := Config{Policy: f.Policy, Connectors: map[string]any{}}
	md, err := toml.Decode(text, &f)
	if err != nil {
		return cfg, typeError(err, nil)
	}
	for _, t := range []struct {
		name string
		v    any
	}{{"policy", &f.Policy}, {"notify", &f.Notify}, {"llm", &f.LLM}, {"maintainer", &f.Maintainer}, {"otel", &f.OTel}, {"retention", &f.Retention}} {
		if err := checkTags(md, []string{t.name}, t.v); err != nil {
			return cfg, err
		}
	}
	if err := checkLLM(md, &f.LLM, &f.Maintainer); err != nil {
		return cfg, err
	}
	if err := checkNotify(&f.Notify); err != nil {
		return cfg, err
	}
	if err := checkOTel(&f.OTel); err != nil {
		return cfg, err
	}
	cfg.Policy, cfg.Notify, cfg.LLM, cfg.Maintainer, cfg.OTel, cfg.Retention = f.Policy, f.Notify, f.LLM, f.Maintainer, f.OTel, f.Retention
	for _, s := range Sections() {
		p, defined := f.Connectors[s.Name]
		v, err := decodeSection(md, s, p, defined, &cfg)
		if err != nil {
			return cfg, err
		}
		cfg.Connectors[s.Name] = v
	}
	return cfg, unknownKey(md)
}

func checkLLM(md toml.MetaData, l *LLM, m *Maintainer) error {
	if l.BaseURL != "" {
		if err := HTTPURL(l.BaseURL); err != nil {
			return keyError([]string{"llm"}, "base_url", `must be an http(s) URL ending in /v1, like "https://api.openai.com/v1" or "http://127.0.0.1:11434/v1" (Ollama), got `+strconv.Quote(l.BaseURL))
		}
	}
	if v := os.Getenv("KEEP_LLM_BASE_URL"); v != "" {
		l.BaseURL = v
	}
	if v := os.Getenv("KEEP_LLM_MODEL"); v != "" {
		l.Model = v
	}
	l.BaseURL = strings.TrimRight(l.BaseURL, "/")
	if l.BaseURL != "" && l.Model == "" {
		return fmt.Errorf("[llm] needs model = \"…\" (the model's name at %s)", l.BaseURL)
	}
	if !md.IsDefined("maintainer", "enabled") {
		m.Enabled = l.Set()
	} else if m.Enabled && !l.Set() {
		return keyError([]string{"maintainer"}, "enabled", "needs [llm] base_url and model")
	}
	return nil
}

var digestRe = regexp.MustCompile(`^([01]\d|2[0-3]):[0-5]\d$`)

func checkNotify(n *Notify) error {
	where := []string{"notify"}
	switch {
	case n.Webhook != "" && HTTPURL(n.Webhook) != nil:
		return keyError(where, "webhook", "must be an http(s) URL, got "+strconv.Quote(n.Webhook))
	case n.PageURL != "" && HTTPURL(n.PageURL) != nil:
		return keyError(where, "page_url", "must be an http(s) URL, got "+strconv.Quote(n.PageURL))
	case n.Email != "" && !strings.Contains(n.Email, "@"):
		return keyError(where, "email", "must be an email address")
	case n.Slack != "" && strings.TrimSpace(n.Slack) == "":
		return keyError(where, "slack", `must name a channel, like "#ops" or "C0123456"`)
	case n.Digest != "" && !digestRe.MatchString(n.Digest):
		return keyError(where, "digest", `must be a time of day in UTC like "09:00", got `+strconv.Quote(n.Digest))
	}
	n.PageURL = strings.TrimRight(n.PageURL, "/")
	return nil
}

// headerName is a header's name as HTTP allows it (a token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

func checkOTel(o *OTel) error {
	where := []string{"otel"}
	o.Endpoint = strings.TrimSpace(o.Endpoint)
	if o.Endpoint != "" && HTTPURL(o.Endpoint) != nil {
		return keyError(where, "endpoint", `must be the collector's http(s) URL, like "http://127.0.0.1:4318", got `+strconv.Quote(o.Endpoint))
	}
	if strings.TrimSpace(o.ServiceName) == "" {
		return keyError(where, "service_name", `must name the service, like "keep"`)
	}
	for name := range o.Headers {
		if !headerName.MatchString(name) {
			return keyError(where, "headers", "has "+strconv.Quote(name)+", which is not a header's name (letters, digits and -)")
		}
	}
	if len(o.Headers) > 0 && o.Endpoint == "" {
		return keyError(where, "headers", "are set without an endpoint: set endpoint = \"http://…:4318\" or remove them")
	}
	return nil
}

// HTTPURL checks that s is an http(s) URL with a host.
func HTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("not an http(s) URL: %q", s)
	}
	return nil
}
