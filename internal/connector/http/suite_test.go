package http_test

import (
	"testing"

	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/connectortest"
	"github.com/keep-run/keep/internal/testsink"
)

// suiteToken is the credential the suite's requests send, opened from
// {secret:sink_token} as the daemon opens a script's secrets.
const suiteToken = "ghp_SuiteToken0123456789abcdefABCDEF0123"

// http.request (a POST with a probe) passes the connectors' shared suite
// against a real HTTP server (testsink).
func TestSuiteRequest(t *testing.T) {
	connectortest.Exercise(t, func(t *testing.T) *connectortest.Target {
		sink := testsink.New()
		t.Cleanup(sink.Close)
		req := func(text string) map[string]any {
			auth := map[string]any{"Authorization": "Bearer {secret:sink_token}"}
			return map[string]any{"method": "POST", "url": sink.URL + "/orders", "json": map[string]any{"text": text}, "headers": auth,
				"reconcile": map[string]any{"url": sink.URL + "/writes/{idempotencyKey}", "headers": auth}}
		}
		return (&connectortest.Target{Registry: connector.NewRegistry(allowing(sink)), Tool: "http", Method: "request",
			Args: req("Order 7 shipped"), Changed: req("Order 7 shipped twice"),
		}).OnSink(sink, "sink_token", suiteToken)
	})
}
