package engine_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/control"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
)

// readingHook is hookScript whose prepare reads the sink (GET /read) after
// its peek: a test acts there, between prepare's peek and the run's first
// commit.
func readingHook() string {
	return strings.Replace(hookScript("", ""), `if (!e) return { reservations: [] }`,
		`if (!e) return { reservations: [] }
      await ctx.http.request({ method: "GET", url: "%SINK%/read" })`, 1)
}

// A person's Reprocess of an input taken while a consumer's prepare holds
// its event (after the peek, before the run's first commit) starts a new
// attempt, whose write has a new identity and really runs (ch 12 §12.5:
// "the new attempt's mutations have new identities, so they really run").
// The event's earlier attempt had its write applied already (the event
// re-opened with its own content, as in
// TestAConsumerWriteFoundAppliedAtItsInFlightCommitIsNotSentAgain).
//
// An attack found the run reserving the event as attempt 2 but keying its
// write by the copy prepare read (attempt 1): it found attempt 1's applied
// row and replayed it, the new attempt's write never sent, the input done
// (since prepare's selection was checked against the copies peek read,
// 59f9a32; during mutate before that). The reserving write now refuses an
// event changed since the run's copy was read: the run prepares again.
func TestAReprocessWhilePrepareHoldsTheEventSendsTheNewAttemptsWrite(t *testing.T) {
	t.Parallel()
	reprocessWhileHeld(t, readingHook())
}

// The same with the Reprocess taken while mutate runs (after prepare's
// selection was checked, before the in_flight commit).
func TestAReprocessWhileMutateHoldsTheEventSendsTheNewAttemptsWrite(t *testing.T) {
	t.Parallel()
	reprocessWhileHeld(t, strings.Replace(hookScript("", ""), `async mutate(ctx, p) {`,
		`async mutate(ctx, p) {
      await ctx.http.request({ method: "GET", url: "%SINK%/read", kind: "byId" })`, 1))
}

func reprocessWhileHeld(t *testing.T, src string) {
	e := newEnv(t)
	var reads atomic.Int32
	var once sync.Once
	var inputID atomic.Value
	done := make(chan string, 1)
	e.sink.OnRead = func(path string) {
		// The second run's prepare has peeked the event (attempt 1) and
		// waits on this read: a person reprocesses its input now.
		if path != "/read" || reads.Add(1) != 2 {
			return
		}
		once.Do(func() {
			msg, err := reprocessRef(e.ctx(), e.k.Store, control.ItemRef{Workflow: "hook", Ref: inputID.Load().(string)}, time.Now())
			if err != nil {
				msg = "error: " + err.Error()
			}
			done <- msg
		})
	}
	wf := e.deploy(src)
	e.settle()
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes %d after the first run, want 1", n)
	}
	ins := e.inputs(wf)
	if len(ins) != 1 {
		t.Fatalf("inputs %+v", ins)
	}
	inputID.Store(ins[0].ID)
	// The consumed event re-opened with its own content and attempt.
	reopenWithRow(t, e, wf, kt.MutationApplied)
	e.settle()
	var msg string
	select {
	case msg = <-done:
	default:
		t.Fatal("the second prepare never read: the test did not reprocess")
	}
	if !strings.Contains(msg, "attempt 2") {
		t.Fatalf("reprocess: %q", msg)
	}
	e.noOpenRun(wf)
	ins = e.inputs(wf)
	evs := e.events(wf, "job")
	var rows []kt.Mutation
	must(t, e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		var err error
		rows, err = tx.MutationList(wf)
		return err
	}))
	var trace []string
	for _, r := range e.runs(wf) {
		d, err := report.ShowRun(e.ctx(), e.k.Store, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range d.Trace {
			if l.Kind == "mutation" {
				trace = append(trace, r.ID+": "+l.Outcome)
			}
		}
	}
	ws := e.sink.Writes()
	t.Logf("reprocess: %q; input %s attempt %d; event %s attempt %d; ledger rows %d; mutation trace %q", msg, ins[0].Status, ins[0].Attempt, evs[0].Status, evs[0].Attempt, len(rows), trace)
	if len(ws) != 2 || ws[0].Key == ws[1].Key {
		t.Fatalf("writes at the sink: %d, want 2 (attempt 2's write under a new key): the input reads %s at attempt %d but its new attempt's write was never sent",
			len(ws), ins[0].Status, ins[0].Attempt)
	}
}
