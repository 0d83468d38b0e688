package engine_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testsink"
)

// TestTheDryRunReplaysWhatTheRetryRuns: a write refused with 429 until keep
// gives up leaves the run paused:transient in mutating, its event pinned
// and its ledger row failed (the write did not happen). A person's Try
// again resumes in mutating on the same PrepareResult: prepare does not
// run again. The Maintainer's dry run of the same run must replay the same
// step ("mutate"); before issue 41 it said "prepare", a phase the retry
// never runs.
func TestTheDryRunReplaysWhatTheRetryRuns(t *testing.T) {
	t.Parallel()
	var prepared atomic.Int64
	e := newEnvAt(t, testPolicy, func(step string) {
		if step == engine.CrashAfterPrepared {
			prepared.Add(1)
		}
	})
	e.sink.Queue(testsink.Status(429), testsink.Status(429), testsink.Status(429))
	src := hookScript("", "")
	wf := e.deploy(src)
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusTransient || r.Phase != kt.PhaseMutating {
		t.Fatalf("run %s in %s; want paused:transient in mutating", r.Status, r.Phase)
	}
	res, err := e.k.Engine.DryRun(e.ctx(), wf, r.ID, strings.ReplaceAll(src, "%SINK%", e.sink.URL))
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	before := prepared.Load()
	e.resolve(r.ID, kt.ResolveTryAgain)
	e.settle()
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink %d, want 1", n)
	}
	ranPrepare := prepared.Load() > before
	if ranPrepare || res.Replayed != "mutate" {
		t.Fatalf("the real retry ran prepare again: %v; the dry run replayed %q (want mutate, the write %q), and the two must agree", ranPrepare, res.Replayed, res.Write)
	}
	if res.Write != "http.request" || res.Identity == "" {
		t.Fatalf("the dry run's write %q identity %q; want the captured http.request", res.Write, res.Identity)
	}
}
