package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	c, err := Parse("k.toml", `[policy]
transient_retries = 3
transient_backoff = "200ms"
transient_backoff_max = "1s"
reconcile_attempts = 0
reconcile_backoff = "50ms"
reconcile_backoff_max = "2s"
handler_timeout = "5s"
tool_timeout = "750ms"
memory_limit = "16MiB"
workers = 4
sandbox_workers = 8
reconcile_settle = "3s"
`)
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policy
	if p.TransientRetries != 3 || p.TransientBackoff != 200*time.Millisecond || p.TransientBackoffMax != time.Second || p.ReconcileAttempts != 0 ||
		p.ReconcileBackoff != 50*time.Millisecond || p.ReconcileBackoffMax != 2*time.Second || p.HandlerTimeout != 5*time.Second ||
		p.ToolTimeout != 750*time.Millisecond || p.MemoryLimit != 16<<20 || p.Workers != 4 || p.SandboxWorkers != 8 || p.ReconcileSettle != 3*time.Second {
		t.Fatalf("policy %+v", p)
	}
}

func TestDefaultsAreSpec(t *testing.T) {
	t.Parallel()
	c, err := Parse("empty", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy != Defaults() || Defaults().TransientRetries != 5 || Defaults().MemoryLimit != 64<<20 || Defaults().HandlerTimeout != 300*time.Second || Defaults().Workers != 32 {
		t.Fatalf("defaults %+v", c.Policy)
	}
}

func TestBadConfigNamesTheKey(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"[policy]\ntransient_backoff = \"ten seconds\"": "[policy] transient_backoff",
		"[policy]\ntransient_retries = -1":              "[policy] transient_retries",
		"[policy]\nmemory_limit = \"lots\"":             "[policy] memory_limit",
		"[policy]\nmemory_limit = \"10KiB\"":            "at least 1MiB",
		"[policy]\nhandler_timeot = \"1s\"":             `unknown policy key "handler_timeot"`,
		"[policy]\nworkers = 0":                         "[policy] workers: must be at least 1",
		"[policy]\nsandbox_workers = 0":                 "[policy] sandbox_workers: must be at least 1",
		"[policy]\nworkers = \"many\"":                  "[policy] workers",
		"[polcy]\n":                                     `unknown section or key "polcy"`,
		"[policy\n":                                     "k.toml",
	}
	for text, want := range cases {
		_, err := Parse("k.toml", text)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", text, err, want)
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second, 10: 10 * time.Minute} {
		if got := Backoff(10*time.Second, 10*time.Minute, n); got != want {
			t.Errorf("backoff %d = %s, want %s", n, got, want)
		}
	}
}

// The README's policy example is a real config: it must load.
func TestREADMEPolicyExampleLoads(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "```toml\n")
	if i < 0 {
		t.Fatal("the README has no toml example")
	}
	block := s[i+len("```toml\n"):]
	block = block[:strings.Index(block, "```")]
	f := filepath.Join(t.TempDir(), "keep.toml")
	if err := os.WriteFile(f, []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(f)
	if err != nil {
		t.Fatalf("the README's example does not load: %v", err)
	}
	if c.Policy != Defaults() {
		t.Fatalf("the README's example says other values than the defaults:\n%+v\n%+v", c.Policy, Defaults())
	}
}

func TestGoogleSection(t *testing.T) {
	cfg, err := Parse("keep.toml", "[connectors.google]\nclient_id = \"id\"\nclient_secret = \"s\"\nendpoint = \"http://127.0.0.1:8085/\"\n")
	if err != nil || cfg.Google.ClientID != "id" || cfg.Google.ClientSecret != "s" || cfg.Google.Endpoint != "http://127.0.0.1:8085" {
		t.Fatalf("%+v %v", cfg.Google, err)
	}
	for text, want := range map[string]string{
		"[connectors.google]\nendpoint = \"ftp://x\"\n": "[connectors.google] endpoint must be an http(s) URL",
		"[connectors.google]\nclient = \"x\"\n":         "unknown key [connectors.google] client (known: client_id, client_secret, endpoint)",
		"[connectors.dropbox]\ntoken = \"x\"\n":         "unknown connector section [connectors.dropbox]",
		"[connectors.slack]\ntoken = \"x\"\n":           "the token is stored by keep connect slack --token",
		"[connectors.google]\nclient_id = 5\n":          "[connectors.google] client_id must be a string",
		"[googl]\nclient_id = \"x\"\n":                  `unknown section or key "googl"`,
	} {
		if _, err := Parse("keep.toml", text); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "keep.toml") {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
	t.Setenv("KEEP_GOOGLE_CLIENT_ID", "from-env")
	t.Setenv("KEEP_GOOGLE_CLIENT_SECRET", "secret-env")
	cfg, _ = Parse("keep.toml", "[connectors.google]\nclient_id = \"id\"\n")
	if cfg.Google.ClientID != "from-env" || cfg.Google.ClientSecret != "secret-env" {
		t.Fatalf("the environment does not override the file: %+v", cfg.Google)
	}
	if cfg, _ := Load(""); cfg.Google.ClientID != "from-env" {
		t.Fatalf("without a file the environment's client is not used: %+v", cfg.Google)
	}
}

func TestNotifySection(t *testing.T) {
	cfg, err := Parse("keep.toml", "[notify]\nwebhook = \"https://hooks.example.com/k\"\npage_url = \"http://keep.local:8347/\"\ndigest = \"09:30\"\n")
	if err != nil || cfg.Notify.Webhook != "https://hooks.example.com/k" || cfg.Notify.PageURL != "http://keep.local:8347" || cfg.Notify.Digest != "09:30" {
		t.Fatalf("%+v %v", cfg.Notify, err)
	}
	for text, want := range map[string]string{
		"[notify]\nwebhook = \"ftp://x\"\n":         "[notify] webhook must be an http(s) URL",
		"[notify]\ndigest = \"9am\"\n":              `[notify] digest must be a time of day in UTC like "09:00"`,
		"[notify]\nemail = \"me@example.com\"\n":    "[notify] email sends through [connectors.email]",
		"[notify]\nsms = \"+4912345\"\n":            "unknown key [notify] sms",
		"[connectors.email]\nimap = \"http://x\"\n": "[connectors.email] imap must be a URL like",
	} {
		if _, err := Parse("keep.toml", text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}

func TestHTTPAllow(t *testing.T) {
	t.Parallel()
	c, err := Parse("keep.toml", "[connectors.http]\nallow = [\"127.0.0.1:8090\", \"localhost\", \"[::1]:9000\"]\n")
	if err != nil || strings.Join(c.HTTPAllow, " ") != "127.0.0.1:8090 localhost [::1]:9000" {
		t.Fatalf("%v %v", c.HTTPAllow, err)
	}
	for text, want := range map[string]string{
		"[connectors.http]\nallow = \"127.0.0.1\"\n":               "allow must be a list",
		"[connectors.http]\nallow = [\"http://127.0.0.1:8090\"]\n": "allow[0]",
		"[connectors.http]\nallow = [\"127.0.0.1:8090\", 5]\n":     "allow[1] must be a string",
		"[connectors.http]\nallowed = [\"127.0.0.1\"]\n":           "unknown key [connectors.http] allowed",
		"[connectors.http]\nallow = [\"127.0.0.1:8090/api\"]\n":    "no scheme, no path",
	} {
		if _, err := Parse("keep.toml", text); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "keep.toml") {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}
