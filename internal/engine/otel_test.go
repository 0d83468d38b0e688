package engine_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/keep-run/keep/internal/engine"
	"github.com/keep-run/keep/internal/hookreq"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testotlp"
	"github.com/keep-run/keep/internal/testsink"
)

// tracedEnv is newEnv with keep.toml's [otel] pointing at a real OTLP
// receiver (more: keys of [otel] besides the endpoint).
func tracedEnv(t *testing.T, more string) (*env, *testotlp.Collector) {
	t.Helper()
	col := testotlp.New(http.StatusOK)
	t.Cleanup(col.Close)
	return newEnvWith(t, testPolicy+fmt.Sprintf("\n[otel]\nendpoint = %q\n%s\n", col.URL, more)), col
}

// flushed stops keep, which sends what it holds, and starts it again.
func flushed(e *env, col *testotlp.Collector) []testotlp.Span {
	e.restart()
	return col.Spans()
}

// runSpans are the spans of runs, by run id.
func runSpans(t *testing.T, spans []testotlp.Span) map[string]testotlp.Span {
	t.Helper()
	out := map[string]testotlp.Span{}
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "run ") {
			if _, dup := out[s.Attrs["keep.run.id"]]; dup {
				t.Errorf("two spans of run %s", s.Attrs["keep.run.id"])
			}
			out[s.Attrs["keep.run.id"]] = s
		}
	}
	return out
}

// phase is the child span of run called name.
func phase(t *testing.T, spans []testotlp.Span, run testotlp.Span, name string) testotlp.Span {
	t.Helper()
	found := testotlp.Named(testotlp.Children(spans, run), name)
	if len(found) != 1 {
		t.Fatalf("run %s has %d %s phases (spans: %v)", run.Attrs["keep.run.id"], len(found), name, names(testotlp.Children(spans, run)))
	}
	return found[0]
}

func names(spans []testotlp.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// A write whose answer is lost after it applied: its call span says
// unknown, with the class, and the reconcile probe that found it applied
// is a sibling under mutate; the run ends committed, its write once at
// the sink.
func TestSpansOfAnUnknownWriteAndItsReconcile(t *testing.T) {
	t.Parallel()
	e, col := tracedEnv(t, "")
	e.sink.Queue(testsink.TimeoutAfter)
	wf := e.deploy(hookScript("", withProbe))
	e.settle()
	spans := flushed(e, col)
	var consumer testotlp.Span
	for _, r := range e.runs(wf) {
		s, ok := runSpans(t, spans)[r.ID]
		if !ok {
			t.Fatalf("run %s (%s) has no span", r.ID, r.Handler)
		}
		if r.Handler == "c" {
			consumer = s
		}
	}
	if consumer.Attrs["keep.run.status"] != string(kt.StatusCommitted) || consumer.Error {
		t.Fatalf("the consumer run's span: %+v", consumer)
	}
	mutate := phase(t, spans, consumer, "mutate")
	calls := testotlp.Children(spans, mutate)
	if len(calls) != 2 {
		t.Fatalf("mutate's children: %v", names(calls))
	}
	call, probe := calls[0], calls[1]
	if call.Name != "call http.request" || call.Attrs["keep.call.outcome"] != "unknown" || call.Attrs["keep.error.class"] != string(kt.ClassIndeterminate) || !call.Error {
		t.Errorf("the call: %+v", call)
	}
	if probe.Name != "reconcile http.request" || probe.Attrs["keep.reconcile.answer"] != "applied" || probe.Attrs["keep.call.kind"] != "reconcile" || probe.Error {
		t.Errorf("the probe: %+v", probe)
	}
	if !strings.Contains(strings.Join(mutate.Events, "\n"), "keep.mutation.note=in_flight") {
		t.Errorf("mutate's events: %v", mutate.Events)
	}
	if n := len(e.sink.Writes()); n != 1 {
		t.Errorf("writes at the sink: %d", n)
	}
}

// A transient failure and its retry: the failed run's span has the error
// status and class, the retry's names the run it retries.
func TestSpansOfATransientFailureAndItsRetry(t *testing.T) {
	t.Parallel()
	e, col := tracedEnv(t, "")
	e.sink.Queue(testsink.Status(http.StatusTooManyRequests))
	wf := e.deploy(hookScript("", ""))
	e.settle()
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink: %d", n)
	}
	byRun := runSpans(t, flushed(e, col))
	var failed, retry int
	for _, r := range e.runs(wf) {
		s, ok := byRun[r.ID]
		if !ok {
			t.Fatalf("run %s (%s %s) has no span", r.ID, r.Handler, r.Status)
		}
		switch {
		case r.Handler == "c" && r.RetryOf == "":
			failed++
			if !s.Error || s.Attrs["keep.error.class"] != string(kt.ClassTransient) || !strings.HasPrefix(s.Message, "transient: ") {
				t.Errorf("the failed run's span: %+v", s)
			}
		case r.Handler == "c":
			retry++
			if s.Attrs["keep.run.retry_of"] != r.RetryOf || s.Error || s.Attrs["keep.run.status"] != string(kt.StatusCommitted) {
				t.Errorf("the retry's span: %+v (run %+v)", s, r)
			}
		}
	}
	if failed != 1 || retry != 1 {
		t.Errorf("%d failed consumer runs, %d retries", failed, retry)
	}
}

