package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/schedule"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// producer runs a producer; hrow is the handler's row when the caller has
// just read it, nil to read it here.
func (x *runExec) producer(hrow *kt.Handler) (err error) {
	defer func() { x.finished(err) }()
	defer x.startPhase(string(phaseProducer)).end(x)
	x.phaseNote(string(x.run.Phase), "producer "+x.run.Handler+" started")
	if hrow, err = x.e.handlerRowOf(x.ctx, x.wf.Name, x.run.Handler, hrow); err != nil {
		return err
	}
	decl := x.prog.Decl.Producers[x.run.Handler]
	h := x.host(phaseProducer)
	h.allowPublish, h.inputByKey, h.knownInputs = set(decl.Publishes), map[string]string{}, map[string]bool{}
	out, err := x.invoke(h, hrow.State)
	if err == nil {
		err = checkSize("the producer's returned state", out.Value)
	}
	if err != nil {
		return x.fail(err)
	}
	for _, in := range h.inputs {
		x.noteInputs(in.ID)
	}
	sched, err := schedule.Parse(decl.Schedule)
	if err != nil {
		return x.fail(kt.Errorf(kt.ClassLogic, "producer %s: %v", x.run.Handler, err))
	}
	summary := fmt.Sprintf("%d inputs registered, %d events published", len(h.inputs), len(h.publishes))
	again := readsOn(h.more, hrow.State, out.Value)
	if again {
		summary += "; a read stopped with more to read and the state moved on, so the producer runs again at once"
	}
	before := *x.run
	return x.e.update(x.ctx, x.wf.Name, func(tx store.Tx) error {
		*x.run = before // a try of this commit that failed may have folded it
		quiet, err := x.commitProduced(tx, h)
		if err != nil {
			return err
		}
		return x.commitScheduled(tx, scheduledEnd{state: out.Value, sched: sched, summary: summary, again: again, quiet: quiet})
	})
}

// readsOn says whether a producer runs again at once rather than at its
// next scheduled time: a read of its run stopped at its bound while more
// matched (a first sync of a big mailbox, a burst larger than max), and
// the state it returned moved on (the cursor it passes to the next read).
// keep run and keep serve then read a backlog at the same pace, page
// after page; a producer whose state stays the same (it reads from the
// start each time) waits for its schedule, so it never loops.
func readsOn(more bool, before, after json.RawMessage) bool {
	return more && after != nil && !bytes.Equal(before, after)
}

// commitProduced writes what a producer registered and published, inside
// its commit (transition.WriteProduced). quiet says the run found nothing new: it
// registered no new input and changed none, and every event it published
// is stored as it was (kt.PublishChanges).
func (x *runExec) commitProduced(tx store.Tx, h *host) (quiet bool, err error) {
	now := x.e.NowMs()
	evs, err := transition.WriteProduced(tx, transition.Produced{Workflow: x.wf.Name, Version: x.run.Version, Consumers: x.prog.Decl.ConsumerOf(), CreatedBy: x.run.ID,
		Inputs: h.inputs, Publishes: h.publishes, Now: now})
	if err != nil {
		return false, err
	}
	quiet = len(h.inputs) == 0
	for _, ev := range evs {
		// EventPublish leaves an event it did not write as stored: its
		// time is not this commit's (in the same millisecond, the poll
		// is taken for one that found something: a row of its own).
		quiet = quiet && ev.UpdatedAt != now
	}
	return quiet, nil
}

// scheduledEnd is what a producer or task run computed, which its commit
// writes (commitScheduled).
type scheduledEnd struct {
	state   json.RawMessage // the state the run returned
	sched   schedule.Schedule
	summary string // the run's trace says what it did
	// again: a producer runs again at once (readsOn); quiet: it found
	// nothing new (commitProduced). A task's are both false.
	again, quiet bool
}

// commitScheduled ends a producer or task run inside its commit: the new
// state saved, the next due time set, the run committed. Coalescing: whatever
// came due while the run executed collapses into one next run.
func (x *runExec) commitScheduled(tx store.Tx, end scheduledEnd) error {
	summary := end.summary
	run, now := x.run, x.e.NowMs()
	hrow, err := tx.HandlerGet(x.wf.Name, run.Handler)
	if err != nil {
		return err
	}
	// A person's reset of the state while the run ran (ResetState: the
	// run is not stored before this commit, so the reset could not see
	// it) stands: the state this run computed from the old one is not
	// written back, and the reset's queue mark runs the handler again
	// from scratch. Only a reset changes a handler's state between its
	// runs' commits (one step of a workflow at a time).
	reset := x.rowRead != nil && hrow.UpdatedAt != x.rowRead.UpdatedAt && !bytes.Equal(hrow.State, x.rowRead.State)
	if end.state != nil && !reset {
		hrow.State = end.state
	}
	// A queue mark set while the run ran (a person's run-now, a reprocess
	// of a task item: "queued now"), or a deploy that made the handler due
	// now (SPEC §5), stands: the run read what it read before it, and the
	// mark asks for one more run now, not at the next scheduled time. The
	// mark that started the run is the row as the step read it (rowRead),
	// and the row's change tells them apart.
	queuedMeanwhile := false
	if r := x.rowRead; r != nil && hrow.UpdatedAt != r.UpdatedAt {
		madeDue := hrow.NextRunAt > 0 && hrow.NextRunAt != r.NextRunAt && hrow.NextRunAt <= now
		queuedMeanwhile = hrow.Queued || madeDue
	}
	hrow.Queued, hrow.NextRunAt = queuedMeanwhile || (end.again && !reset), end.sched.Next(x.e.now()).UnixMilli()
	transition.Touch(&hrow, now)
	into, err := x.quietRun(tx, &hrow, end.quiet)
	if err != nil {
		return err
	}
	if into != nil {
		summary += fmt.Sprintf("; nothing new: %d polls have found nothing new since %s", into.QuietPolls+1, time.UnixMilli(into.QuietSince).UTC().Format(time.RFC3339))
	}
	if err := tx.HandlerPut(hrow); err != nil {
		return err
	}
	if into != nil {
		return x.committedInto(tx, summary, *into)
	}
	return x.committed(tx, summary)
}

