// Package secrets runs the keep binary against real HTTP servers to check
// issue 38 #4: a secret belongs to the workflows a person granted it to,
// and goes only to the hosts it is scoped to; a call that would send it
// elsewhere sends nothing and waits with a card that says what to do.
package secrets

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/keep-run/keep/internal/testbin"
)

var keepBin string

func TestMain(m *testing.M) { testbin.Main(m, &keepBin) }

// server is a real HTTP server that keeps every request it got.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
}

func newServer(t *testing.T) *server {
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, r.Clone(r.Context()))
		s.mu.Unlock()
		w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Request(nil), s.reqs...)
}

func (s *server) host() string { return strings.TrimPrefix(s.URL, "http://") }

// keepper runs keep in one folder, on one data directory and keep.toml.
type keepper struct {
	t         *testing.T
	dir, data string
}

func (k keepper) run(stdin string, args ...string) (int, string) {
	k.t.Helper()
	cmd := exec.Command(keepBin, append(args, "--data", k.data, "--config", filepath.Join(k.dir, "keep.toml"))...)
	cmd.Dir = k.dir
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		k.t.Fatalf("keep %v: %v", args, err)
	}
	return 0, string(out)
}

func (k keepper) must(stdin string, args ...string) string {
	k.t.Helper()
	code, out := k.run(stdin, args...)
	if code != 0 {
		k.t.Fatalf("keep %v: exit %d\n%s", args, code, out)
	}
	return out
}

// reader is a workflow whose producer reads url with the secret in the
// query and in a header.
func reader(name, url string) string {
	return `export default Keep.workflow({ name: "` + name + `", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    await ctx.http.request({ method: "GET", url: "` + url + `/contacts?k={secret:crm_token}", headers: { "X-Key": "{secret:crm_token}" } })
  } } } })`
}

// card is what keep show run --json says of a blocked run.
type card struct {
	Status, Reason, GrantItem string
	Grant                     bool
}

func (k keepper) blocked(wf string) (string, card) {
	k.t.Helper()
	var st []struct {
		Name         string
		Blocked      bool
		BlockedRunID string
	}
	out := k.must("", "status", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		k.t.Fatalf("status: %v %s", err, out)
	}
	for _, s := range st {
		if s.Name == wf && s.Blocked {
			var d struct{ Card card }
			show := k.must("", "show", "run", s.BlockedRunID, "--json")
			if err := json.Unmarshal([]byte(show), &d); err != nil {
				k.t.Fatalf("show run: %v %s", err, show)
			}
			return s.BlockedRunID, d.Card
		}
	}
	k.t.Fatalf("%s has no blocked run: %s", wf, out)
	return "", card{}
}

