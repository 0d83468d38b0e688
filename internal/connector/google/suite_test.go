package google_test

import (
	"context"
	"testing"

	"github.com/keep-run/keep/internal/connector/connectortest"
	"github.com/keep-run/keep/internal/connector/google"
)

// Google's writes pass the connectors' shared suite against keep-fake
// google: a 401 there is an expired access token, refreshed once.
func TestSuite(t *testing.T) {
	for _, c := range []struct {
		tool, method  string
		args, changed map[string]any
	}{
		{"sheets", "appendRow", map[string]any{"spreadsheetId": "s", "values": []any{"x", 2.5}}, map[string]any{"spreadsheetId": "s", "values": []any{"x", 3.5}}},
		{"gmail", "send", map[string]any{"to": "bob@example.com", "subject": "Invoice 7", "text": "attached"}, map[string]any{"to": "bob@example.com", "subject": "Invoice 7", "text": "attached again"}},
		{"calendar", "createEvent", map[string]any{"summary": "Review", "start": "2026-12-01T10:00:00Z", "end": "2026-12-01T11:00:00Z"},
			map[string]any{"summary": "Review", "start": "2026-12-01T10:00:00Z", "end": "2026-12-01T12:00:00Z"}},
	} {
		t.Run(c.tool+"."+c.method, func(t *testing.T) {
			connectortest.Exercise(t, func(t *testing.T) *connectortest.Target {
				e := setup(t)
				_, tok, err := e.accts.Get(context.Background(), google.Provider)
				if err != nil {
					t.Fatal(err)
				}
				name := c.tool + "." + c.method
				return &connectortest.Target{Registry: e.reg, Tool: c.tool, Method: c.method, Args: c.args, Changed: c.changed,
					Refreshes401: true, Secret: tok.AccessToken,
					Applied: func(t *testing.T) int {
						var writes map[string]int
						e.admin("GET", "/_admin/writes", nil, &writes)
						return writes[name]
					},
					Arm: func(t *testing.T, kind string, retryAfter int) {
						e.admin("POST", "/_admin/faults", map[string]any{"method": name, "fault": kind, "retryAfter": retryAfter}, nil)
					}}
			})
		})
	}
}
