// Package connectortest is the one suite every connector with writes
// passes against its fake (internal/fake, faults from package fault) or a
// real server: a write's identity is stable across retries, reconcile
// finds an applied write and never an unsent one, each fault class is
// classified as docs/scripts.md ("Errors a script sees") says, a changed
// payload is compared, and credentials never reach a trace, a result or an
// error. A connector's own tests call Exercise.
//
// It is imported by tests only.
package connectortest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/fake/fault"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/redact"
)

// Target is one write method of a connector and the server it reaches.
type Target struct {
	// Registry holds the connector, set up with a working credential.
	Registry     *connector.Registry
	Tool, Method string
	// Args are a write's arguments as a script gives them.
	Args map[string]any
	// Changed is Args with a payload parameter changed: the comparison
	// must find it significant. nil for a write whose arguments are all
	// identity (a reaction): two calls of it are the same write, their
	// payloads always equal, and the suite checks that Args has none.
	Changed map[string]any
	// Applied counts the writes of Args the server holds now (counted at
	// the server, not by the connector).
	Applied func(t *testing.T) int
	// Arm arms one fault of a kind of package fault on the write's next
	// call; retryAfter is the 429's Retry-After in seconds.
	Arm func(t *testing.T, kind string, retryAfter int)
	// Kinds are the fault kinds the server can inject (default: all of
	// package fault's not in NotApplicable).
	Kinds []string
	// NotApplicable names the fault kinds that cannot happen to this
	// connector, each with the reason (a local file has no 429). Every
	// kind of package fault is either run or named here: the suite fails
	// on a kind left out silently, and reports each one named here.
	NotApplicable map[string]string
	// Open opens the secrets a call names ({secret:NAME}), as the daemon
	// hands them to the connector; nil when the connector holds its own.
	Open connector.SecretFunc
	// Refreshes401 says a 401 means an expired access token that the
	// connector refreshes and sends once more (Google): the write is
	// applied once. Otherwise a 401 is a permission error.
	Refreshes401 bool
	// Secret is the credential the connector sends (a token): it must not
	// appear in anything keep records or shows.
	Secret string
	// SameArgsSameWrite, when set, says why a write is found by its
	// arguments rather than its key (a file holding the same content is
	// the same write): reconcile then need not tell two keys apart.
	SameArgsSameWrite string
	// NoCredential, when Secret is empty, says why the connector sends
	// none (a local file): the suite reports the redaction part as skipped.
	NoCredential string
}

// hangs are the kinds whose server answers nothing: only they get a short
// limit, which the server never races (it waits for the client to give up).
var hangs = map[string]bool{fault.Timeout: true, fault.TimeoutAfterApply: true}

// Exercise runs the suite on the target newTarget sets up (a fresh server
// for each part).
func Exercise(t *testing.T, newTarget func(t *testing.T) *Target) {
	t.Run("identity", func(t *testing.T) { identity(t, newTarget(t)) })
	t.Run("reconcile", func(t *testing.T) { reconcile(t, newTarget(t)) })
	t.Run("faults", func(t *testing.T) { faults(t, newTarget) })
	t.Run("payload", func(t *testing.T) { payload(t, newTarget(t)) })
	t.Run("redaction", func(t *testing.T) { redaction(t, newTarget) })
}

func (tg *Target) method(t *testing.T) *connector.Method {
	t.Helper()
	m, err := tg.Registry.Method(tg.Tool, tg.Method)
	if err != nil {
		t.Fatal(err)
	}
	if m.KindFor(tg.Args) != connector.KindMutate {
		t.Fatalf("%s.%s with %v is not a write", tg.Tool, tg.Method, tg.Args)
	}
	return m
}

