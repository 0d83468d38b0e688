package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// keep connect google refuses, with what to do, when it would ask for
// nothing or has no OAuth client; nothing is stored.
func TestConnectGoogleSaysWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "keep.toml")
	os.WriteFile(cfg, []byte("[policy]\nworkers = 2\n"), 0o644)
	t.Setenv("KEEP_GOOGLE_CLIENT_ID", "")
	r := keep(t, "connect", "google", "--data", data, "--config", cfg)
	if r.code == 0 || !strings.Contains(r.err, "no Google OAuth client") || !strings.Contains(r.err, "client_id") || !strings.Contains(r.err, "keep-fake google") {
		t.Fatalf("without a client: %d %q", r.code, r.err)
	}
	os.WriteFile(cfg, []byte("[connectors.google]\nendpoint = \"http://127.0.0.1:9\"\n"), 0o644)
	r = keep(t, "connect", "google", "--data", data, "--config", cfg)
	if r.code == 0 || !strings.Contains(r.err, "no deployed workflow calls gmail, sheets or calendar") {
		t.Fatalf("with nothing deployed: %d %q", r.code, r.err)
	}
	r = keep(t, "connect", "dropbox", "--data", data, "--config", cfg)
	if r.code == 0 || !strings.Contains(r.err, "knows google and slack") {
		t.Fatalf("an unknown provider: %d %q", r.code, r.err)
	}
	t.Setenv("KEEP_SLACK_TOKEN", "")
	r = keep(t, "connect", "slack", "--data", data, "--config", cfg)
	if r.code == 0 || !strings.Contains(r.err, "--token xoxb-") {
		t.Fatalf("slack without a token: %d %q", r.code, r.err)
	}
	r = keep(t, "connections", "--data", data)
	if r.code != 0 || !strings.Contains(r.out, "no accounts connected") {
		t.Fatalf("keep connections: %d %q %q", r.code, r.out, r.err)
	}
}
