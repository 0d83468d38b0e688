package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/control"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// heldStore holds back the writes made with a context heldWrite marks
// (not the judging's read, made NoSync):
// each such Update tells arrived and waits for release before it begins
// (before the writers' lock), so a test acts between a deploy's judging
// and its transaction with no timing.
type heldStore struct {
	store.Store
	arrived, release chan struct{}
}

type heldWriteKey struct{}

func heldWrite(ctx context.Context) context.Context {
	return context.WithValue(ctx, heldWriteKey{}, true)
}

func (h *heldStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	// The judging reads the done runs in a transaction that writes
	// nothing (NoSync, under the writers' lock): only the deploy's
	// transaction is held.
	if ctx.Value(heldWriteKey{}) != nil && !store.IsNoSync(ctx) {
		h.arrived <- struct{}{}
		<-h.release
	}
	return h.Store.Update(ctx, fn)
}

func newHeldEnv(t *testing.T) (*env, *heldStore) {
	t.Helper()
	h := &heldStore{arrived: make(chan struct{}), release: make(chan struct{})}
	e := newEnvOver(t, testPolicy, nil, "", func(st store.Store) store.Store {
		h.Store = st
		return h
	})
	return e, h
}

// heldDeploy deploys src as a minor version of wf with its transaction
// held (heldStore); each time it reaches its transaction, meanwhile runs
// (the other deploy, the work done under it) before the transaction may
// begin. It returns the deploy's answer and how often it reached its
// transaction.
func heldDeploy(e *env, h *heldStore, wf, src string, meanwhile func(n int)) (kt.DeployResult, error, int) {
	type answer struct {
		res kt.DeployResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := control.DeployAndGrant(heldWrite(e.ctx()), e.k.Engine, "wf.js", src, control.DeployOptions{Name: wf, Kind: kt.DeployMinor})
		done <- answer{res, err}
	}()
	for n := 1; ; n++ {
		select {
		case <-h.arrived:
			meanwhile(n)
			h.release <- struct{}{}
		case a := <-done:
			return a.res, a.err, n - 1
		}
	}
}