// quietRun decides where a producer run that is committing is stored
// (issue 44): a poll that found nothing new (quiet) is folded into the
// handler's run of such polls (Handler.QuietRun), which it returns; the
// first of them, and every run that found something, is a row of its
// own. hrow is the handler's row the commit writes: it names the run of
// quiet polls, or none after a run that found something. A run of quiet
// polls of another version, or one no longer stored, starts a new one;
// a run stored before its commit (a retry) is never folded.
func (x *runExec) quietRun(tx store.Tx, hrow *kt.Handler, quiet bool) (*kt.Run, error) {
	if x.run.HandlerType != kt.HandlerProducer || !quiet || !x.unstored {
		// A retry of a failed poll has a row already (written when the
		// retry was made): it is committed there, a run of its own.
		hrow.QuietRun = ""
		return nil, nil
	}
	if hrow.QuietRun != "" {
		r, err := tx.RunGet(hrow.QuietRun)
		switch {
		case err == nil && r.QuietPolls > 0 && r.Status == kt.StatusCommitted && r.Handler == x.run.Handler && r.Version == x.run.Version:
			return &r, nil
		case err != nil && !errors.Is(err, kt.ErrNotFound):
			return nil, err
		}
	}
	hrow.QuietRun, x.run.QuietPolls, x.run.QuietSince = x.run.ID, 1, x.run.CreatedAt
	return nil, nil
}

// committedInto commits a quiet poll into the run of such polls into:
// that row counts one more, and holds this poll's trace and times.
func (x *runExec) committedInto(tx store.Tx, summary string, into kt.Run) error {
	if err := advance(x.run, kt.PhaseCommitted); err != nil {
		return err
	}
	now := x.e.NowMs()
	x.tr.add(kt.TraceEntry{At: now, Kind: "phase", Phase: "committed", Text: summary})
	r := *x.run
	r.ID, r.Rev, r.QuietPolls, r.QuietSince = into.ID, into.Rev, into.QuietPolls+1, into.QuietSince
	r.Status, r.Trace, r.UpdatedAt, r.FinishedAt, r.ErrorClass, r.ErrorMessage = kt.StatusCommitted, x.tr.json(), now, now, "", ""
	if err := tx.RunSetIfRev(r); err != nil {
		return err
	}
	r.Rev++
	*x.run = r
	return nil
}

// committed marks the run committed, inside its commit transaction.
func (x *runExec) committed(tx store.Tx, summary string) error {
	if err := advance(x.run, kt.PhaseCommitted); err != nil {
		return err
	}
	now := x.e.NowMs()
	x.tr.add(kt.TraceEntry{At: now, Kind: "phase", Phase: "committed", Text: summary})
	x.run.Status, x.run.Trace, x.run.UpdatedAt, x.run.FinishedAt, x.run.ErrorClass, x.run.ErrorMessage = kt.StatusCommitted, x.tr.json(), now, now, "", ""
	if asked := x.run.Action; asked != "" {
		// A person's decision came in while this step was under way
		// (takeDecision), and the step found the write applied: proof
		// wins, the run completes, and the decision log says so.
		x.run.Action = ""
		if err := transition.LogDecision(transition.WithActor(x.ctx, "keep"), tx, kt.Decision{Workflow: x.run.Workflow, RunID: x.run.ID, Action: string(asked), At: now,
			Detail: fmt.Sprintf("not carried out: keep found the write applied before %s could be, so run %s completed (proof wins)", asked, x.run.ID)}); err != nil {
			return err
		}
	}
	return x.putRun(tx)
}

// insertPublishes writes a run's buffered publishes at commit (last write
// wins), with caused_by and attempt from cause, and marks the consumers of
// the topics dirty. It returns the handlers it marked.
func (x *runExec) insertPublishes(tx store.Tx, reqs []transition.Publish, cause func(transition.Publish) ([]string, int, error)) (map[string]bool, error) {
	_, dirty, err := transition.PublishAll(tx, transition.Produced{Workflow: x.wf.Name, Consumers: x.prog.Decl.ConsumerOf(), CreatedBy: x.run.ID, Publishes: reqs, Now: x.e.NowMs()}, cause)
	return dirty, err
}
