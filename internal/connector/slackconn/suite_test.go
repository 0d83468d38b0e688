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
			Arm:     e.arm("slack.postMessage")}
	})
}

// slack.addReaction passes the shared suite against keep-fake slack, on a
// person's message: every argument is identity, and the bot's reaction is
// the write whichever key added it.
func TestSuiteAddReaction(t *testing.T) {
	connectortest.Exercise(t, func(t *testing.T) *connectortest.Target {
		e := setup(t)
		var msg struct{ TS string }
		e.admin("/_admin/messages", map[string]any{"channel": "C1", "user": "UPERSON", "text": "Order 7 shipped"}, &msg)
		return &connectortest.Target{Registry: e.reg, Tool: "slack", Method: "addReaction", Secret: slackfake.Token,
			Args:              map[string]any{"channel": "C1", "ts": msg.TS, "name": "white_check_mark"},
			SameArgsSameWrite: "a reaction is the bot's on the message, once: Slack answers already_reacted to a second one",
			Applied: func(t *testing.T) int {
				var writes map[string]int
				e.admin("/_admin/writes", nil, &writes)
				return writes["slack.addReaction"]
			},
			Arm: e.arm("slack.addReaction")}
	})
}

// arm arms a fault of package fault on method's next call.
func (e *env) arm(method string) func(t *testing.T, kind string, retryAfter int) {
	return func(t *testing.T, kind string, retryAfter int) {
		e.admin("/_admin/faults", map[string]any{"method": method, "fault": kind, "retryAfter": retryAfter}, nil)
	}
}
