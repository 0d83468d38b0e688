package http_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/connector"
	khttp "github.com/keep-run/keep/internal/connector/http"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/netguard"
	"github.com/keep-run/keep/internal/testsink"
)

// allowing is the http connector with the sink's address allowed, as
// keep.toml's [connectors.http] allow = ["127.0.0.1:port"] makes it.
func allowing(sink *testsink.Sink) *connector.Connector {
	return khttp.New(netguard.New([]string{sink.Host()}))
}

func request(t *testing.T, sink *testsink.Sink, method string, extra map[string]any) connector.Result {
	t.Helper()
	m := allowing(sink).Methods["request"]
	args := map[string]any{"method": method, "url": sink.URL + "/write/x", "json": map[string]any{"n": 1}, "timeoutMs": float64(300)}
	for k, v := range extra {
		args[k] = v
	}
	if err := m.Validate(args); err != nil {
		t.Fatalf("validate: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return m.Do(ctx, connector.Call{Args: args, IdempotencyKey: "keep-test-key"})
}

func TestMutationFaultMatrix(t *testing.T) {
	t.Parallel()
	cases := []struct {
		fault   testsink.Fault
		outcome connector.Outcome
		class   kt.ErrorClass
		applied int
	}{
		{testsink.OK, connector.OutcomeApplied, "", 1},
		{testsink.Slow, connector.OutcomeApplied, "", 1},
		{testsink.TimeoutAfter, connector.OutcomeUncertain, kt.ClassIndeterminate, 1},
		{testsink.TimeoutBefore, connector.OutcomeUncertain, kt.ClassIndeterminate, 0},
		{testsink.Status500, connector.OutcomeUncertain, kt.ClassIndeterminate, 1},
		{testsink.Status503, connector.OutcomeUncertain, kt.ClassIndeterminate, 0},
		{testsink.Status(502), connector.OutcomeUncertain, kt.ClassIndeterminate, 0},
		{testsink.Status(504), connector.OutcomeUncertain, kt.ClassIndeterminate, 0},
		{testsink.ResetAfter, connector.OutcomeUncertain, kt.ClassIndeterminate, 1},
		{testsink.TruncAfter, connector.OutcomeUncertain, kt.ClassIndeterminate, 1},
		{testsink.Status(401), connector.OutcomeFailed, kt.ClassPermission, 0},
		{testsink.Status(403), connector.OutcomeFailed, kt.ClassPermission, 0},
		{testsink.Status(404), connector.OutcomeFailed, kt.ClassPrecondition, 0},
		{testsink.Status(409), connector.OutcomeFailed, kt.ClassPrecondition, 0},
		{testsink.Status(429), connector.OutcomeFailed, kt.ClassTransient, 0},
		{testsink.Status(400), connector.OutcomeFailed, kt.ClassLogic, 0},
		// Post/Redirect/Get: a redirect after a write may follow an applied
		// write, so it is never "certainly not applied"; 307/308 ask for the
		// same request elsewhere.
		{testsink.Status(303), connector.OutcomeUncertain, kt.ClassIndeterminate, 0},
		{testsink.Status(302), connector.OutcomeUncertain, kt.ClassIndeterminate, 0},
		{testsink.Status(307), connector.OutcomeFailed, kt.ClassLogic, 0},
	}
	for _, c := range cases {
		t.Run(string(c.fault), func(t *testing.T) {
			t.Parallel()
			sink := testsink.New()
			defer sink.Close()
			sink.Queue(c.fault)
			var extra map[string]any
			if c.fault == testsink.Slow {
				// A slow answer well inside the time limit: the sink's 200 ms
				// against 300 ms raced on a busy machine; the point is only
				// that an answer that comes in time is applied.
				extra = map[string]any{"timeoutMs": float64(30000)}
			}
			r := request(t, sink, "POST", extra)
			if r.Outcome != c.outcome {
				t.Fatalf("outcome %d, want %d (%v)", r.Outcome, c.outcome, r.Err)
			}
			if c.class != "" && (r.Err == nil || r.Err.Class != c.class) {
				t.Fatalf("class %+v, want %s", r.Err, c.class)
			}
			if n := len(sink.Writes()); n != c.applied {
				t.Fatalf("applied %d, want %d", n, c.applied)
			}
		})
	}
}

func TestConnectionRefusedIsDefiniteTransient(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	url := sink.URL
	sink.Close()
	m := allowing(sink).Methods["request"]
	r := m.Do(context.Background(), connector.Call{Args: map[string]any{"method": "POST", "url": url + "/x"}})
	if r.Outcome != connector.OutcomeFailed || r.Err.Class != kt.ClassTransient || !strings.Contains(r.Err.Message, "was not sent") {
		t.Fatalf("%+v %+v", r.Outcome, r.Err)
	}
}

func TestIdempotencyKeyAndSecretsHeaders(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	r := request(t, sink, "PUT", map[string]any{"headers": map[string]any{"Authorization": "Bearer s3cret"}})
	if r.Outcome != connector.OutcomeApplied {
		t.Fatal(r.Err)
	}
	if got := sink.Headers[0].Get("Idempotency-Key"); got != "keep-test-key" {
		t.Fatalf("Idempotency-Key %q", got)
	}
	m := allowing(sink).Methods["request"]
	red := m.Redact(map[string]any{"headers": map[string]any{"Authorization": "Bearer s3cret", "X-Trace": "1"}})
	if h := red["headers"].(map[string]any); h["Authorization"] != "[redacted]" || h["X-Trace"] != "1" {
		t.Fatalf("redacted %v", red)
	}
}

func TestReadsAreClassified(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	m := allowing(sink).Methods["request"]
	if m.KindFor(map[string]any{"method": "GET"}) != connector.KindRead || m.KindFor(map[string]any{"method": "post"}) != connector.KindMutate {
		t.Fatal("kinds")
	}
	r := m.Do(context.Background(), connector.Call{Args: map[string]any{"url": sink.URL + "/thing"}})
	if r.Err != nil || r.Value.(map[string]any)["status"] != http.StatusOK || r.Value.(map[string]any)["json"].(map[string]any)["ok"] != true {
		t.Fatalf("%+v", r)
	}
	for _, bad := range []map[string]any{{"url": "ftp://x"}, {"url": sink.URL, "method": "TRACE"}, {"url": sink.URL, "body": 5}, {"url": sink.URL, "headers": "x"}} {
		if err := m.Validate(bad); err == nil {
			t.Errorf("accepted %v", bad)
		}
	}
}

func TestReconcileProbe(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	m := allowing(sink).Methods["request"]
	args := map[string]any{"method": "POST", "url": sink.URL + "/write/x", "reconcile": map[string]any{"url": sink.URL + "/writes/{idempotencyKey}"}}
	if !m.CanReconcile(args) || m.CanReconcile(map[string]any{"method": "POST"}) {
		t.Fatal("CanReconcile")
	}
	st, _, _ := m.Reconcile(context.Background(), connector.Call{Args: args, IdempotencyKey: "k1"})
	if st != connector.ReconcileFailed {
		t.Fatalf("absent → %s", st)
	}
	m.Do(context.Background(), connector.Call{Args: args, IdempotencyKey: "k1"})
	st, v, _ := m.Reconcile(context.Background(), connector.Call{Args: args, IdempotencyKey: "k1"})
	if st != connector.ReconcileApplied || v.(map[string]any)["status"] != 200 {
		t.Fatalf("present → %s %v", st, v)
	}
	sink.QueueProbe(503)
	if st, _, _ := m.Reconcile(context.Background(), connector.Call{Args: args, IdempotencyKey: "k1"}); st != connector.ReconcileRetry {
		t.Fatalf("503 → %s", st)
	}
}

// TestTransportNeverResendsAWrite is the regression test for a duplicate the
// torture test found: Go's transport re-sends a request that fails on a
// reused connection when it carries an Idempotency-Key header.
func TestTransportNeverResendsAWrite(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	m := allowing(sink).Methods["request"]
	for i, fault := range []testsink.Fault{testsink.OK, testsink.ResetAfter, testsink.OK, testsink.ResetAfter} {
		sink.Queue(fault)
		r := m.Do(context.Background(), connector.Call{Args: map[string]any{"method": "POST", "url": sink.URL + "/write/x", "json": map[string]any{"i": i}},
			IdempotencyKey: fmt.Sprintf("keep-%d", i)})
		if fault == testsink.ResetAfter && r.Outcome != connector.OutcomeUncertain {
			t.Fatalf("request %d: outcome %d", i, r.Outcome)
		}
	}
	if sink.Requests() != 4 || len(sink.Writes()) != 4 {
		t.Fatalf("requests %d writes %d: the transport re-sent a write", sink.Requests(), len(sink.Writes()))
	}
}

func TestComparePayload(t *testing.T) {
	t.Parallel()
	cmp := khttp.New(nil).Methods["request"].ComparePayload
	a := map[string]any{"json": map[string]any{"x": 1, "y": []any{"a"}}, "headers": map[string]any{"X-Trace": "1"}}
	same := map[string]any{"json": map[string]any{"y": []any{"a"}, "x": 1}, "headers": map[string]any{"X-Trace": "1"}}
	headers := map[string]any{"json": map[string]any{"x": 1, "y": []any{"a"}}, "headers": map[string]any{"X-Trace": "2"}}
	body := map[string]any{"json": map[string]any{"x": 2, "y": []any{"a"}}}
	if cmp(a, same) != connector.Equivalent || cmp(a, headers) != connector.Minor || cmp(a, body) != connector.Significant {
		t.Fatalf("compare: %s %s %s", cmp(a, same), cmp(a, headers), cmp(a, body))
	}
}

// What the sandbox is told of http.request's writes (issue 25: it takes a
// consumer's write over without asking keep) agrees with the kind keep
// gives each call, whatever the method's spelling.
func TestTheSandboxTellsWritesAsKeepDoes(t *testing.T) {
	t.Parallel()
	reg := connector.NewRegistry(khttp.New(netguard.New(nil)))
	rule, ok := reg.WriteRules()["http.request"]
	if !ok || rule == nil {
		t.Fatalf("http.request's write rule: %v %v", rule, ok)
	}
	method, err := reg.Method("http", "request")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{nil, "", "get", "GET", "Head", "post", "PUT", "patch", "DELETE", "options", 7, true} {
		args := map[string]any{"url": "https://example.com/x"}
		if v != nil {
			args["method"] = v
		}
		for _, kind := range []any{nil, "byId"} {
			if kind != nil {
				args["kind"] = kind
			}
			if keep, sandbox := method.KindFor(args) == connector.KindMutate, !rule.IsRead(args); keep != sandbox {
				t.Errorf("method %v, kind %v: keep says write=%v, the sandbox write=%v", v, kind, keep, sandbox)
			}
		}
	}
}

// Issue 38 #4: a secret is opened for the host the request really goes
// to. A URL that names one host before an '@' and dials another, or that
// puts the secret in its host, opens it for the host dialled (or for
// none), so a secret scoped to A never goes to B; nothing is sent when the
// opening is refused.
func TestASecretIsOpenedForTheHostDialled(t *testing.T) {
	var got [2]atomic.Int64
	var servers [2]*httptest.Server
	for i := range servers {
		servers[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got[i].Add(1) }))
		defer servers[i].Close()
	}
	a, b := strings.TrimPrefix(servers[0].URL, "http://"), strings.TrimPrefix(servers[1].URL, "http://")
	m := khttp.New(netguard.New([]string{a, b})).Methods["request"]
	var asked []string
	open := func(name, host string) (string, error) {
		asked = append(asked, host)
		if host != a {
			return "", kt.Errorf(kt.ClassPermission, "not scoped to %q", host)
		}
		return "value-1234", nil
	}
	for _, c := range []struct{ name, url, header, want string }{
		{"userinfo names A, B is dialled", "http://" + a + "@" + b + "/x?k={secret:tok}", "", b},
		{"a header toward B", "http://" + b + "/x", "{secret:tok}", b},
		{"the secret in the host", "http://{secret:tok}.localhost/x", "", ""},
	} {
		asked = nil
		args := map[string]any{"method": "GET", "url": c.url}
		if c.header != "" {
			args["headers"] = map[string]any{"X-Key": c.header}
		}
		r := m.Do(context.Background(), connector.Call{Args: args, Secret: open})
		if r.Err == nil || len(asked) == 0 || asked[0] != c.want {
			t.Errorf("%s: %+v, opened for %q (want refused, opened for %q)", c.name, r.Err, asked, c.want)
		}
	}
	if n := got[0].Load() + got[1].Load(); n != 0 {
		t.Fatalf("%d requests went out", n)
	}
	// Toward A it goes.
	r := m.Do(context.Background(), connector.Call{Args: map[string]any{"method": "GET", "url": "http://" + a + "/x?k={secret:tok}", "headers": map[string]any{"X-Key": "{secret:tok}"}}, Secret: open})
	if r.Err != nil || got[0].Load() != 1 {
		t.Fatalf("toward A: %+v, %d requests", r.Err, got[0].Load())
	}
}
