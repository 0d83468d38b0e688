// Package issue42 runs the real keep binary as a person does — stdin not a
// terminal, a real PostgreSQL, keep serve's real API — for the papercuts
// of issue 42: a credential in validate's messages, keep grant with the
// grants named, numeric ids, keep migrate's hint.
package issue42

import (
	"database/sql"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx driver for database/sql

	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/testbin"
)

var keepBin string

func TestMain(m *testing.M) { testbin.Main(m, &keepBin) }

// keep runs the binary with stdin not a terminal (/dev/null) and returns
// its exit status, stdout and stderr.
func keep(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(keepBin, args...)
	cmd.Env = append(os.Environ(), "KEEP_TOKEN=", "KEEP_STORE=")
	r := testbin.Run(t, cmd)
	return r.Code, r.Out, r.Err
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

const token = "sk-live0123456789abcdefABCDEF"

// A mutate that can write twice, with a credential written in its calls.
const twice = `export default Keep.workflow({ name: "twice", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "1", title: "One" })
    await ctx.publish("a", { messageId: "1", inputId, payload: {} })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"],
    async prepare(ctx) { const evs = await ctx.peek("a"); return { reservations: [{ topic: "a", ids: evs.map((e) => e.messageId) }] } },
    async mutate(ctx) {
      await ctx.http.request({ method: "POST", url: "https://api.example.com/a", headers: { Authorization: "Bearer ` + token + `" } })
      await ctx.http.request({ method: "POST", url: "https://api.example.com/b", headers: { Authorization: "Bearer ` + token + `" } })
    } }) },
})`

// Issue 42 #6: the "can write twice" error quoted the calls with their
// Bearer token in full; every message of keep validate and keep deploy
// masks it.
func TestValidateMasksACredentialInEveryMessage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	wf := filepath.Join(dir, "twice.js")
	write(t, wf, twice)
	for _, args := range [][]string{{"validate", wf}, {"deploy", "--data", filepath.Join(dir, "data"), wf}} {
		code, out, errs := keep(t, args...)
		said := out + errs
		if code != 2 || !strings.Contains(said, "can write twice") || !strings.Contains(said, "twice.js:10: error: consumers.c.mutate:") {
			t.Fatalf("keep %s: exit %d, want 2 with the error at its line\n%s", args[0], code, said)
		}
		if strings.Contains(said, "0123456789abcdef") {
			t.Fatalf("keep %s prints the credential:\n%s", args[0], said)
		}
		if !strings.Contains(said, `Authorization: "[redacted]"`) {
			t.Fatalf("keep %s does not show where the credential was:\n%s", args[0], said)
		}
	}
}

// A workflow whose ids are numbers: its producer registers an input and
// publishes an event with a number for id and messageId, and its topic
// "order" takes events from keep's API.
const nums = `export default Keep.workflow({ name: "nums", topics: { "tick": {}, "order": { from: "api" } },
  producers: { p: { publishes: ["tick"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: 1795879280201, title: "Tick 1795879280201" })
    await ctx.publish("tick", { messageId: 1795879280201, inputId, payload: {} })
  } } },
})`

// Issue 42 #7: the command a card and a webhook's answer print, keep grant
// WF 'ITEM', works off a terminal: naming the grants is the confirmation.
// keep grant WF alone (what keep reads the version to use) still asks.
func TestGrantWithTheGrantsNamedNeedsNoTerminal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data, wf := filepath.Join(dir, "data"), filepath.Join(dir, "nums.js")
	write(t, wf, nums)
	if code, out, errs := keep(t, "deploy", "--data", data, wf); code != 0 || !strings.Contains(out, "not yet granted: source:system") {
		t.Fatalf("deploy: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := keep(t, "grant", "nums", "--data", data); code != 64 || !strings.Contains(errs, "pass --yes") {
		t.Fatalf("keep grant nums (nothing named) off a terminal: exit %d, want 64 asking for --yes\n%s%s", code, out, errs)
	}
	code, out, errs := keep(t, "grant", "nums", "source:system", "--data", data)
	if code != 0 || !strings.Contains(out, "granted nums: source:system") {
		t.Fatalf("keep grant nums 'source:system' off a terminal: exit %d, want 0\n%s%s", code, out, errs)
	}
	if code, out, errs := keep(t, "status", "nums", "--data", data); code != 0 || strings.Contains(out, "not yet granted") {
		t.Fatalf("after the grant: %d\n%s%s", code, out, errs)
	}
}

