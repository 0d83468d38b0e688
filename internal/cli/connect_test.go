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

// keep validate knows the connectors keep.toml declares, their methods
// and their sources; without the declaration the same script is refused.
func TestValidateKnowsDeclaredConnectors(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keep.toml")
	os.WriteFile(cfg, []byte("[connectors.custom.crm]\nbase_url = \"http://127.0.0.1:9\"\nsources = [\"crm/ticket\"]\n[connectors.custom.crm.methods.createTicket]\nkind = \"write\"\npath = \"/t\"\nparams = { customer = \"who\" }\nidentity = [\"customer\"]\n"), 0o644)
	script := func(call, source string) string {
		f := filepath.Join(dir, "wf.js")
		os.WriteFile(f, []byte(`export default Keep.workflow({ name: "c", topics: { "t": {} },
  producers: { p: { publishes: ["t"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "`+source+`", type: "ticket", id: "1", title: "T" })
    await ctx.publish("t", { messageId: "1", inputId, payload: {} }) } } },
  consumers: { c: Keep.consumer({ subscribe: ["t"], async prepare(ctx) { return { reservations: [] } },
    async mutate(ctx) { await ctx.`+call+`({ customer: "a" }) } }) } })`), 0o644)
		return f
	}
	if r := keep(t, "validate", "--config", cfg, script("crm.createTicket", "crm")); r.code != 0 {
		t.Fatalf("a declared connector: %d %s %s", r.code, r.out, r.err)
	}
	if r := keep(t, "validate", "--config", cfg, script("crm.deleteTicket", "crm")); r.code != 2 || !strings.Contains(r.out+r.err, "deleteTicket") {
		t.Fatalf("an undeclared method: %d %s %s", r.code, r.out, r.err)
	}
	if r := keep(t, "validate", "--config", cfg, script("crm.createTicket", "zendesk")); r.code != 2 || !strings.Contains(r.out+r.err, "zendesk") {
		t.Fatalf("an undeclared source: %d %s %s", r.code, r.out, r.err)
	}
	empty := filepath.Join(dir, "empty.toml")
	os.WriteFile(empty, []byte("[policy]\n"), 0o644)
	if r := keep(t, "validate", "--config", empty, script("crm.createTicket", "crm")); r.code != 2 || !strings.Contains(r.out+r.err, "crm") {
		t.Fatalf("without the declaration: %d %s %s", r.code, r.out, r.err)
	}
}
