package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/testsink"
)

func keepIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := RunWithInput(args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// keep secret set reads the value from standard input and never prints
// it; list shows names and times, never values; the store holds it only
// sealed; rm forgets it.
func TestSecretSetListRemove(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	const value = "xoxb-secret-value-4242"
	if r := keepIn(t, "", "secret", "set", "--data", data, "slack_token"); r.code == 0 || !strings.Contains(r.err, "no value on standard input") {
		t.Fatalf("an empty value: %d %s %s", r.code, r.out, r.err)
	}
	if r := keepIn(t, value, "secret", "set", "--data", data, "bad name"); r.code == 0 || !strings.Contains(r.err, "only letters, digits") {
		t.Fatalf("a bad name: %d %s", r.code, r.err)
	}
	r := keepIn(t, value+"\n", "secret", "set", "--data", data, "slack_token")
	if r.code != 0 || !strings.Contains(r.out, `a call's headers name it as {secret:slack_token}, a webhook's verify as secret: "slack_token"`) || strings.Contains(r.out+r.err, value) {
		t.Fatalf("set: %d %s %s", r.code, r.out, r.err)
	}
	for _, args := range [][]string{{"secret", "list", "--data", data}, {"secret", "list", "--data", data, "--json"}} {
		r := keep(t, args...)
		if r.code != 0 || !strings.Contains(r.out, "slack_token") || strings.Contains(r.out, value) {
			t.Fatalf("%v: %d %s %s", args, r.code, r.out, r.err)
		}
	}
	db, err := os.ReadFile(filepath.Join(data, "keep.db"))
	wal, _ := os.ReadFile(filepath.Join(data, "keep.db-wal"))
	if err != nil || bytes.Contains(append(db, wal...), []byte(value)) {
		t.Fatalf("keep.db holds the value in clear (%v)", err)
	}
	// Its hosts (issue 38 #4): none yet; a bad host is refused with nothing
	// stored; scope sets them without the value, set keeps them, --none
	// clears them; scope of a secret keep does not have says so.
	if r := keep(t, "secret", "list", "--data", data); !strings.Contains(r.out, "(none: goes nowhere)") {
		t.Fatalf("list of a secret without hosts: %s", r.out)
	}
	if r := keepIn(t, value, "secret", "set", "--data", data, "slack_token", "--host", "https://slack.com"); r.code == 0 || !strings.Contains(r.err, "is not a host as keep writes it") {
		t.Fatalf("a bad host: %d %s %s", r.code, r.out, r.err)
	}
	if r := keep(t, "secret", "scope", "--data", data, "slack_token", "--host", "slack.com", "--host", "127.0.0.1:8090"); r.code != 0 || !strings.Contains(r.out, "slack_token may go to 127.0.0.1:8090, slack.com") {
		t.Fatalf("scope: %d %s %s", r.code, r.out, r.err)
	}
	if r := keepIn(t, value+"2", "secret", "set", "--data", data, "slack_token"); r.code != 0 || !strings.Contains(r.out, "slack_token may go to 127.0.0.1:8090, slack.com") {
		t.Fatalf("a new value keeps the hosts: %d %s %s", r.code, r.out, r.err)
	}
	if r := keep(t, "secret", "list", "--data", data, "--json"); !strings.Contains(r.out, `"hosts": [`) || !strings.Contains(r.out, `"slack.com"`) {
		t.Fatalf("list --json: %s", r.out)
	}
	if r := keep(t, "secret", "scope", "--data", data, "slack_token"); r.code == 0 || !strings.Contains(r.err, "--none for nowhere") {
		t.Fatalf("scope without hosts: %d %s", r.code, r.err)
	}
	if r := keep(t, "secret", "scope", "--data", data, "slack_token", "--none"); r.code != 0 || !strings.Contains(r.out, "slack_token goes to no host") {
		t.Fatalf("scope --none: %d %s %s", r.code, r.out, r.err)
	}
	if r := keep(t, "secret", "scope", "--data", data, "nope", "--host", "slack.com"); r.code == 0 || !strings.Contains(r.err, "no secret named nope") {
		t.Fatalf("scope of no secret: %d %s", r.code, r.err)
	}
	if r := keep(t, "secret", "rm", "--data", data, "slack_token"); r.code != 0 {
		t.Fatalf("rm: %d %s", r.code, r.err)
	}
	if r := keep(t, "secret", "rm", "--data", data, "slack_token"); r.code == 0 || !strings.Contains(r.err, "no secret named slack_token") {
		t.Fatalf("rm twice: %d %s", r.code, r.err)
	}
	if r := keep(t, "secret", "list", "--data", data); !strings.Contains(r.out, "no secrets") {
		t.Fatalf("list after rm: %s", r.out)
	}
}

// Issue 23 (low): a custom header naming a secret, and a server that
// quotes it back in an error body. The value reaches the server, and
// nothing keep shows holds it: keep run's output and log, keep status,
// keep runs, keep show run (text and JSON), and keep serve's API.
func TestAnEchoedSecretShowsNowhere(t *testing.T) {
	t.Parallel()
	const value = "sig-echoed-6b1f0e"
	sink := testsink.New()
	defer sink.Close()
	sink.Queue(testsink.EchoHeaders)
	dir := t.TempDir()
	data, cfg := filepath.Join(dir, "data"), filepath.Join(dir, "keep.toml")
	os.WriteFile(cfg, []byte(sink.AllowTOML()), 0o644)
	os.WriteFile(filepath.Join(dir, "wf.js"), []byte(`export default Keep.workflow({ name: "sig", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: {} })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: {} } },
    async mutate(ctx, p) {
      await ctx.http.request({ method: "POST", url: "`+sink.URL+`/write/a", json: {}, headers: { "X-Custom-Sig": "{secret:sig}" } })
    } }) } })`), 0o644)
	if r := keepIn(t, value, "secret", "set", "--data", data, "sig", "--host", sink.Host()); r.code != 0 {
		t.Fatalf("secret set: %s %s", r.out, r.err)
	}
	var seen strings.Builder
	add := func(r result) { seen.WriteString(r.out); seen.WriteString(r.err) }
	r := keep(t, "run", "--data", data, "--config", cfg, filepath.Join(dir, "wf.js"))
	add(r)
	if r.code != 3 || !strings.Contains(r.out, "bad signature [redacted]") {
		t.Fatalf("keep run: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if len(sink.Headers) != 1 || sink.Headers[0].Get("X-Custom-Sig") != value {
		t.Fatalf("the server got %v", sink.Headers)
	}
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"runs", "sig", "--json"}, {"outputs", "sig", "--json"}} {
		add(keep(t, append(args, "--data", data)...))
	}
	var runs []struct{ ID string }
	if err := json.Unmarshal([]byte(keep(t, "runs", "sig", "--data", data, "--json").out), &runs); err != nil || len(runs) == 0 {
		t.Fatalf("runs: %v", err)
	}
	k, err := daemon.Open(daemon.Options{DataDir: data, ConfigFile: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(k.HTTPHandler(""))
	defer func() { srv.Close(); k.Close() }()
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	seen.WriteString(get("/api/v1/workflows/sig/blocked"))
	for _, run := range runs {
		add(keep(t, "show", "run", "--data", data, run.ID))
		add(keep(t, "show", "run", "--data", data, run.ID, "--json"))
		seen.WriteString(get("/api/v1/runs/" + run.ID))
		seen.WriteString(get("/api/v1/runs/" + run.ID + "/trace"))
	}
	if strings.Contains(seen.String(), value) {
		i := strings.Index(seen.String(), value)
		t.Fatalf("the secret shows: …%s…", seen.String()[max(0, i-200):i+30])
	}
	if !strings.Contains(seen.String(), "{secret:sig}") || strings.Count(seen.String(), "[redacted]") < 3 {
		t.Fatalf("the calls were not seen with their placeholder and the mask:\n%s", seen.String())
	}
}

// keep validate points a literal credential to keep secret set, without
// printing it; the script still validates (a warning).
func TestValidateWarnsOfALiteralCredential(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "wf.js")
	os.WriteFile(f, []byte(`export default Keep.workflow({ name: "lit", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx) => {
    await ctx.http.request({ method: "GET", url: "https://api.example/x", headers: { Authorization: "Bearer tok_9f8e7d6c5b4a3210" } })
  } } } })`), 0o644)
	r := keep(t, "validate", f)
	out := r.out + r.err
	if r.code != 0 || !strings.Contains(out, "wf.js:3: warning: ") || !strings.Contains(out, "keep secret set NAME") || strings.Contains(out, "tok_9f8e7d6c5b4a3210") {
		t.Fatalf("validate: exit %d\n%s", r.code, out)
	}
}
