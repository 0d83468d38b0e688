package files_test

import (
	"os"
	"testing"

	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/connectortest"
	"github.com/keep-run/keep/internal/connector/files"
	"github.com/keep-run/keep/internal/fake/fault"
)

// local is why the network's fault kinds cannot happen to a local file.
var local = map[string]string{
	fault.Status429:         "a local folder answers no HTTP status",
	fault.Status500:         "a local folder answers no HTTP status",
	fault.Status500After:    "a local folder answers no HTTP status",
	fault.Status503:         "a local folder answers no HTTP status",
	fault.Status401:         "a local folder answers no HTTP status",
	fault.Status403:         "a local folder answers no HTTP status",
	fault.Timeout:           "a local write has no connection to wait on",
	fault.TimeoutAfterApply: "a local write has no connection to wait on",
	fault.Drop:              "a local write has no connection to drop",
	fault.DropAfterApply:    "a local write has no connection to drop",
}

// files.write passes the connectors' shared suite against a real folder.
func TestSuiteWrite(t *testing.T) {
	connectortest.Exercise(t, func(t *testing.T) *connectortest.Target {
		root := t.TempDir()
		return &connectortest.Target{Registry: connector.NewRegistry(files.New(root)), Tool: "files", Method: "write",
			Args:              map[string]any{"path": "out/order-7.txt", "content": "Order 7 shipped"},
			Changed:           map[string]any{"path": "out/order-7.txt", "content": "Order 7 shipped twice"},
			NotApplicable:     local,
			NoCredential:      "a local folder needs none",
			SameArgsSameWrite: "the file holding this content is the write, whichever attempt made it",
			Applied: func(t *testing.T) int {
				b, err := os.ReadFile(root + "/out/order-7.txt")
				if os.IsNotExist(err) {
					return 0
				}
				if err != nil {
					t.Fatal(err)
				}
				if string(b) != "Order 7 shipped" {
					t.Fatalf("the file holds %q", b)
				}
				return 1
			},
			Arm: func(t *testing.T, kind string, _ int) { t.Fatalf("no fault %q is injected into a folder", kind) }}
	})
}
