package google_test

import (
	"context"
	"testing"

	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/connectortest"
	"github.com/keep-run/keep/internal/connector/google"
)

// suiteCase is one of Google's writes as the suite runs it: seed makes
// what the write changes (a message to label, a row, an event) and returns
// its arguments and a changed payload for it.
type suiteCase struct {
	tool, method string
	seed         func(e *env) (args, changed map[string]any)
	// sameArgs, for a write that sets a state, says why the same
	// arguments under another key are the same write.
	sameArgs string
}

var suiteCases = []suiteCase{
	{tool: "sheets", method: "appendRow", seed: func(*env) (map[string]any, map[string]any) {
		return map[string]any{"spreadsheetId": "s", "values": []any{"x", 2.5}}, map[string]any{"spreadsheetId": "s", "values": []any{"x", 3.5}}
	}},
	{tool: "gmail", method: "send", seed: func(*env) (map[string]any, map[string]any) {
		return map[string]any{"to": "bob@example.com", "subject": "Invoice 7", "text": "attached"},
			map[string]any{"to": "bob@example.com", "subject": "Invoice 7", "text": "attached again"}
	}},
	{tool: "calendar", method: "createEvent", seed: func(*env) (map[string]any, map[string]any) {
		return map[string]any{"summary": "Review", "start": "2026-12-01T10:00:00Z", "end": "2026-12-01T11:00:00Z"},
			map[string]any{"summary": "Review", "start": "2026-12-01T10:00:00Z", "end": "2026-12-01T12:00:00Z"}
	}},
	{tool: "sheets", method: "updateRow", sameArgs: "an update sets the row's cells: a row holding the values is the update, whichever key wrote them",
		seed: func(e *env) (map[string]any, map[string]any) {
			var row struct{ Row int }
			e.admin("POST", "/_admin/sheets/s/rows", map[string]any{"values": []string{"Order 7", "open"}}, &row)
			return map[string]any{"spreadsheetId": "s", "rowId": row.Row, "values": []any{"Order 7", "shipped"}},
				map[string]any{"spreadsheetId": "s", "rowId": row.Row, "values": []any{"Order 7", "returned"}}
		}},
	{tool: "gmail", method: "modifyLabels", sameArgs: "labels are a message's state: a message carrying them is the change, whichever key made it",
		seed: func(e *env) (map[string]any, map[string]any) {
			var msg struct{ ID string }
			e.admin("POST", "/_admin/gmail/messages", map[string]any{"from": "bob@example.com", "subject": "Invoice 7", "text": "attached"}, &msg)
			return map[string]any{"id": msg.ID, "add": []any{"Processed"}, "remove": []any{"UNREAD"}},
				map[string]any{"id": msg.ID, "add": []any{"Archived"}, "remove": []any{"UNREAD"}}
		}},
	{tool: "calendar", method: "updateEvent", sameArgs: "an update sets the event's fields: an event holding them is the update, whichever key wrote them",
		seed: func(e *env) (map[string]any, map[string]any) {
			r := e.do("calendar", "createEvent", map[string]any{"summary": "Review", "start": "2026-12-01T10:00:00Z", "end": "2026-12-01T11:00:00Z"}, "keep-seed")
			if r.Outcome != connector.OutcomeApplied {
				e.t.Fatalf("creating the event to update: %v %+v", r.Outcome, r.Err)
			}
			id, _ := r.Value.(map[string]any)["id"].(string)
			return map[string]any{"eventId": id, "summary": "Review (moved)", "start": "2026-12-01T14:00:00Z", "end": "2026-12-01T15:00:00Z"},
				map[string]any{"eventId": id, "summary": "Review (moved)", "start": "2026-12-01T14:00:00Z", "end": "2026-12-01T16:00:00Z"}
		}},
}

// Google's writes pass the connectors' shared suite against keep-fake
// google: a 401 there is an expired access token, refreshed once.
func TestSuite(t *testing.T) {
	for _, c := range suiteCases {
		t.Run(c.tool+"."+c.method, func(t *testing.T) {
			connectortest.Exercise(t, func(t *testing.T) *connectortest.Target {
				e := setup(t)
				_, tok, err := e.accts.Get(context.Background(), google.Provider)
				if err != nil {
					t.Fatal(err)
				}
				name := c.tool + "." + c.method
				args, changed := c.seed(e)
				return &connectortest.Target{Registry: e.reg, Tool: c.tool, Method: c.method, Args: args, Changed: changed,
					Refreshes401: true, Secret: tok.AccessToken, SameArgsSameWrite: c.sameArgs,
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
