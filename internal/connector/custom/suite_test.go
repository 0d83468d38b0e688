package custom_test

import (
	"testing"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/connectortest"
	"github.com/keep-run/keep/internal/connector/custom"
	khttp "github.com/keep-run/keep/internal/connector/http"
	"github.com/keep-run/keep/internal/netguard"
	"github.com/keep-run/keep/internal/testsink"
)

// suiteToken is the credential the declared header sends, opened from
// {secret:crm_token} as the daemon opens it.
const suiteToken = "ghp_CrmSuiteToken0123456789abcdefABCDEF01"

// A custom connector's write passes the connectors' shared suite against a
// real HTTP server (testsink), its credential a declared header.
func TestSuiteCreateTicket(t *testing.T) {
	connectortest.Exercise(t, func(t *testing.T) *connectortest.Target {
		sink := testsink.New()
		t.Cleanup(sink.Close)
		cfg, err := config.Parse("keep.toml", sink.AllowTOML()+`
[connectors.custom.crm]
base_url = "`+sink.URL+`"
headers = { Authorization = "Bearer {secret:crm_token}" }

[connectors.custom.crm.methods.createTicket]
kind = "write"
path = "/write/{customer}"
params = { customer = "who", subject = "what" }
required = ["customer", "subject"]
identity = ["customer"]
reconcile = { path = "/writes/{idempotencyKey}" }
`)
		if err != nil {
			t.Fatal(err)
		}
		reg := connector.NewRegistry(custom.New("crm", config.Get[custom.Config](cfg, "custom")["crm"], netguard.New(khttp.Allow(cfg))))
		return (&connectortest.Target{Registry: reg, Tool: "crm", Method: "createTicket",
			Args:    map[string]any{"customer": "ann", "subject": "Broken mug"},
			Changed: map[string]any{"customer": "ann", "subject": "Broken mug and plate"},
		}).OnSink(sink, "crm_token", suiteToken)
	})
}
