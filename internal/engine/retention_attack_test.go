package engine_test

import (
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// TestAPruneLeavesTheReplayItsWrites (issue 44, attack): done work past
// the horizon is pruned under the default policy (the newest 200 done
// runs of a version kept whole), then a repair that changes what the done
// runs wrote is replayed, as the Maintainer does before proposing it. The
// ledger rows' params were pruned under runs kept whole: the replay of
// the version in place and of the repair both found "another identity"
// for every write, the same words, so the change canceled out and the
// replay said no difference. The params of a run kept whole are kept.
func TestAPruneLeavesTheReplayItsWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeInbox(t, e, "a", "b")
	wf := e.deploy(inboxScript)
	e.settle()
	time.Sleep(20 * time.Millisecond)
	if _, err := e.k.Engine.Prune(e.ctx(), kt.Retention{Horizon: time.Millisecond, KeepDoneRuns: 200, Batch: 10}, false); err != nil {
		t.Fatal(err)
	}
	var active int64
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		w, err := tx.WorkflowGet(wf)
		active = w.ActiveVersion
		return err
	}); err != nil {
		t.Fatal(err)
	}
	src := strings.ReplaceAll(inboxScript, "%SINK%", e.sink.URL)
	same, err := e.k.Engine.ReplayDone(e.ctx(), wf, active, src, "")
	if err != nil || len(same.Differences) != 0 {
		t.Fatalf("the version in place replayed on itself: %+v (%v), want no difference", same.Differences, err)
	}
	changed := strings.Replace(src, "json: p.data,", "json: { ...p.data, to: \"elsewhere\" },", 1)
	rep, err := e.k.Engine.ReplayDone(e.ctx(), wf, active, changed, "")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range rep.Differences {
		if strings.Contains(d.Would, "with another payload") {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("a repair changing both done writes, replayed after a prune: %d of %d differences say another payload, want 2: %+v", n, len(rep.Differences), rep.Differences)
	}
}

// TestAReplayCountsNoPrunedRun (issue 44, attack): with keep_done_runs =
// 0 every done run past the horizon loses its bodies; the replay read them
// anyway, a consumer run without its selection as one that "selected
// nothing", and counted each: a repair changing every done write was
// "replayed on the 3 done runs" with no difference (the Maintainer's
// "safe", activated unattended). A pruned run is not replayed, nor counted.
func TestAReplayCountsNoPrunedRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeInbox(t, e, "a", "b")
	wf := e.deploy(inboxScript)
	e.settle()
	time.Sleep(20 * time.Millisecond)
	if _, err := e.k.Engine.Prune(e.ctx(), kt.Retention{Horizon: time.Millisecond, KeepDoneRuns: 0, Batch: 10}, false); err != nil {
		t.Fatal(err)
	}
	var active int64
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		w, err := tx.WorkflowGet(wf)
		active = w.ActiveVersion
		return err
	}); err != nil {
		t.Fatal(err)
	}
	src := strings.ReplaceAll(inboxScript, "%SINK%", e.sink.URL)
	changed := strings.Replace(src, "json: p.data,", "json: { ...p.data, to: \"elsewhere\" },", 1)
	rep, err := e.k.Engine.ReplayDone(e.ctx(), wf, active, changed, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Runs != 0 || len(rep.Differences) != 0 {
		t.Fatalf("replayed after every done run was pruned: %d runs, %+v; want none replayed", rep.Runs, rep.Differences)
	}
	// New work after the prune is replayed, and its change seen.
	writeInbox(t, e, "c")
	if _, err := runNow(e, wf); err != nil {
		t.Fatal(err)
	}
	e.settle()
	rep, err = e.k.Engine.ReplayDone(e.ctx(), wf, active, changed, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Runs != 2 || len(rep.Differences) != 1 || !strings.Contains(rep.Differences[0].Would, "with another payload") {
		t.Fatalf("replayed after new work: %d runs, %+v; want 2 (the poll, c's write), one write with another payload", rep.Runs, rep.Differences)
	}
}
