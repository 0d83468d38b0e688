package engine_test

import (
	"os"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/testsink"
)

// Each workflow's runs run under the policy recorded at its deploy (issue
// 24 #5), not under the one of the keep that steps them: "first" deployed
// with transient_retries 2, "second" with 0, both stepped by a keep
// started with transient_retries 5 — each POST answered 503 is tried 3
// times and once, counted at each workflow's own sink.
func TestEachWorkflowRunsUnderItsRecordedPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // transient_retries = 2
	other := testsink.New()
	t.Cleanup(other.Close)
	config := func(retries string) {
		t.Helper()
		pol := strings.Replace(testPolicy, "transient_retries = 2", "transient_retries = "+retries, 1)
		allow := "[connectors.http]\nallow = [\"" + e.sink.Host() + "\", \"" + other.Host() + "\"]\n"
		if err := os.WriteFile(e.opts.ConfigFile, []byte(pol+"\n"+allow), 0o644); err != nil {
			t.Fatal(err)
		}
		e.restart()
	}
	named := func(name, sink string) string {
		src := strings.Replace(hookScript("", withProbe), `name: "hook"`, `name: "`+name+`"`, 1)
		return strings.ReplaceAll(src, "%SINK%", sink)
	}
	config("2")
	first := e.deploy(named("first", e.sink.URL))
	config("0")
	second := e.deploy(named("second", other.URL))
	config("5")
	for _, s := range []*testsink.Sink{e.sink, other} {
		for range 8 {
			s.Queue(testsink.Status503)
		}
	}
	e.settle()
	for _, c := range []struct {
		wf      string
		sink    *testsink.Sink
		retries int
	}{{first, e.sink, 2}, {second, other, 0}} {
		if n := c.sink.Requests(); n != c.retries+1 {
			t.Errorf("%s: POSTs at its sink %d, want %d (1 + its recorded transient_retries %d)", c.wf, n, c.retries+1, c.retries)
		}
		if n := len(c.sink.Writes()); n != 0 {
			t.Errorf("%s: %d writes applied, want none (every POST answered 503)", c.wf, n)
		}
		r := e.open(c.wf)
		if r.RetryCount != c.retries {
			t.Errorf("%s: blocked run %s after %d retries, want %d: %s", c.wf, r.Status, r.RetryCount, c.retries, r.ErrorMessage)
		}
	}
}

// A workflow deployed before keep recorded its policy runs under the
// policy of the keep that steps it; a recorded policy that does not decode
// stops the step with what to do, and nothing is sent.
func TestAWorkflowWithoutARecordedPolicyRunsUnderKeeps(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // transient_retries = 2
	wf := e.deploy(hookScript("", withProbe))
	setPolicy := func(rec string) {
		t.Helper()
		if err := e.k.Store.Update(e.ctx(), func(tx store.Tx) error {
			w, err := tx.WorkflowGet(wf)
			if err != nil {
				return err
			}
			w.Policy = rec
			return tx.WorkflowPut(w)
		}); err != nil {
			t.Fatal(err)
		}
	}
	setPolicy(`{"TransientRetries":`)
	_, err := e.k.Engine.Step(e.ctx(), wf)
	if err == nil || !strings.Contains(err.Error(), "the policy recorded for workflow hook (table workflows, row name=hook) does not decode") || !strings.Contains(err.Error(), "deploy it again") {
		t.Fatalf("step under a policy that does not decode: %v", err)
	}
	if n := e.sink.Requests(); n != 0 {
		t.Fatalf("%d requests sent under a policy that does not decode", n)
	}
	setPolicy("")
	for range 8 {
		e.sink.Queue(testsink.Status503)
	}
	e.settle()
	if n := e.sink.Requests(); n != 3 {
		t.Fatalf("POSTs %d, want 3 (1 + keep's transient_retries 2)", n)
	}
	if r := e.open(wf); r.RetryCount != 2 || r.Status == kt.StatusCommitted {
		t.Fatalf("run %s after %d retries, want blocked after 2", r.Status, r.RetryCount)
	}
}
