package engine_test

import (
	"testing"

	"github.com/keep-run/keep/internal/apitype"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
)

// reopenWithRow re-opens hookScript's consumed event and sets the ledger
// row its identity finds to status: the next consumer run finds that row
// at its in_flight commit (ledgerCall.unlooked).
func reopenWithRow(t *testing.T, e *env, wf string, status kt.MutationStatus) {
	t.Helper()
	must(t, e.k.Store.Update(e.ctx(), func(tx store.Tx) error {
		ms, err := tx.MutationList(wf)
		if err != nil || len(ms) != 1 {
			t.Fatalf("mutations %d %v", len(ms), err)
		}
		m := ms[0]
		if m.Status != status {
			m.Status = status
			if status == kt.MutationFailed {
				m.ErrorClass, m.ErrorMessage = kt.ClassTransient, "test: failed"
			}
			if err := tx.MutationPut(m); err != nil {
				return err
			}
		}
		ev, err := tx.EventGet(wf, "job", "a")
		if err != nil {
			return err
		}
		ev.Status, ev.ReservedBy = kt.EventPending, ""
		if err := tx.EventUpdate(ev); err != nil {
			return err
		}
		h, err := tx.HandlerGet(wf, "c")
		if err != nil {
			return err
		}
		h.Dirty = true
		return tx.HandlerPut(h)
	}))
}

// newRunDetail is the detail of the one consumer run not in before.
func newRunDetail(t *testing.T, e *env, wf string, before map[string]bool) apitype.RunDetail {
	t.Helper()
	var ids []string
	for _, r := range e.runs(wf) {
		if r.Handler == "c" && !before[r.ID] {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("new consumer runs %v, want 1: %+v", ids, e.runs(wf))
	}
	d, err := report.ShowRun(e.ctx(), e.k.Store, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func runIDs(e *env, wf string) map[string]bool {
	m := map[string]bool{}
	for _, r := range e.runs(wf) {
		m[r.ID] = true
	}
	return m
}

// A row found at the in_flight commit in each ledger status leads where a
// row found before it did: failed → sent again (2 writes); in_flight or
// needs_reconcile with a probe that finds it → not sent again (1 write),
// committed; indeterminate → blocked for a person, not sent again.
func TestARowFoundAtTheInFlightCommitLeadsWhereItsStatusSays(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status  kt.MutationStatus
		probe   bool
		writes  int
		blocked bool
	}{
		{kt.MutationFailed, false, 2, false},
		{kt.MutationFailed, true, 2, false},
		{kt.MutationInFlight, true, 1, false},
		{kt.MutationNeedsReconcile, true, 1, false},
		{kt.MutationIndeterminate, true, 1, true},
		{kt.MutationIndeterminate, false, 1, true},
		{kt.MutationInFlight, false, 1, true},
	}
	for _, c := range cases {
		name := string(c.status)
		if c.probe {
			name += "/probe"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			opts := ""
			if c.probe {
				opts = withProbe
			}
			wf := e.deploy(hookScript("", opts))
			e.settle()
			e.noOpenRun(wf)
			before := runIDs(e, wf)
			reopenWithRow(t, e, wf, c.status)
			e.settle()
			if n := len(e.sink.Writes()); n != c.writes {
				t.Fatalf("writes at the sink %d, want %d", n, c.writes)
			}
			d := newRunDetail(t, e, wf, before)
			for _, l := range d.Trace {
				if l.Outcome == "in_flight" && c.writes == 1 {
					t.Fatalf("trace says in_flight though nothing was sent: %+v", d.Trace)
				}
			}
			if c.blocked {
				r := e.open(wf)
				if r.ErrorMessage == "" {
					t.Fatalf("blocked run with no explanation: %+v", r)
				}
				t.Logf("blocked: %s %s: %s", r.Status, r.Phase, r.ErrorMessage)
				return
			}
			e.noOpenRun(wf)
			if d.Run.Status != string(kt.StatusCommitted) {
				t.Fatalf("run %s (%s), want committed; trace %+v", d.Run.Status, d.Run.Error, d.Trace)
			}
			m := e.mutation(wf)
			if m.Status != kt.MutationApplied || m.RunID != d.Run.ID {
				t.Fatalf("mutation %s run %s, want applied by %s", m.Status, m.RunID, d.Run.ID)
			}
			if in := e.inputs(wf); len(in) != 1 || in[0].Status != kt.ItemDone {
				t.Fatalf("inputs %+v", in)
			}
		})
	}
}