// versionCount is how many versions of wf are stored.
func (e *env) versionCount(wf string) int {
	e.t.Helper()
	var n int
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		vs, err := tx.VersionList(wf)
		n = len(vs)
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// TestAMinorDeployOvertakenIsJudgedAgainstTheActiveVersion: a minor
// deploy judged against 1.0 (no done work: nothing of its ids to keep)
// reaches its transaction after another deploy made 1.1 active and 1.1
// did work whose item id the first one changes (the key's format kept, so
// the check inside the transaction does not see it). The deploy is judged
// again against 1.1 and refused as a repair that changes done work's ids;
// nothing is stored. On the old code it stored 1.2.
func TestAMinorDeployOvertakenIsJudgedAgainstTheActiveVersion(t *testing.T) {
	t.Parallel()
	heldIDChange(t, "1.1", func(e *env, src string) {
		e.redeploy(src+"\n// another person's repair", kt.DeployMinor)
	})
}

// heldIDChange deploys the items workflow at 1.0 with nothing done, then
// a minor version that changes item ids (the key's format kept) held
// before its transaction; at its first arrival, before (its own act on
// the workflow) runs and then the active version finishes item email:a.
// The deploy must be refused as a repair naming email:a, leaving active
// the version want, nothing stored.
func heldIDChange(t *testing.T, want string, before func(e *env, src string)) {
	e, h := newHeldEnv(t)
	src := itemScript("", `if (ctx.item.isDone) return`)
	wf := e.deploy(src)
	changed := strings.Replace(src, `"email:" + id`, `"email:" + id + "-2"`, 1)
	_, err, reached := heldDeploy(e, h, wf, changed, func(n int) {
		if n > 1 {
			return
		}
		before(e, src)
		writeInbox(t, e, "a")
		e.settle()
		if it := e.inputs(wf); len(it) != 1 || it[0].Key != "email:a" || it[0].Status != "done" {
			t.Fatalf("the work done under %s meanwhile: %+v", want, it)
		}
	})
	t.Logf("the held deploy (transaction reached %d times): %v", reached, err)
	if err == nil || !strings.Contains(err.Error(), "keeps the ids of done work") || !strings.Contains(err.Error(), "email:a") {
		t.Errorf("a minor deploy judged with nothing done that changes the ids of the work %s did meanwhile: %v (transaction reached %d times), want the repair's refusal naming email:a", want, err, reached)
	}
	versions := map[string]int{"1.0": 1, "1.1": 2}[want]
	if n, a := e.versionCount(wf), e.activeVersion(wf); n != versions || a != want {
		t.Errorf("after the refused deploy: %d versions, %s active; want %d, %s", n, a, versions, want)
	}
}

// TestAMinorDeployOvertakenEachTimeIsRefused: a deploy overtaken by
// another deploy each time it reaches its transaction is judged again a
// bounded number of times, then refused as a conflict naming the version
// it was judged against and the active one, saying to deploy again;
// nothing of it is stored.
func TestAMinorDeployOvertakenEachTimeIsRefused(t *testing.T) {
	t.Parallel()
	e, h := newHeldEnv(t)
	src := itemScript("", `if (ctx.item.isDone) return`)
	wf := e.deploy(src)
	_, err, reached := heldDeploy(e, h, wf, src+"\n// the held repair", func(n int) {
		e.redeploy(src+"\n// repair "+strings.Repeat("i", n), kt.DeployMinor)
	})
	active := e.activeVersion(wf)
	t.Logf("the deploy overtaken each time (transaction reached %d times): %v", reached, err)
	var ae *kt.ActionError
	if !errors.As(err, &ae) || !errors.Is(err, kt.ErrConflict) || !strings.Contains(ae.Msg, active) || !strings.Contains(ae.Msg, "deploy again") {
		t.Fatalf("a deploy overtaken each time (transaction reached %d times): %v, want a conflict naming %s and saying to deploy again", reached, err, active)
	}
	if n := e.versionCount(wf); n != 1+reached {
		t.Errorf("%d versions after %d overtaking deploys and a refused one; want %d", n, reached, 1+reached)
	}
}

// TestAMinorDeployJudgesTheWorkDoneMeanwhile: a minor deploy that changes
// an item id (the key's format kept) is judged against 1.0 with nothing
// done and held before its transaction; meanwhile 1.0 itself finishes
// item email:a (no other version). The deploy judges the runs committed
// since its judging and is refused as a repair that changes done work's
// ids, naming email:a; nothing is stored. On the old code it stored 1.1,
// which would do email:a again as email:a-2.
func TestAMinorDeployJudgesTheWorkDoneMeanwhile(t *testing.T) {
	t.Parallel()
	heldIDChange(t, "1.0", func(*env, string) {})
}

// TestADeployWhoseJudgedWorkStaysIsJudgedOnce: a minor deploy judged on
// done work (item email:a, its run committed before the judging) reaches
// its transaction with no run committed since: it is stored at its first
// transaction, not judged again.
func TestADeployWhoseJudgedWorkStaysIsJudgedOnce(t *testing.T) {
	t.Parallel()
	e, h := newHeldEnv(t)
	src := itemScript("", `if (ctx.item.isDone) return`)
	wf := e.deploy(src)
	writeInbox(t, e, "a")
	e.settle()
	res, err, reached := heldDeploy(e, h, wf, src+"\n// a repair that keeps every id", func(int) {})
	if err != nil || reached != 1 || res.Version.Label() != "1.1" {
		t.Fatalf("a deploy with nothing committed between its judging and its transaction: %v, version %s, transaction reached %d times; want 1.1 stored at the first", err, res.Version.Label(), reached)
	}
}

// TestADeployOfABusyWorkflowIsStoredNamingWhatWasNotReplayed: runs of
// the judged version committed each time the deploy reaches its
// transaction (a workflow that keeps working: webhook deliveries without
// pause) are judged alone, a bounded number of times; then the deploy is
// stored, not refused — a busy workflow must be able to take a fix — and
// its warnings name the runs of the last judging that were not replayed.
// A refusal here left every deploy of a workflow under steady webhook
// traffic refused (ak3's deploy storm).
func TestADeployOfABusyWorkflowIsStoredNamingWhatWasNotReplayed(t *testing.T) {
	t.Parallel()
	e, h := newHeldEnv(t)
	src := itemScript("", `if (ctx.item.isDone) return`)
	wf := e.deploy(src)
	res, err, reached := heldDeploy(e, h, wf, src+"\n// a repair that keeps every id", func(n int) {
		writeInbox(t, e, strings.Repeat("a", n))
		if n > 1 { // the task is due at its first settle, asked to run after
			if _, err := runNow(e, wf); err != nil {
				t.Fatal(err)
			}
		}
		e.settle()
	})
	if err != nil {
		t.Fatalf("a deploy with work committed each time it reached its transaction (%d times): %v; want it stored", reached, err)
	}
	if reached < 10 || res.Version.Label() != "1.1" {
		t.Fatalf("stored %s after reaching its transaction %d times; want 1.1, at its 10th judging of the runs committed meanwhile", res.Version.Label(), reached)
	}
	warned := strings.Join(res.Warnings, "\n")
	if !strings.Contains(warned, "kept committing work while this deploy was judged") || !strings.Contains(warned, " run ") {
		t.Fatalf("warnings %q; want the runs committed during the last judging named as not replayed", warned)
	}
}
