package config

import (
	"strings"
	"testing"
	"time"
)

// [otel] is off unless an endpoint is set, and its defaults are the tags'.
func TestOTelIsOffByDefault(t *testing.T) {
	t.Parallel()
	c, err := Parse("empty", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.OTel.Set() || c.OTel.ServiceName != "keep" || c.OTel.SampleRatio != 1 || c.OTel.Timeout != 10*time.Second {
		t.Fatalf("[otel] defaults %+v", c.OTel)
	}
}

func TestOTelTable(t *testing.T) {
	t.Parallel()
	c, err := Parse("k.toml", `[otel]
endpoint = "http://127.0.0.1:4318"
service_name = "keep-prod"
sample_ratio = 0.25
timeout = "2s"
headers = { Authorization = "Bearer ${OTEL_TOKEN}", "X-Scope-OrgID" = "plain-tenant-token" }
`)
	if err != nil {
		t.Fatal(err)
	}
	o := c.OTel
	if !o.Set() || o.TracesURL() != "http://127.0.0.1:4318/v1/traces" || o.ServiceName != "keep-prod" || o.SampleRatio != 0.25 || o.Timeout != 2*time.Second {
		t.Fatalf("[otel] %+v (traces to %s)", o, o.TracesURL())
	}
	// A literal header value is a credential as written; a ${VAR} one is
	// learned when keep fills it in.
	secrets := strings.Join(c.Secrets(), "|")
	if !strings.Contains(secrets, "plain-tenant-token") || strings.Contains(secrets, "OTEL_TOKEN") {
		t.Errorf("secrets from [otel] headers: %q", secrets)
	}
	for endpoint, want := range map[string]string{
		"https://otel.example.com/v1/traces": "https://otel.example.com/v1/traces",
		"https://otel.example.com/tenant-a/": "https://otel.example.com/tenant-a/v1/traces",
		"http://collector:4318":              "http://collector:4318/v1/traces",
	} {
		if got := (OTel{Endpoint: endpoint}).TracesURL(); got != want {
			t.Errorf("endpoint %s posts to %s, want %s", endpoint, got, want)
		}
	}
	// A whole number is a ratio too.
	if c, err := Parse("k.toml", "[otel]\nendpoint = \"http://c:4318\"\nsample_ratio = 1\n"); err != nil || c.OTel.SampleRatio != 1 {
		t.Errorf("sample_ratio = 1: %v %+v", err, c.OTel)
	}
}

func TestBadOTelNamesTheKey(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]string{
		"[otel]\nendpoint = \"127.0.0.1:4318\"":                               `[otel] endpoint: must be the collector's http(s) URL, like "http://127.0.0.1:4318", got "127.0.0.1:4318"`,
		"[otel]\nendpoint = \"http://c:4318\"\nsample_ratio = 1.5":            "[otel] sample_ratio: must be at most 1",
		"[otel]\nendpoint = \"http://c:4318\"\nsample_ratio = -0.1":           "[otel] sample_ratio: must be at least 0",
		"[otel]\nendpoint = \"http://c:4318\"\nsample_ratio = \"all\"":        "[otel] sample_ratio: must be",
		"[otel]\nendpoint = \"http://c:4318\"\ntimeout = \"soon\"":            "[otel] timeout",
		"[otel]\nendpoint = \"http://c:4318\"\nservice_name = \" \"":          "[otel] service_name: must name the service",
		"[otel]\nendpoint = \"http://c:4318\"\nheaders = { \"a b\" = \"x\" }": `[otel] headers: has "a b", which is not a header's name`,
		"[otel]\nheaders = { Authorization = \"x\" }":                         "[otel] headers: are set without an endpoint",
		"[otel]\nendpiont = \"http://c:4318\"":                                "unknown key [otel] endpiont (known: endpoint, service_name, headers, sample_ratio, timeout)",
	} {
		_, err := Parse("k.toml", text)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", text, err, want)
		}
	}
}
