package builtin_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/connector/builtin"
	"github.com/keep-run/keep/internal/connector/connectortest"
)

// Every write method of keep's connectors passes the shared suite
// (connectortest.Runs names the test that runs it), or is listed, with
// what is missing, as not run yet.
func TestEveryWriteRunsTheSharedSuite(t *testing.T) {
	writes := map[string]bool{"custom": true}
	for _, d := range builtin.All {
		if d.Name == "custom" {
			continue
		}
		var table any
		if d.Config.New != nil {
			table = d.Config.New()
		}
		cs, err := d.Build(table, &connector.Host{})
		if err != nil {
			t.Fatalf("%s: %v", d.Name, err)
		}
		for _, c := range cs {
			for name, m := range c.Methods {
				if m.Kind == connector.KindMutate || m.KindOf != nil {
					writes[c.Name+"."+name] = true
				}
			}
		}
	}
	for w := range writes {
		file, run := connectortest.Runs[w]
		why, gap := connectortest.NotRunYet[w]
		switch {
		case run && gap:
			t.Errorf("%s is both run (connectortest.Runs) and listed as not run yet", w)
		case gap:
			t.Logf("%s does not run the shared suite yet: %s", w, why)
		case !run:
			t.Errorf("%s writes but runs no connectortest.Exercise: add a suite_test.go to its package and name it in connectortest.Runs", w)
		default:
			b, err := os.ReadFile(filepath.Join("..", "..", "..", file))
			if err != nil || !strings.Contains(string(b), "connectortest.Exercise(") {
				t.Errorf("%s: connectortest.Runs names %s, which runs no connectortest.Exercise (%v)", w, file, err)
			} else if _, method, ok := strings.Cut(w, "."); ok && !strings.Contains(string(b), `"`+method+`"`) {
				t.Errorf("%s: connectortest.Runs names %s, which does not name the method %q", w, file, method)
			}
		}
	}
	for w := range connectortest.Runs {
		if !writes[w] {
			t.Errorf("connectortest.Runs names %s, which is no write method of builtin.All", w)
		}
	}
	for w := range connectortest.NotRunYet {
		if !writes[w] {
			t.Errorf("connectortest.NotRunYet names %s, which is no write method of builtin.All", w)
		}
	}
}