// sample_ratio = 0 traces nothing: not one export, and the run is as ever.
func TestSampleRatioZeroSendsNothing(t *testing.T) {
	t.Parallel()
	e, col := tracedEnv(t, "sample_ratio = 0")
	wf := e.deploy(hookScript("", ""))
	e.settle()
	e.restart()
	if n := col.Requests(); n != 0 {
		t.Errorf("%d exports with sample_ratio = 0", n)
	}
	if n := len(e.sink.Writes()); n != 1 || len(e.runs(wf)) == 0 {
		t.Errorf("writes at the sink: %d, runs %d", n, len(e.runs(wf)))
	}
}

// Each request to a webhook is a server span, with what keep made of it;
// an accepted one's handler is its child; a handler that fails is an error.
func TestSpansOfWebhookDeliveries(t *testing.T) {
	t.Parallel()
	e, col := tracedEnv(t, "")
	setUpWebhooks(t, e)
	writes := hookreq.Hook{Workflow: "orders", Name: "writes", Method: "POST", Header: http.Header{"X-Token": {"t0ken-shop"}}, Body: []byte(`{}`)}
	for _, h := range []hookreq.Hook{shopHook("d-1", "1", "t0ken-shop"), shopHook("d-1", "1", "t0ken-shop"), shopHook("d-2", "2", "wrong"), writes} {
		if _, err := e.k.Webhooks.Deliver(e.ctx(), h); err != nil {
			t.Fatal(err)
		}
	}
	spans := flushed(e, col)
	got := map[string]testotlp.Span{}
	for _, s := range append(testotlp.Named(spans, "webhook orders/shop"), testotlp.Named(spans, "webhook orders/writes")...) {
		got[s.Attrs["keep.delivery.status"]] = s
		if s.Attrs["keep.workflow"] != "orders" || s.Kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("delivery span %s: %+v", s.Name, s)
		}
	}
	accepted, dup, refused, failed := got["accepted"], got["duplicate"], got["refused"], got["failed"]
	if accepted.Attrs["keep.delivery.id"] != "d-1" || accepted.Attrs["keep.delivery.inputs"] != "1" || accepted.Error || len(testotlp.Named(testotlp.Children(spans, accepted), "webhook")) != 1 {
		t.Errorf("the accepted delivery: %+v", accepted)
	}
	if dup.Attrs["keep.delivery.id"] != "d-1" || dup.Error || len(testotlp.Children(spans, dup)) != 0 {
		t.Errorf("the duplicate: %+v", dup)
	}
	if refused.Attrs["keep.delivery.why"] != string(hookreq.WhyBadSig) || refused.Error || strings.Contains(fmt.Sprint(refused), "t0ken-shop") {
		t.Errorf("the refused delivery: %+v", refused)
	}
	if failed.Name != "webhook orders/writes" || !failed.Error || failed.Message == "" {
		t.Errorf("the failed delivery: %+v", failed)
	}
	if len(got) != 4 {
		t.Errorf("delivery spans by status: %v", got)
	}
}

// A webhook's handler phase, as a producer's, spans its commit: the
// delivery's transaction (the one producer writer, the delivery's record)
// runs before the phase's span ends, as it did when delivery was the
// engine's (issue 41 moved it to intake without changing what a trace
// shows).
func TestWebhookPhaseSpansItsCommit(t *testing.T) {
	t.Parallel()
	col := testotlp.New(http.StatusOK)
	t.Cleanup(col.Close)
	var mu sync.Mutex
	var committing time.Time
	e := newEnvAt(t, testPolicy+fmt.Sprintf("\n[otel]\nendpoint = %q\n", col.URL), func(step string) {
		if step == engine.CrashInsideDelivery {
			mu.Lock()
			committing = time.Now()
			mu.Unlock()
		}
	})
	setUpWebhooks(t, e)
	if d, err := e.k.Webhooks.Deliver(e.ctx(), shopHook("d-1", "1", "t0ken-shop")); err != nil || d.Status != kt.DeliveryAccepted {
		t.Fatalf("delivery: %+v %v", d, err)
	}
	spans := flushed(e, col)
	deliveries := testotlp.Named(spans, "webhook orders/shop")
	if len(deliveries) != 1 {
		t.Fatalf("delivery spans: %v", names(spans))
	}
	phases := testotlp.Named(testotlp.Children(spans, deliveries[0]), "webhook")
	if len(phases) != 1 {
		t.Fatalf("phase spans under the delivery: %v", names(testotlp.Children(spans, deliveries[0])))
	}
	mu.Lock()
	defer mu.Unlock()
	if committing.IsZero() {
		t.Fatal("the delivery's commit never reached its crash point")
	}
	if phases[0].End.Before(committing) {
		t.Errorf("the webhook phase ended at %s, before its commit at %s: the phase no longer spans what the handler made being written", phases[0].End.Format(time.RFC3339Nano), committing.Format(time.RFC3339Nano))
	}
}