// Issue 38 #4 through the binary. A workflow granted only GET on one host
// sends ?k={secret:crm_token} and a header with it: the secret is a grant
// deploy names, the run waits with a card that names the grant and the
// scope, and nothing reaches the server. Once the secret is scoped to that
// host and granted, the one read goes through with the value. Another
// workflow granted the secret but reaching host B is refused: the secret
// is scoped to A only, and B gets nothing.
func TestASecretGoesOnlyWhereItIsGrantedAndScoped(t *testing.T) {
	t.Parallel()
	a, b := newServer(t), newServer(t)
	dir := t.TempDir()
	k := keepper{t: t, dir: dir, data: filepath.Join(dir, "data")}
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte("[connectors.http]\nallow = [\""+a.host()+"\", \""+b.host()+"\"]\n"), 0o644)
	const value = "crm-value-5f3e9a77"

	out := k.must(value+"\n", "secret", "set", "crm_token")
	if !strings.Contains(out, "crm_token goes to no host") {
		t.Fatalf("secret set without --host:\n%s", out)
	}
	os.WriteFile(filepath.Join(dir, "crm.js"), []byte(reader("crm", a.URL)), 0o644)
	out = k.must("", "deploy", "crm.js")
	if !strings.Contains(out, "not yet granted: http.request GET "+a.host()+", secret:crm_token") {
		t.Fatalf("deploy does not name the secret's grant:\n%s", out)
	}
	// Granted only the GET: its run (blocked at the GET since the deploy)
	// tries again and waits for the secret.
	code, out := k.run("", "grant", "crm", "http.request GET "+a.host(), "--yes")
	if code != 3 || !strings.Contains(out, "keep grant crm 'secret:crm_token'") {
		t.Fatalf("grant of the GET alone: exit %d (want 3: blocked, naming the secret's grant)\n%s", code, out)
	}
	if n := len(a.requests()); n != 0 {
		t.Fatalf("%d requests reached the server before the secret was granted", n)
	}
	_, c := k.blocked("crm")
	for _, want := range []string{"{secret:crm_token}", "keep secret scope crm_token --host " + a.host(), "keep grant crm 'secret:crm_token'"} {
		if !strings.Contains(c.Reason, want) {
			t.Errorf("the card's reason lacks %q:\n%s", want, c.Reason)
		}
	}
	if !c.Grant || c.GrantItem != "secret:crm_token" || c.Status != "paused:approval" {
		t.Fatalf("the card: %+v (want its Grant to grant secret:crm_token)", c)
	}

	// The scope, then the grant (which tries the run again by itself).
	out = k.must("", "secret", "scope", "crm_token", "--host", a.host())
	if !strings.Contains(out, "crm_token may go to "+a.host()) {
		t.Fatalf("secret scope:\n%s", out)
	}
	out = k.must("", "grant", "crm", "secret:crm_token", "--yes")
	if !strings.Contains(out, "granted crm: secret:crm_token") {
		t.Fatalf("grant:\n%s", out)
	}
	reqs := a.requests()
	if len(reqs) != 1 || reqs[0].Header.Get("X-Key") != value || reqs[0].URL.Query().Get("k") != value {
		t.Fatalf("after the grant and the scope: %d requests (want 1 with the value in its header and query)", len(reqs))
	}

	// Host B: granted the secret, but the secret may go to A only.
	os.WriteFile(filepath.Join(dir, "crm-b.js"), []byte(reader("crm-b", b.URL)), 0o644)
	k.must("", "deploy", "crm-b.js")
	code, out = k.run("", "grant", "crm-b", "--yes")
	if !strings.Contains(out, "secret:crm_token") {
		t.Fatalf("keep grant does not show the secret it grants:\n%s", out)
	}
	if code != 3 || len(b.requests()) != 0 {
		t.Fatalf("toward B: exit %d, %d requests at B (want blocked, 0)\n%s", code, len(b.requests()), out)
	}
	runB, c := k.blocked("crm-b")
	if !strings.Contains(c.Reason, "the secret may go only to "+a.host()) || !strings.Contains(c.Reason, "keep secret scope crm_token --host "+a.host()+" --host "+b.host()) || c.Grant {
		t.Fatalf("the card toward B: %+v", c)
	}
	// What the card says to do lets it through: the scope, then Try again.
	k.must("", "secret", "scope", "crm_token", "--host", a.host(), "--host", b.host())
	k.must("", "resolve", runB, "--try-again")
	if reqs := b.requests(); len(reqs) != 1 || reqs[0].Header.Get("X-Key") != value {
		t.Fatalf("after the scope and Try again: %d requests at B, want 1 with the value", len(reqs))
	}
	if n := len(a.requests()); n != 1 {
		t.Fatalf("%d requests at A, want the one read", n)
	}
	// keep secret list shows where it may go, never its value.
	out = k.must("", "secret", "list")
	if !strings.Contains(out, a.host()+", "+b.host()) && !strings.Contains(out, b.host()+", "+a.host()) || strings.Contains(out, value) {
		t.Fatalf("secret list:\n%s", out)
	}
}

// A custom connector's headers in keep.toml may name a secret: keep.toml's
// author bound it to the connector, so the connector's grant covers it (no
// secret:NAME grant is asked) — but it goes only to the secret's hosts
// all the same. A secret set without hosts waits with a card naming the
// scope, nothing sent; scoped to base_url's host, Try again sends it.
func TestACustomConnectorsSecretGoesOnlyToItsHosts(t *testing.T) {
	t.Parallel()
	a := newServer(t)
	dir := t.TempDir()
	k := keepper{t: t, dir: dir, data: filepath.Join(dir, "data")}
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(`[connectors.http]
allow = ["`+a.host()+`"]

[connectors.custom.crm]
base_url = "`+a.URL+`"
headers = { X-Key = "{secret:crm_sig}" }

[connectors.custom.crm.methods.contact]
kind = "read"
path = "/contacts/{id}"
params = { id = "the contact's id" }
`), 0o644)
	const value = "crm-sig-value-77aa"
	k.must(value, "secret", "set", "crm_sig")
	os.WriteFile(filepath.Join(dir, "wf.js"), []byte(`export default Keep.workflow({ name: "contacts", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    await ctx.crm.contact({ id: "1" })
  } } } })`), 0o644)
	out := k.must("", "deploy", "wf.js")
	if strings.Contains(out, "secret:") {
		t.Fatalf("deploy asks a grant of keep.toml's secret:\n%s", out)
	}
	code, out := k.run("", "grant", "contacts", "--yes")
	if code != 3 || len(a.requests()) != 0 {
		t.Fatalf("granted the connector, the secret unscoped: exit %d, %d requests (want blocked, 0)\n%s", code, len(a.requests()), out)
	}
	run, c := k.blocked("contacts")
	if !strings.Contains(c.Reason, "keep secret scope crm_sig --host "+a.host()) || c.Grant {
		t.Fatalf("the card: %+v", c)
	}
	k.must("", "secret", "scope", "crm_sig", "--host", a.host())
	k.must("", "resolve", run, "--try-again")
	if reqs := a.requests(); len(reqs) != 1 || reqs[0].Header.Get("X-Key") != value || reqs[0].URL.Path != "/contacts/1" {
		t.Fatalf("after the scope: %d requests, want 1 with the declared header's value", len(reqs))
	}
}
