package http_test

import (
	"fmt"
	"testing"

	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/connectortest"
	"github.com/keep-run/keep/internal/fake/fault"
	"github.com/keep-run/keep/internal/testsink"
)

// suiteToken is the credential the suite's requests send, opened from
// {secret:sink_token} as the daemon opens a script's secrets.
const suiteToken = "ghp_SuiteToken0123456789abcdefABCDEF0123"

// sinkFaults are package fault's kinds as the sink injects them.
var sinkFaults = map[string]func(retryAfter int) testsink.Fault{
	fault.TimeoutAfterApply: func(int) testsink.Fault { return testsink.TimeoutAfter },
	fault.DropAfterApply:    func(int) testsink.Fault { return testsink.ResetAfter },
	fault.Status500After:    func(int) testsink.Fault { return testsink.Status500 },
	fault.Timeout:           func(int) testsink.Fault { return testsink.TimeoutBefore },
	fault.Drop:              func(int) testsink.Fault { return testsink.DropBefore },
	fault.Status429:         testsink.RetryAfter,
	fault.Status500:         func(int) testsink.Fault { return testsink.Status(500) },
	fault.Status503:         func(int) testsink.Fault { return testsink.Status503 },
	fault.Status401:         func(int) testsink.Fault { return testsink.Status(401) },
	fault.Status403:         func(int) testsink.Fault { return testsink.Status(403) },
}

// SinkTarget is a write of a connector built by build (allowed to reach
// the sink) to a fresh testsink, with a reconcile probe on the sink's
// /writes/{idempotencyKey}; args gets url, reconcile and the credential's
// header from req.
func SinkTarget(t *testing.T, build func(sink *testsink.Sink) *connector.Registry, tool, method string, req func(sink *testsink.Sink, text string) map[string]any) *connectortest.Target {
	sink := testsink.New()
	t.Cleanup(sink.Close)
	return &connectortest.Target{Registry: build(sink), Tool: tool, Method: method, Secret: suiteToken,
		Args:    req(sink, "Order 7 shipped"),
		Changed: req(sink, "Order 7 shipped twice"),
		Open: func(name string) (string, error) {
			if name != "sink_token" {
				return "", fmt.Errorf("no secret %q", name)
			}
			return suiteToken, nil
		},
		Applied: func(t *testing.T) int { return len(sink.Writes()) },
		Arm: func(t *testing.T, kind string, retryAfter int) {
			f, ok := sinkFaults[kind]
			if !ok {
				t.Fatalf("the sink cannot inject %q", kind)
			}
			sink.Queue(f(retryAfter))
		}}
}

// http.request (a POST with a probe) passes the connectors' shared suite
// against a real HTTP server (testsink).
func TestSuiteRequest(t *testing.T) {
	connectortest.Exercise(t, func(t *testing.T) *connectortest.Target {
		return SinkTarget(t, func(sink *testsink.Sink) *connector.Registry {
			return connector.NewRegistry(allowing(sink))
		}, "http", "request", func(sink *testsink.Sink, text string) map[string]any {
			return map[string]any{"method": "POST", "url": sink.URL + "/orders", "json": map[string]any{"text": text},
				"headers":   map[string]any{"Authorization": "Bearer {secret:sink_token}"},
				"reconcile": map[string]any{"url": sink.URL + "/writes/{idempotencyKey}", "headers": map[string]any{"Authorization": "Bearer {secret:sink_token}"}}}
		})
	})
}
