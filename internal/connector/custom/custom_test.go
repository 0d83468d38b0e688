package custom_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	_ "github.com/keep-run/keep/internal/connector/builtin" // registers the connectors' tables
	"github.com/keep-run/keep/internal/connector/custom"
	khttp "github.com/keep-run/keep/internal/connector/http"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/netguard"
	"github.com/keep-run/keep/internal/testsink"
)

func crm(t *testing.T, sink *testsink.Sink) *connector.Registry {
	t.Setenv("CRM_TOKEN", "s3cret-token")
	cfg, err := config.Parse("keep.toml", sink.AllowTOML()+`
[connectors.custom.crm]
base_url = "`+sink.URL+`"
headers = { Authorization = "Bearer ${CRM_TOKEN}" }
sources = ["crm/ticket"]

[connectors.custom.crm.methods.createTicket]
kind = "write"
path = "/write/{customer}"
params = { customer = "who", subject = "what" }
required = ["customer", "subject"]
identity = ["customer"]
reconcile = { path = "/writes/{idempotencyKey}" }
errors = { "409" = "precondition", "418" = "transient" }

[connectors.custom.crm.methods.find]
kind = "read"
path = "/customers/{customer}"
params = { customer = "who", active = "only active ones" }
`)
	if err != nil {
		t.Fatal(err)
	}
	return connector.NewRegistry(custom.New("crm", config.Get[custom.Config](cfg, "custom")["crm"], netguard.New(khttp.Allow(cfg))))
}

