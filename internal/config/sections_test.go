package config_test

import (
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/config"
	_ "github.com/keep-run/keep/internal/connector/builtin"
	"github.com/keep-run/keep/internal/connector/google"
	khttp "github.com/keep-run/keep/internal/connector/http"
)

func TestGoogleSection(t *testing.T) {
	cfg, err := config.Parse("keep.toml", "[connectors.google]\nclient_id = \"id\"\nclient_secret = \"s\"\nendpoint = \"http://127.0.0.1:8085/\"\n")
	if err != nil || config.Get[google.Config](cfg, "google").ClientID != "id" || config.Get[google.Config](cfg, "google").ClientSecret != "s" || config.Get[google.Config](cfg, "google").Endpoint != "http://127.0.0.1:8085" {
		t.Fatalf("%+v %v", config.Get[google.Config](cfg, "google"), err)
	}
	for text, want := range map[string]string{
		"[connectors.google]\nendpoint = \"ftp://x\"\n": "[connectors.google] endpoint: must be an http(s) URL",
		"[connectors.google]\nclient = \"x\"\n":         "unknown key [connectors.google] client (known: client_id, client_secret, endpoint)",
		"[connectors.dropbox]\ntoken = \"x\"\n":         "unknown connector section [connectors.dropbox]",
		"[connectors.slack]\ntoken = \"x\"\n":           "unknown key [connectors.slack] token (known: endpoint)",
		"[connectors.google]\nclient_id = 5\n":          "line 2: [connectors.google] client_id: must be a string, not a number",
		"[googl]\nclient_id = \"x\"\n":                  `unknown section or key "googl"`,
	} {
		if _, err := config.Parse("keep.toml", text); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "keep.toml") {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
	t.Setenv("KEEP_GOOGLE_CLIENT_ID", "from-env")
	t.Setenv("KEEP_GOOGLE_CLIENT_SECRET", "secret-env")
	cfg, _ = config.Parse("keep.toml", "[connectors.google]\nclient_id = \"id\"\n")
	if config.Get[google.Config](cfg, "google").ClientID != "from-env" || config.Get[google.Config](cfg, "google").ClientSecret != "secret-env" {
		t.Fatalf("the environment does not override the file: %+v", config.Get[google.Config](cfg, "google"))
	}
	if cfg, _ := config.Load(""); config.Get[google.Config](cfg, "google").ClientID != "from-env" {
		t.Fatalf("without a file the environment's client is not used: %+v", config.Get[google.Config](cfg, "google"))
	}
}

func TestNotifySection(t *testing.T) {
	cfg, err := config.Parse("keep.toml", "[notify]\nwebhook = \"https://hooks.example.com/k\"\npage_url = \"http://keep.local:8347/\"\ndigest = \"09:30\"\n")
	if err != nil || cfg.Notify.Webhook != "https://hooks.example.com/k" || cfg.Notify.PageURL != "http://keep.local:8347" || cfg.Notify.Digest != "09:30" {
		t.Fatalf("%+v %v", cfg.Notify, err)
	}
	for text, want := range map[string]string{
		"[notify]\nwebhook = \"ftp://x\"\n":         "[notify] webhook: must be an http(s) URL",
		"[notify]\ndigest = \"9am\"\n":              `[notify] digest: must be a time of day in UTC like "09:00"`,
		"[notify]\nemail = \"me@example.com\"\n":    "[notify] email sends through [connectors.email]",
		"[notify]\nsms = \"+4912345\"\n":            "unknown key [notify] sms",
		"[connectors.email]\nimap = \"http://x\"\n": "[connectors.email] imap: must be a URL like",
	} {
		if _, err := config.Parse("keep.toml", text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}

func TestHTTPAllow(t *testing.T) {
	t.Parallel()
	c, err := config.Parse("keep.toml", "[connectors.http]\nallow = [\"127.0.0.1:8090\", \"localhost\", \"[::1]:9000\"]\n")
	if err != nil || strings.Join(khttp.Allow(c), " ") != "127.0.0.1:8090 localhost [::1]:9000" {
		t.Fatalf("%v %v", khttp.Allow(c), err)
	}
	for text, want := range map[string]string{
		"[connectors.http]\nallow = \"127.0.0.1\"\n":               "line 2: [connectors.http] allow: must be a list, not a string",
		"[connectors.http]\nallow = [\"http://127.0.0.1:8090\"]\n": "[connectors.http] allow: [0]",
		"[connectors.http]\nallow = [\"127.0.0.1:8090\", 5]\n":     "[connectors.http] allow: must be a string, not a number",
		"[connectors.http]\nallowed = [\"127.0.0.1\"]\n":           "unknown key [connectors.http] allowed",
		"[connectors.http]\nallow = [\"127.0.0.1:8090/api\"]\n":    "no scheme, no path",
	} {
		if _, err := config.Parse("keep.toml", text); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "keep.toml") {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}

// Every table is decoded strictly from its schema, however deep: the
// error names the key, its table and the keys the table knows.
func TestStrictDecodingNamesKeyAndTable(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]string{
		"[connectors.custom.crm]\nbase_url = \"http://x\"\n[connectors.custom.crm.methods.a]\nkidn = \"read\"\npath = \"/\"\n": "unknown key [connectors.custom.crm.methods.a] kidn (known: kind, method, path, doc, params, required, identity, reconcile, errors)",
		"[connectors.sql]\ndatabase = {}\n":              "unknown key [connectors.sql] database (known: databases, allow)",
		"[maintainer]\nmax_attempt = 2\n":                "unknown key [maintainer] max_attempt (known: enabled, max_attempts, daily_token_budget)",
		"[policy]\ntool_timeout = 30\n":                  "[policy] tool_timeout: must be a positive duration",
		"[policy]\n\n\nworkers = \"many\"\n":             "line 4: [policy] workers: must be a number, not a string",
		"[policy]\ntransient_backoff = \"10 seconds\"\n": `line 2: [policy] transient_backoff: must be a duration like "200ms", "10s" or "5m", got "10 seconds"`,
		"[connectors.email]\nserver_keeps_sent = 1\n":    "[connectors.email] server_keeps_sent: must be true or false, not a number",
	} {
		if _, err := config.Parse("keep.toml", text); err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "config keep.toml: ") {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}
