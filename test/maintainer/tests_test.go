package maintainer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/fake/llmfake"
)

// ordersTest is orders.js's test: an order without a customer is written
// with the payload want.
func ordersTest(want string) string {
	return `export default Keep.test({
  workflow: "./orders.js",
  cases: {
    "an order without a customer is written": {
      answers: { "files.read": [{ args: { path: "jobs.json" }, answer: { path: "jobs.json", content: JSON.stringify([{ id: "2" }]) } }] },
      expect: { writes: [{ tool: "http.request", payload: { json: ` + want + ` } }] },
    },
  },
});
`
}

// withTests deploys orders.js again with its test beside it (keep deploy
// records it with the version), then starts keep serve.
func withTests(t *testing.T, test string) *rig {
	r := prepare(t, "bob", "", func(src string) []llmfake.Reply {
		return []llmfake.Reply{{Content: answer(fixed(src)), Tokens: 500}}
	})
	if err := os.WriteFile(filepath.Join(r.dir, "orders.test.js"), []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := r.keep("deploy", "--grant", "orders.js"); code != 0 || !strings.Contains(out, "version 1.1") {
		t.Fatalf("deploy with the test beside: %d %s", code, out)
	}
	r.start()
	return r
}

// TestARepairThatFailsTheWorkflowsTestsIsHeld: the fix writes { id } for
// the order without a customer; the workflow's test says it must write
// { id, customer: "nobody" }: the repair is held naming the failing case,
// and nothing of it runs.
func TestARepairThatFailsTheWorkflowsTestsIsHeld(t *testing.T) {
	r := withTests(t, ordersTest(`{ id: "2", customer: "nobody" }`))
	r.waitFor("the repair to be held", func() bool { rs := r.repairs(); return len(rs) == 1 && rs[0].Status == "held" })
	why := r.repairs()[0].Reason
	for _, want := range []string{"it fails the workflow's tests (recorded with version 1.1)", `case "an order without a customer is written" fails: expect.writes[0]`, "payload.json is"} {
		if !strings.Contains(why, want) {
			t.Fatalf("held for %q; want it to say %q", why, want)
		}
	}
	if len(r.writes()) == 3 {
		t.Fatal("the held repair ran")
	}
}

// TestARepairThatPassesTheWorkflowsTestsIsActivated: the same fix, and a
// test it passes.
func TestARepairThatPassesTheWorkflowsTestsIsActivated(t *testing.T) {
	r := withTests(t, ordersTest(`{ id: "2" }`))
	r.waitFor("every order written", func() bool { return len(r.writes()) == 3 && r.idle() })
	rs := r.repairs()
	if len(rs) != 1 || rs[0].Status != "activated" {
		t.Fatalf("repairs %+v", rs)
	}
}
