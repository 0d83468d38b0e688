package webhooks

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// Issue 41 (ak1's finding): the listener's rule is that a sender learns
// nothing it did not send. An unsigned post to a name the workflow does
// not declare was answered with the names it does declare, and one to a
// webhook whose secret is not set with the secret's name. Both are now
// answered with what happened and the record to quote; the reason, in
// full, is the record's, which the owner sees in keep webhooks.
func TestAnAnonymousSenderLearnsNeitherTheDeclaredWebhooksNorTheSecret(t *testing.T) {
	k := heldSetup(t) // declares webhook gh, verified with GITHUB_SECRET, which is not set
	k.serve()
	body := []byte(`{"id": "anon"}`)
	cases := []struct {
		name, heldFor, reason string
	}{
		{"nosuch", "deploy:nosuch", `declares no webhook "nosuch" (its webhooks: gh)`},
		{"gh", "secret:GITHUB_SECRET", "keep secret set GITHUB_SECRET"},
	}
	gh := regexp.MustCompile(`\bgh\b`)
	for _, c := range cases {
		a := k.post("/hooks/held/"+c.name, body, map[string]string{"X-GitHub-Delivery": "d-anon-" + c.name})
		k.expect(a, http.StatusAccepted, `"status":"held"`)
		if c.name != "gh" && gh.MatchString(a.body) {
			t.Errorf("a post to %s was answered with the webhooks the workflow declares: %s", c.name, a.body)
		}
		if strings.Contains(a.body, "GITHUB_SECRET") {
			t.Errorf("a post to %s was answered with the name of the secret: %s", c.name, a.body)
		}
		var r struct {
			Record  int64
			Message string
		}
		if err := json.Unmarshal([]byte(a.body), &r); err != nil || r.Record == 0 || !strings.Contains(r.Message, "keep webhooks held") {
			t.Errorf("a post to %s was not answered with the record its owner finds the reason under (%v): %s", c.name, err, a.body)
			continue
		}
		// The owner sees the whole reason under that record.
		found := false
		for _, h := range k.held().Held {
			if h.Record == r.Record {
				found = true
				if h.HeldFor != c.heldFor || !strings.Contains(h.Reason, c.reason) {
					t.Errorf("record %d waits for %q (%q), want %q with %q", h.Record, h.HeldFor, h.Reason, c.heldFor, c.reason)
				}
			}
		}
		if !found {
			t.Errorf("keep webhooks does not list the held record %d the sender was given", r.Record)
		}
	}
}
