package slackconn_test

import (
	"testing"

	"github.com/keep-run/keep/internal/connector/connectortest"
	"github.com/keep-run/keep/internal/fake/slackfake"
)

// slack.postMessage passes the connectors' shared suite against keep-fake slack.
func TestSuitePostMessage(t *testing.T) {
	connectortest.Exercise(t, func(t *testing.T) *connectortest.Target {
		e := setup(t)
		return &connectortest.Target{Registry: e.reg, Tool: "slack", Method: "postMessage", Secret: slackfake.Token,
			Args:    map[string]any{"channel": "C1", "text": "Order 7 shipped"},
			Changed: map[string]any{"channel": "C1", "text": "Order 7 shipped twice"},
			Applied: func(t *testing.T) int { return e.posted("C1") },
			Arm: func(t *testing.T, kind string, retryAfter int) {
				e.admin("/_admin/faults", map[string]any{"method": "slack.postMessage", "fault": kind, "retryAfter": retryAfter}, nil)
			}}
	})
}