// args returns a as a script's call hands it over (JSON, decoded afresh).
func args(t *testing.T, a map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	out, err := connector.DecodeArgs(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (tg *Target) do(t *testing.T, key string, limit time.Duration) connector.Result {
	t.Helper()
	m := tg.method(t)
	a := args(t, tg.Args)
	if m.Validate != nil {
		if err := m.Validate(a); err != nil {
			t.Fatalf("%s.%s refused %v: %v", tg.Tool, tg.Method, a, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return m.Do(ctx, connector.Call{Args: a, IdempotencyKey: key, Secret: tg.Open})
}

func (tg *Target) reconcile(t *testing.T, key string) connector.ReconcileStatus {
	t.Helper()
	st, err := tg.tryReconcile(t, key)
	if err != nil {
		t.Fatalf("reconcile %s.%s: %v", tg.Tool, tg.Method, err)
	}
	return st
}

func (tg *Target) tryReconcile(t *testing.T, key string) (connector.ReconcileStatus, error) {
	t.Helper()
	m := tg.method(t)
	if !m.CanReconcile(tg.Args) {
		t.Fatalf("%s.%s declares no reconcile for %v: an uncertain write would always wait for a person", tg.Tool, tg.Method, tg.Args)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, _, err := m.Reconcile(ctx, connector.Call{Args: args(t, tg.Args), IdempotencyKey: key, Secret: tg.Open})
	return st, err
}

// identity: the key of a write is the same for the same call however its
// arguments arrive (a retry decodes them afresh), changes with an identity
// parameter, and not with the payload.
func identity(t *testing.T, tg *Target) {
	m := tg.method(t)
	key := func(a map[string]any) string {
		id, _ := m.Split(a)
		return engine.Identity{Workflow: "wf", Handler: "h", Tool: tg.Tool, Method: tg.Method, Params: id}.ConsumerKey([]string{"unit"})
	}
	first := key(tg.Args)
	if again := key(args(t, tg.Args)); again != first {
		t.Fatalf("the identity of %v changed when its arguments were decoded again: %s → %s", tg.Args, first, again)
	}
	if tg.Changed == nil {
		if _, payload := m.Split(args(t, tg.Args)); len(payload) > 0 {
			t.Fatalf("Changed is nil but %v has payload params %v: give Changed", tg.Args, payload)
		}
	} else if changed := key(args(t, tg.Changed)); changed != first {
		t.Fatalf("a changed payload changed the write's identity: Changed must differ from Args in payload only (identity params %v)", m.Identity)
	}
	if len(m.Identity) == 0 {
		t.Fatalf("%s.%s declares no identity params: what does it write to?", tg.Tool, tg.Method)
	}
	for _, p := range m.Identity {
		other := args(t, tg.Args)
		other[p] = fmt.Sprint(other[p], "-other")
		if key(other) == first {
			t.Errorf("changing the identity param %s does not change the write's identity", p)
		}
	}
}

// reconcile finds an applied write by its key, and neither an unsent one
// nor another write's.
func reconcile(t *testing.T, tg *Target) {
	if st := tg.reconcile(t, "keep-unsent"); st == connector.ReconcileApplied {
		t.Fatalf("reconcile found a write that was never sent")
	}
	before := tg.Applied(t)
	r := tg.do(t, "keep-sent", time.Minute)
	if r.Outcome != connector.OutcomeApplied || r.Err != nil {
		t.Fatalf("the write: %v %+v", r.Outcome, r.Err)
	}
	if n := tg.Applied(t); n != before+1 {
		t.Fatalf("the server holds %d writes after one write (had %d)", n, before)
	}
	if st := tg.reconcile(t, "keep-sent"); st != connector.ReconcileApplied {
		t.Fatalf("reconcile of an applied write answered %s", st)
	}
	if tg.SameArgsSameWrite != "" {
		t.Logf("%s.%s: another key with the same arguments is the same write: %s", tg.Tool, tg.Method, tg.SameArgsSameWrite)
		return
	}
	if st := tg.reconcile(t, "keep-unsent"); st == connector.ReconcileApplied {
		t.Fatalf("reconcile took another write's (same arguments) for this key's")
	}
}

// faults: each fault class comes out as the docs say, and reconcile then
// tells whether the write happened. Each fault meets a fresh server and
// credential: a refused one stays refused until a person reconnects.
func faults(t *testing.T, newTarget func(t *testing.T) *Target) {
	first := newTarget(t)
	kinds := first.kinds(t)
	for _, kind := range kinds {
		want, ok := connector.FaultClasses[kind]
		if !ok {
			t.Fatalf("no class is documented for the fault %q", kind)
		}
		if kind == fault.Status401 && first.Refreshes401 {
			want = connector.FaultClass{Outcome: connector.OutcomeApplied, Applied: true}
		}
		t.Run(kind, func(t *testing.T) {
			tg := newTarget(t)
			key := "keep-fault-" + kind
			before := tg.Applied(t)
			tg.Arm(t, kind, 2)
			limit := time.Minute
			if hangs[kind] {
				limit = 500 * time.Millisecond
			}
			r := tg.do(t, key, limit)
			if r.Outcome != want.Outcome || (want.Class == "") != (r.Err == nil) || (r.Err != nil && r.Err.Class != want.Class) {
				t.Fatalf("outcome %v, error %+v; docs/scripts.md says %v %q", r.Outcome, r.Err, want.Outcome, want.Class)
			}
			if applied := tg.Applied(t) == before+1; applied != want.Applied {
				t.Fatalf("the server holds the write: %v; want %v", applied, want.Applied)
			}
			st, err := tg.tryReconcile(t, key)
			if err != nil && (want.Class != kt.ClassPermission || want.Applied) {
				// Only a refused credential leaves reconcile unable to look.
				t.Fatalf("reconcile: %v", err)
			}
			if err == nil && (st == connector.ReconcileApplied) != want.Applied {
				t.Fatalf("reconcile answered %s; the write was applied: %v", st, want.Applied)
			}
			if kind == fault.Status429 && r.Err.RetryAfter != 2*time.Second {
				t.Fatalf("429 with Retry-After: 2 came as a retry after %v", r.Err.RetryAfter)
			}
		})
	}
}

// kinds are the fault kinds to run: Kinds, or every kind of package fault
// not declared NotApplicable. A kind neither run nor declared fails the
// suite; each declared one shows as a skipped subtest with its reason.
func (tg *Target) kinds(t *testing.T) []string {
	t.Helper()
	run := map[string]bool{}
	for _, k := range tg.Kinds {
		run[k] = true
	}
	var kinds []string
	for _, kind := range fault.KindNames() {
		reason, na := tg.NotApplicable[kind]
		switch {
		case na && run[kind]:
			t.Fatalf("fault %q is both run (Kinds) and declared not applicable", kind)
		case na && reason == "":
			t.Fatalf("fault %q is declared not applicable without a reason", kind)
		case na:
			t.Run(kind, func(t *testing.T) { t.Skipf("not applicable to %s.%s: %s", tg.Tool, tg.Method, reason) })
		case tg.Kinds == nil || run[kind]:
			kinds = append(kinds, kind)
		default:
			t.Errorf("fault %q is neither run (Kinds) nor declared not applicable (NotApplicable, with the reason)", kind)
		}
	}
	for k := range tg.NotApplicable {
		if _, ok := fault.Kinds[k]; !ok {
			t.Errorf("NotApplicable names %q, which is no fault kind", k)
		}
	}
	return kinds
}

// payload: the same payload is equivalent, a changed one significant. A
// write whose arguments are all identity has nothing to compare: the
// ledger finds the same payload hash and replays (engine.onFound).
func payload(t *testing.T, tg *Target) {
	m := tg.method(t)
	if _, p := m.Split(args(t, tg.Args)); len(p) == 0 && tg.Changed == nil {
		t.Skipf("%s.%s has no payload params (identity %v): every call with the same identity is the same write", tg.Tool, tg.Method, m.Identity)
	}
	if m.ComparePayload == nil {
		t.Fatalf("%s.%s has no ComparePayload: a changed write for work already done could not be told apart", tg.Tool, tg.Method)
	}
	_, old := m.Split(args(t, tg.Args))
	_, same := m.Split(args(t, tg.Args))
	_, changed := m.Split(args(t, tg.Changed))
	if c := m.ComparePayload(old, same); c != connector.Equivalent {
		t.Errorf("the same payload compares as %s", c)
	}
	if c := m.ComparePayload(old, changed); c != connector.Significant {
		t.Errorf("a changed payload (%v → %v) compares as %s", old, changed, c)
	}
}

// redaction: the credential the connector sends never shows — not in the
// arguments a trace records, a result, or an error, even when a server's
// answer or a script's argument quotes it.
func redaction(t *testing.T, newTarget func(t *testing.T) *Target) {
	tg := newTarget(t)
	if tg.Secret == "" && tg.NoCredential != "" {
		t.Skipf("%s.%s sends no credential: %s", tg.Tool, tg.Method, tg.NoCredential)
	}
	if tg.Secret == "" {
		t.Fatal("give the credential the connector sends (Target.Secret), or say why it sends none (Target.NoCredential)")
	}
	m := tg.method(t)
	quoted := args(t, tg.Args)
	for k, v := range quoted {
		if s, ok := v.(string); ok {
			quoted[k] = s + " " + tg.Secret
			break
		}
	}
	shown, _ := json.Marshal(m.Redact(quoted))
	if strings.Contains(string(shown), tg.Secret) {
		t.Errorf("a trace of the call's arguments shows the credential: %s", shown)
	}
	for _, kind := range []string{"", fault.Status401, fault.Status403} {
		if _, na := tg.NotApplicable[kind]; na {
			continue
		}
		tg := newTarget(t)
		if kind != "" {
			tg.Arm(t, kind, 1)
		}
		r := tg.do(t, "keep-redaction-"+kind, time.Minute)
		out, _ := json.Marshal(r.Value)
		text := string(out)
		if r.Err != nil {
			text += " " + r.Err.Message
		}
		if strings.Contains(redact.String(text), tg.Secret) {
			t.Errorf("fault %q: what keep shows of the call holds the credential: %s", kind, text)
		}
	}
}
