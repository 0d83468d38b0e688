package engine_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/account"
	"github.com/keep-run/keep/internal/daemon"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// prunedInbox runs inboxScript on two files, prunes everything finished
// (past a 1 ms horizon) keeping keepDone done runs of the version whole,
// and returns the workflow, its active version, its script and the script
// with every write's payload changed (a repair to replay).
func prunedInbox(t *testing.T, keepDone int) (e *env, wf string, active int64, src, changed string) {
	t.Helper()
	e = newEnv(t)
	writeInbox(t, e, "a", "b")
	wf = e.deploy(inboxScript)
	e.settle()
	time.Sleep(20 * time.Millisecond)
	if _, err := e.k.Engine.Prune(e.ctx(), kt.Retention{Horizon: time.Millisecond, KeepDoneRuns: keepDone, Batch: 10}, false); err != nil {
		t.Fatal(err)
	}
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		w, err := tx.WorkflowGet(wf)
		active = w.ActiveVersion
		return err
	}); err != nil {
		t.Fatal(err)
	}
	src = strings.ReplaceAll(inboxScript, "%SINK%", e.sink.URL)
	changed = strings.Replace(src, "json: p.data,", "json: { ...p.data, to: \"elsewhere\" },", 1)
	return e, wf, active, src, changed
}

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
	e, wf, active, src, changed := prunedInbox(t, 200)
	same, err := e.k.Engine.ReplayDone(e.ctx(), wf, active, src, "")
	if err != nil || len(same.Differences) != 0 {
		t.Fatalf("the version in place replayed on itself: %+v (%v), want no difference", same.Differences, err)
	}
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
	e, wf, active, _, changed := prunedInbox(t, 0)
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

// TestASecretsHostsFlippedToTheSinkSendNothing (issue 44, attack): two
// secrets scoped to a host one bit off the sink's; a bit flips back in
// the stored hosts (digest kept), so the secrets would now go to the
// sink. Nothing is sent (0 requests at the sink), the run is damaged
// storage, not a bug in the script, and the row is not changed.
func TestASecretsHostsFlippedToTheSinkSendNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	accts, err := daemon.Accounts(filepath.Join(e.dir, "data"), e.k.Store)
	if err != nil {
		t.Fatal(err)
	}
	host := e.sink.Host()
	narrow := flipByte(t, host, host[:len(host)-1])
	secrets := &account.Secrets{Store: e.k.Store, Box: accts.Box}
	for name, v := range map[string]string{"sig": "sig-value-0a1b2c", "tok": "tok-value-3d4e5f"} {
		if err := secrets.SetScoped(e.ctx(), name, v, []string{narrow}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.k.Close(); err != nil {
		t.Fatal(err)
	}
	q := rawStore(t, e)
	q(`UPDATE secrets SET hosts=replace(hosts, ?, ?)`, narrow, host).Close()
	e.restart()
	wf := e.deploy(secretScript)
	errs := settleDamaged(t, e)
	if n := e.sink.Requests(); n != 0 {
		t.Fatalf("%d requests at the sink with the secrets whose hosts were flipped to it, want 0 (step errors %v)", n, errs)
	}
	r := e.open(wf)
	if r.ErrorClass != kt.ClassDamaged || !strings.Contains(r.ErrorMessage, "damaged storage") || !strings.Contains(r.ErrorMessage, "keep secret rm") || strings.Contains(r.ErrorMessage, "bug in the script") {
		t.Fatalf("the run: %s %s: %s; want damaged storage saying keep secret rm", r.Status, r.ErrorClass, r.ErrorMessage)
	}
	rows := q(`SELECT count(*) FROM secrets WHERE hosts LIKE ?`, "%"+host+"%")
	var n int
	if !rows.Next() || rows.Scan(&n) != nil || n != 2 {
		t.Fatalf("the damaged rows were changed: %d still say %s", n, host)
	}
}

// TestAQuietPollFoldedIntoAPrunedRowIsKeptAndPrunedAgain (issue 44,
// attack): a streak's quiet row and the old event pruned (keep_done_runs
// 0), then the producer polls again and sees the same file. It was not
// quiet: the re-published event's payload differed from the pruned
// "null", so the poll made a row of its own and wrote the payload back
// into the event, marked pruned, where no prune would take it again
// (after every prune, once per producer). Now the publish leaves a pruned
// finished event as it is, the poll is quiet and folds into the streak's
// row, which carries that poll's trace and so is no longer marked pruned:
// the next prune takes it again.
func TestAQuietPollFoldedIntoAPrunedRowIsKeptAndPrunedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeInbox(t, e, "a")
	wf := e.deploy(inboxScript)
	e.settle()
	poll := func() {
		t.Helper()
		if n, err := runNow(e, wf); err != nil || n != 1 {
			t.Fatalf("run now: %d %v", n, err)
		}
		e.settle()
	}
	poll() // quiet: the row of the streak
	quiet := e.runs(wf)[0]
	if quiet.QuietPolls != 1 {
		t.Fatalf("the newest run after a quiet poll: %+v", quiet)
	}
	time.Sleep(20 * time.Millisecond)
	pol := kt.Retention{Horizon: time.Millisecond, KeepDoneRuns: 0, Batch: 10}
	if _, err := e.k.Engine.Prune(e.ctx(), pol, false); err != nil {
		t.Fatal(err)
	}
	poll() // quiet again: folded into the pruned row
	var r kt.Run
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		var err error
		r, err = tx.RunGet(quiet.ID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	q := rawStore(t, e)
	rows := q(`SELECT pruned_at FROM runs WHERE id=?`, quiet.ID)
	var prunedAt int64
	if !rows.Next() || rows.Scan(&prunedAt) != nil {
		t.Fatal("no row")
	}
	rows.Close()
	rows = q(`SELECT payload, pruned_at FROM events WHERE message_id='a'`)
	var payload string
	var evPruned int64
	if !rows.Next() || rows.Scan(&payload, &evPruned) != nil {
		t.Fatal("no event a")
	}
	rows.Close()
	if payload != "null" || evPruned == 0 {
		t.Fatalf("event a after a poll saw it again: payload %s, pruned_at %d; want it left pruned", payload, evPruned)
	}
	if r.QuietPolls != 2 || r.Trace == nil || prunedAt != 0 {
		t.Fatalf("the quiet row after a fold into it once pruned: %d polls, trace %d bytes, pruned_at %d; want 2, a trace, 0", r.QuietPolls, len(r.Trace), prunedAt)
	}
	time.Sleep(20 * time.Millisecond)
	rep, err := e.k.Engine.Prune(e.ctx(), pol, false)
	if err != nil || rep.Kinds[0].Rows != 1 {
		t.Fatalf("the next prune: %+v (%v), want the folded row's trace pruned again", rep.Kinds, err)
	}
}