func do(t *testing.T, reg *connector.Registry, method string, args map[string]any, key string) connector.Result {
	t.Helper()
	m, err := reg.Method("crm", method)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(args)
	args, _ = connector.DecodeArgs(b)
	if err := m.Validate(args); err != nil {
		t.Fatalf("%s refused: %v", method, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return m.Do(ctx, connector.Call{Args: args, IdempotencyKey: key})
}

func TestACustomWriteIsAnHTTPWriteWithItsLedgerStory(t *testing.T) {
	sink := testsink.New()
	defer sink.Close()
	reg := crm(t, sink)
	m, _ := reg.Method("crm", "createTicket")
	if m.Kind != connector.KindMutate || !m.CanReconcile(map[string]any{}) || len(m.Identity) != 1 {
		t.Fatalf("declared as %v, reconcile %v, identity %v", m.Kind, m.CanReconcile(nil), m.Identity)
	}
	args := map[string]any{"customer": "ann@example.com", "subject": "Broken mug"}
	sink.Queue(testsink.ResetAfter) // applied, the answer lost
	r := do(t, reg, "createTicket", args, "keep-k1")
	if r.Outcome != connector.OutcomeUncertain {
		t.Fatalf("%v %+v", r.Outcome, r.Err)
	}
	st, _, err := m.Reconcile(context.Background(), connector.Call{Args: args, IdempotencyKey: "keep-k1"})
	if err != nil || st != connector.ReconcileApplied {
		t.Fatalf("reconcile: %s %v", st, err)
	}
	if st, _, _ := m.Reconcile(context.Background(), connector.Call{Args: args, IdempotencyKey: "keep-never"}); st != connector.ReconcileFailed {
		t.Fatalf("reconcile of a write never made: %s", st)
	}
	w := sink.Writes()
	if len(w) != 1 || w[0].Key != "keep-k1" || w[0].Path != "/write/ann@example.com" || !strings.Contains(string(w[0].Body), `"subject":"Broken mug"`) {
		t.Fatalf("writes %+v", w)
	}
	if h := sink.Headers[0].Get("Authorization"); h != "Bearer s3cret-token" {
		t.Fatalf("the declared header went as %q", h)
	}
	sink.Queue(testsink.Status(409))
	r = do(t, reg, "createTicket", args, "keep-k2")
	if r.Outcome != connector.OutcomeFailed || r.Err.Class != kt.ClassPrecondition || !strings.Contains(r.Err.Message, "keep.toml maps 409") {
		t.Fatalf("409: %v %+v", r.Outcome, r.Err)
	}
	sink.Queue(testsink.Status(418))
	if r := do(t, reg, "createTicket", args, "keep-k3"); r.Err == nil || r.Err.Class != kt.ClassTransient {
		t.Fatalf("418 mapped to transient: %+v", r.Err)
	}
	if strings.Contains(m.Target(args), "s3cret") {
		t.Fatal("the token shows in the target")
	}
	mr, _ := reg.Method("crm", "find")
	if mr.Validate(map[string]any{"customer": "x", "colour": "red"}) == nil {
		t.Fatal("a parameter keep.toml does not declare was accepted")
	}
	if err := mr.Validate(map[string]any{}); err == nil || !strings.Contains(err.Error(), "customer") {
		t.Fatalf("a missing path parameter: %v", err)
	}
	r = do(t, reg, "find", map[string]any{"customer": "ann@example.com", "active": true}, "")
	v, _ := r.Value.(map[string]any)
	if r.Err != nil || v["json"].(map[string]any)["path"] != "/customers/ann@example.com" {
		t.Fatalf("%+v %v", r.Err, r.Value)
	}
}

func TestBadDeclarationsSayWhere(t *testing.T) {
	for text, want := range map[string]string{
		"[connectors.custom.crm]\nbase_url = \"ftp://x\"\n[connectors.custom.crm.methods.a]\nkind=\"read\"\npath=\"/\"\n":                              "[connectors.custom] crm.base_url: must be an http(s) URL",
		"[connectors.custom.http]\nbase_url = \"http://x\"\n[connectors.custom.http.methods.a]\nkind=\"read\"\npath=\"/\"\n":                           "not one of keep's own",
		"[connectors.custom.crm]\nbase_url = \"http://x\"\n[connectors.custom.crm.methods.a]\nkind=\"delete\"\npath=\"/\"\n":                           `kind must be "read" (list or search), "readById"`,
		"[connectors.custom.crm]\nbase_url = \"http://x\"\n[connectors.custom.crm.methods.a]\nkind=\"write\"\npath=\"/\"\n":                            "a write needs identity",
		"[connectors.custom.crm]\nbase_url = \"http://x\"\n[connectors.custom.crm.methods.a]\nkind=\"write\"\npath=\"/\"\nidentity=[\"id\"]\n":         `"id" is not one of its params`,
		"[connectors.custom.crm]\nbase_url = \"http://x\"\ncolour = 1\n[connectors.custom.crm.methods.a]\nkind=\"read\"\npath=\"/\"\n":                 "unknown key [connectors.custom.crm] colour (known: base_url, doc, headers, sources, methods)",
		"[connectors.custom.crm]\nbase_url = \"http://x\"\n[connectors.custom.crm.methods.a]\nkind=\"read\"\npath=\"/\"\nerrors={\"200\"=\"logic\"}\n": "errors maps HTTP statuses 400–599",
	} {
		if _, err := config.Parse("keep.toml", text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}

// A path parameter fills one segment of the path (issue 23, low): ".."
// once went out as /write/.. and reached another resource of the server.
func TestAPathParameterIsOneSegment(t *testing.T) {
	sink := testsink.New()
	defer sink.Close()
	reg := crm(t, sink)
	m, _ := reg.Method("crm", "createTicket")
	for _, v := range []string{"..", ".", "", "../admin", "a/b", `..\admin`} {
		args := map[string]any{"customer": v, "subject": "x"}
		err := m.Validate(args)
		if err == nil || !strings.Contains(err.Error(), "customer") {
			t.Errorf("customer %q: validation said %v; want a refusal naming customer", v, err)
		}
		if r := m.Do(context.Background(), connector.Call{Args: args, IdempotencyKey: "keep-" + v}); r.Outcome != connector.OutcomeFailed || r.Err.Class != kt.ClassLogic {
			t.Errorf("customer %q: sent anyway: %v %+v", v, r.Outcome, r.Err)
		}
	}
	if w := sink.Writes(); len(w) != 0 {
		t.Fatalf("the server got %+v", w)
	}
	r := do(t, reg, "createTicket", map[string]any{"customer": "a b?c#d%2e%2e", "subject": "x"}, "keep-ok")
	if w := sink.Writes(); r.Err != nil || len(w) != 1 || w[0].Path != "/write/a b?c#d%2e%2e" {
		t.Fatalf("an ordinary value with reserved characters: %+v %+v", r.Err, w)
	}
}

// A declared header may name a secret kept in keep: the http connector
// fills it in at the call and at the reconcile probe; a name keep does not
// have sends nothing and says `keep secret set NAME`.
func TestACustomHeaderNamesASecret(t *testing.T) {
	sink := testsink.New()
	defer sink.Close()
	cfg, err := config.Parse("keep.toml", sink.AllowTOML()+`
[connectors.custom.crm]
base_url = "`+sink.URL+`"
headers = { X-Custom-Sig = "{secret:crm_sig}" }

[connectors.custom.crm.methods.createTicket]
kind = "write"
path = "/write/{customer}"
params = { customer = "who" }
identity = ["customer"]
reconcile = { path = "/writes/{idempotencyKey}" }
`)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := connector.NewRegistry(custom.New("crm", config.Get[custom.Config](cfg, "custom")["crm"], netguard.New(khttp.Allow(cfg)))).Method("crm", "createTicket")
	secrets := map[string]string{}
	var hosts []string
	open := func(name, host string) (string, error) {
		hosts = append(hosts, host) // where the value goes: the engine checks it against the secret's hosts
		v, ok := secrets[name]
		if !ok {
			return "", kt.ErrNotFound
		}
		return v, nil
	}
	call := connector.Call{Args: map[string]any{"customer": "ann"}, IdempotencyKey: "keep-s1", Secret: open}
	r := m.Do(context.Background(), call)
	if r.Outcome != connector.OutcomeFailed || r.Err.Class != kt.ClassPermission || !strings.HasSuffix(r.Err.Message, "keep secret set crm_sig") || sink.Requests() != 0 {
		t.Fatalf("an unknown secret: %v %+v, %d requests", r.Outcome, r.Err, sink.Requests())
	}
	secrets["crm_sig"] = "sig-from-keep-1234"
	if r := m.Do(context.Background(), call); r.Outcome != connector.OutcomeApplied {
		t.Fatalf("%v %+v", r.Outcome, r.Err)
	}
	if st, _, err := m.Reconcile(context.Background(), call); st != connector.ReconcileApplied || err != nil {
		t.Fatalf("reconcile: %s %v", st, err)
	}
	if h := sink.Headers[0].Get("X-Custom-Sig"); h != "sig-from-keep-1234" {
		t.Fatalf("the declared header went as %q", h)
	}
	for _, h := range hosts {
		if h != sink.Host() {
			t.Fatalf("the secret was opened for %q; the request went to %s", h, sink.Host())
		}
	}
}

// A custom connector's base_url on this machine is refused like any URL
// unless keep.toml allows it ([connectors.http] allow serves both).
func TestAnUndeclaredLocalBaseURLIsRefused(t *testing.T) {
	sink := testsink.New()
	defer sink.Close()
	cfg, err := config.Parse("keep.toml", `
[connectors.custom.crm]
base_url = "`+sink.URL+`"
[connectors.custom.crm.methods.createTicket]
kind = "write"
path = "/write/{customer}"
params = { customer = "who" }
identity = ["customer"]
`)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := connector.NewRegistry(custom.New("crm", config.Get[custom.Config](cfg, "custom")["crm"], netguard.New(khttp.Allow(cfg)))).Method("crm", "createTicket")
	r := m.Do(context.Background(), connector.Call{Args: map[string]any{"customer": "ann"}, IdempotencyKey: "keep-k1"})
	if r.Outcome != connector.OutcomeFailed || r.Err == nil || r.Err.Class != kt.ClassPermission || !strings.Contains(r.Err.Message, "[connectors.http] allow") || sink.Requests() != 0 {
		t.Fatalf("%v %+v, %d requests", r.Outcome, r.Err, sink.Requests())
	}
}

// An unset ${VAR} in a declared header refuses the call before anything is
// sent, naming the variable and the header: a person's setting to fix, not a
// 401 that names nothing (issue 27's papercut).
func TestAnUnsetHeaderVariableIsNamedAndNothingIsSent(t *testing.T) {
	sink := testsink.New()
	defer sink.Close()
	reg := crm(t, sink)
	t.Setenv("CRM_TOKEN", "")
	r := do(t, reg, "createTicket", map[string]any{"customer": "ann@example.com", "subject": "Broken mug"}, "keep-k9")
	var ke *kt.Error
	if r.Outcome != connector.OutcomeFailed || !errors.As(r.Err, &ke) || ke.Class != kt.ClassPermission ||
		!strings.Contains(ke.Message, "header Authorization of [connectors.custom.crm] uses ${CRM_TOKEN}, which keep's environment does not set") {
		t.Fatalf("%v %v", r.Outcome, r.Err)
	}
	if n := sink.Requests(); n != 0 {
		t.Fatalf("%d requests reached the service", n)
	}
}