// Issue 42 #8: an id given as a number is shown as given —
// 1795879280201, never 1.795879280201e+12 — by the CLI and by the API,
// whether a script registered it or a sender posted it to the event API.
func TestANumericIdIsShownAsGiven(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data, wf := filepath.Join(dir, "data"), filepath.Join(dir, "nums.js")
	write(t, wf, nums)
	if code, out, errs := keep(t, "run", "--data", data, wf); code != 0 {
		t.Fatalf("keep run: %d\n%s%s", code, out, errs)
	}
	_, inputs, _ := keep(t, "inputs", "nums", "--data", data)
	_, events, _ := keep(t, "events", "nums", "--data", data, "--json")
	for what, said := range map[string]string{"keep inputs": inputs, "keep events --json": events} {
		if !strings.Contains(said, "1795879280201") || strings.Contains(said, "e+12") {
			t.Fatalf("%s shows the script's numeric id as:\n%s", what, said)
		}
	}

	// keep serve's event API takes a number for id, and keeps it whole.
	addr, secret := testbin.Serve(t, keepBin, data)
	req, _ := http.NewRequest("POST", addr+"/api/v1/workflows/nums/topics/order/events", strings.NewReader(`{"id": 1795879280202, "title": "Order 1795879280202", "payload": {"n": 1}}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST an event with a numeric id: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Get(addr + "/api/v1/workflows/nums/inputs")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"externalId": "1795879280202"`) || !strings.Contains(string(body), `"externalId": "1795879280201"`) || strings.Contains(string(body), "e+12") {
		t.Fatalf("the API's inputs:\n%s", body)
	}
	if _, out, _ := keep(t, "inputs", "nums", "--data", data); !strings.Contains(out, "1795879280202") || strings.Contains(out, "e+12") {
		t.Fatalf("keep inputs through keep serve:\n%s", out)
	}
}

// Issue 42 #11: keep migrate's hint masked the user name
// (postgres://[redacted]@…); it masks the password only.
func TestMigrateShowsTheUserAndMasksThePassword(t *testing.T) {
	t.Parallel()
	base := pgtest.FreshSchema(t)
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var user string
	if err := db.QueryRow(`SELECT current_user`).Scan(&user); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	const password = "pw-9f8e7d6c5b"
	u.User = url.UserPassword(user, password) // trust: the server takes any
	dir := t.TempDir()
	data, wf := filepath.Join(dir, "data"), filepath.Join(dir, "nums.js")
	write(t, wf, nums)
	if code, out, errs := keep(t, "run", "--data", data, wf); code != 0 {
		t.Fatalf("keep run: %d\n%s%s", code, out, errs)
	}
	code, out, errs := keep(t, "migrate", "--data", data, "--to", u.String())
	said := out + errs
	if code != 0 || strings.Contains(said, password) || !strings.Contains(said, "pass --store postgres://"+user+":[redacted]@127.0.0.1") {
		t.Fatalf("keep migrate: exit %d, want the user %q shown and the password masked\n%s", code, user, said)
	}
}

// Issue 42 #12: the README's way to try keep plan without a paid model —
// keep-fake llm answering with a file, keep.toml's [llm] pointed at it —
// writes a valid script and its passing test.
func TestPlanWithKeepsFakeModel(t *testing.T) {
	t.Parallel()
	url := testbin.StartFake(t, keepBin, "llm", "--reply", "answer.md")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keep.toml")
	write(t, cfg, "[llm]\nbase_url = \""+url+"/v1\"\nmodel = \"fake\"\n")
	out := filepath.Join(dir, "notes.js")
	code, said, errs := keep(t, "plan", "copy each note in in/ to out/", "-o", out, "--config", cfg, "--data", filepath.Join(dir, "data"))
	if code != 0 || !strings.Contains(said, "wrote "+out+" (valid; 1 attempt") || !strings.Contains(said, "passes: keep test") {
		t.Fatalf("keep plan against keep-fake llm: exit %d\n%s%s", code, said, errs)
	}
}
