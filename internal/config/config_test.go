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
sandbox = "worker"
`)
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policy
	if p.TransientRetries != 3 || p.TransientBackoff != 200*time.Millisecond || p.TransientBackoffMax != time.Second || p.ReconcileAttempts != 0 ||
		p.ReconcileBackoff != 50*time.Millisecond || p.ReconcileBackoffMax != 2*time.Second || p.HandlerTimeout != 5*time.Second ||
		p.ToolTimeout != 750*time.Millisecond || p.MemoryLimit != 16<<20 || p.Workers != 4 || p.SandboxWorkers != 8 || p.ReconcileSettle != 3*time.Second || p.Sandbox != "worker" {
		t.Fatalf("policy %+v", p)
	}
}

func TestDefaultsAreSpec(t *testing.T) {
	t.Parallel()
	c, err := Parse("empty", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy != Defaults() || Defaults().TransientRetries != 5 || Defaults().MemoryLimit != 64<<20 || Defaults().HandlerTimeout != 300*time.Second || Defaults().Workers != 32 || Defaults().Sandbox != "wasm" {
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
		"[policy]\nhandler_timeot = \"1s\"":             `unknown key [policy] handler_timeot (known: transient_retries,`,
		"[policy]\nworkers = 0":                         "[policy] workers: must be at least 1",
		"[policy]\nsandbox_workers = 0":                 "[policy] sandbox_workers: must be at least 1",
		"[policy]\nworkers = \"many\"":                  "[policy] workers",
		"[policy]\nsandbox = \"docker\"":                `[policy] sandbox: must be one of "wasm" or "worker", got "docker"`,
		"[policy]\nsandbox = 1":                         "[policy] sandbox",
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
