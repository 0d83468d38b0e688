package engine

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/config"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
)

// MaxErrorText bounds the error message kept on a run (and said on a
// span: a delivery's too, intake.Webhooks).
const MaxErrorText = 4000

// fail records a failed run by the taxonomy of SPEC §6 and applies the reset rules of §4.
func (x *runExec) fail(cause error) error { return x.failWith(cause, nil) }

// failWith is fail with more writes (with, nil for none) in the failure's
// one transaction: a state change is never split in two, so a crash cannot
// leave the run waiting behind a message its ledger row no longer bears out.
func (x *runExec) failWith(cause error, with func(tx store.Tx) error) error {
	e, run := x.e, x.run
	if errors.Is(cause, script.ErrStopping) || errors.Is(cause, store.ErrFenced) {
		// Not a failure of the run: keep is stopping, or another node took
		// the workflow over. The run stays active and is recovered like a
		// crashed one (by the next start, or by the new owner).
		if errors.Is(cause, script.ErrStopping) && x.outcome != nil {
			// A write's answer is held for the run's second commit: keep
			// knows it applied, so it records that before it stops (the run
			// stays active at mutated, and the restart runs next after it).
			// Dropped, the restart would find the write in_flight and ask a
			// person whether it happened — offering to send it again.
			if err := x.save(nil); err != nil {
				return errors.Join(cause, fmt.Errorf("record the applied write before stopping: %w", err))
			}
		}
		return cause
	}
	class := kt.ClassOf(cause)
	// The one way an error reaches the run, its card, the log and the page:
	// credentials masked, and no more than a person reads (a script once
	// threw a 20 MB message, stored twice and printed whole).
	msg := kt.Clip(redact.String(cause.Error()), MaxErrorText)
	now := e.NowMs()
	// run.Action stays: a person's decision that came in while this step
	// was under way is carried out after it, never cleared (issue 24).
	run.ErrorClass, run.ErrorMessage, run.UpdatedAt = class, msg, now
	run.NextAttemptAt = 0
	var wait *approvalWait
	if errors.As(cause, &wait) {
		class, run.ErrorClass = kt.ClassPermission, ""
	}
	x.setFailedStatus(cause, class, msg, now)
	release := run.HandlerType == kt.HandlerConsumer && releasesReservations(run, class)
	if release {
		x.reserve = nil // selected, never written: nothing to pin
	}
	x.tr.add(kt.TraceEntry{At: now, Kind: "error", Phase: string(run.Phase), Outcome: string(class), Text: msg})
	if run.ErrorClass != "" {
		x.phaseFailed(class, msg) // a wait for an approval is no failure
	}
	e.log.Info("run failed", "workflow", x.wf.Name, "run", run.ID, "handler", run.Handler, "phase", run.Phase, "status", run.Status, "error", msg)
	return x.save(func(tx store.Tx) error {
		if with != nil {
			if err := with(tx); err != nil {
				return err
			}
		}
		if release {
			if err := releaseReservations(tx, run.ID, now); err != nil {
				return err
			}
		}
		if run.Status != kt.StatusFailedInternal {
			return nil
		}
		// An internal error pauses the workflow: keep does not go on past
		// its own bug.
		w, err := tx.WorkflowGet(x.wf.Name)
		if err != nil {
			return err
		}
		reason := "internal error in run " + run.ID + ": " + msg
		if class == kt.ClassDamaged {
			reason = "run " + run.ID + " stopped on " + msg
		}
		w.Paused, w.PausedReason, w.UpdatedAt = true, reason, now
		return tx.WorkflowPut(w)
	})
}

// setFailedStatus gives a failed run the status of its class (SPEC §6),
// and a transient one the time of its retry.
func (x *runExec) setFailedStatus(cause error, class kt.ErrorClass, msg string, now int64) {
	switch class {
	case kt.ClassTransient:
		x.run.Status = kt.StatusTransient
		var ke *kt.Error
		var asked time.Duration
		if errors.As(cause, &ke) {
			asked = ke.RetryAfter
			x.tr.progressed = ke.Progressed
		}
		x.scheduleRetry(msg, now, asked)
	case kt.ClassLogic:
		x.run.Status = kt.StatusFailedLogic
	case kt.ClassPermission, kt.ClassPrecondition:
		x.run.Status = kt.StatusApproval
	case kt.ClassIndeterminate:
		x.run.Status = kt.StatusReconciliation
	default:
		x.run.Status = kt.StatusFailedInternal
	}
}

// scheduleRetry sets when a transiently failed run is tried again (the
// policy's backoff), or says that keep gave up; either is told to a person
// watching (Notify), so a wait is never silent.
func (x *runExec) scheduleRetry(msg string, now int64, asked time.Duration) {
	run := x.run
	who := fmt.Sprintf("%s %s", run.HandlerType, run.Handler)
	if x.tr.progressed {
		// The call kept where it got to and its retry goes on from there:
		// not a retry that gets nowhere, so the policy does not count it
		// (a backlog read one rate-limited page at a time ends).
		delay := max(asked, config.Backoff(x.pol.TransientBackoff, x.pol.TransientBackoffMax, 1))
		run.NextAttemptAt = now + delay.Milliseconds()
		x.notify(fmt.Sprintf("%s: %s; it goes on in %s (not counted among the %d retries)", who, msg, delay, x.pol.TransientRetries))
		return
	}
	if run.RetryCount < x.pol.TransientRetries {
		delay := config.Backoff(x.pol.TransientBackoff, x.pol.TransientBackoffMax, run.RetryCount+1)
		if asked > delay {
			// The service said how long to wait (Retry-After): sooner is refused.
			delay = asked
		}
		run.NextAttemptAt = now + delay.Milliseconds()
		x.notify(fmt.Sprintf("%s: %s; retry %d of %d in %s", who, msg, run.RetryCount+1, x.pol.TransientRetries, delay))
		return
	}
	// "it will be sent again" was true of the retry that did not come.
	msg = strings.TrimSuffix(msg, "; it will be sent again")
	run.ErrorMessage = fmt.Sprintf("%s — keep retried %d times and gave up; try again or skip", msg, run.RetryCount)
	x.notify(fmt.Sprintf("%s: %s", who, run.ErrorMessage))
}

// notify tells a person watching about this run.
func (x *runExec) notify(text string) {
	if x.e.notify != nil {
		x.e.notify(kt.Notice{Workflow: x.wf.Name, RunID: x.run.ID, Text: text})
	}
}

// releasesReservations applies SPEC §4's reset rules: a failure before
// mutate lets the selection go (the retry prepares afresh); a logic failure
// keeps it pinned to the failed run, so its inputs show what is stuck and a
// person's Skip can skip exactly those events (a repair releases them).
func releasesReservations(run *kt.Run, class kt.ErrorClass) bool {
	if class == kt.ClassLogic {
		return false
	}
	switch run.Phase {
	case kt.PhasePreparing, kt.PhasePrepared:
		return true
	}
	return false
}

func releaseReservations(tx store.Tx, runID string, now int64) error {
	return updatePinned(tx, runID, now, func(ev *kt.Event) { ev.ReservedBy = "" })
}

// updatePinned applies change to every event a run still holds (pending and reserved by it).
func updatePinned(tx store.Tx, runID string, now int64, change func(*kt.Event)) error {
	evs, err := tx.EventsReservedBy(runID)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		if ev.Status != kt.EventPending {
			continue
		}
		change(&ev)
		ev.UpdatedAt = now
		if err := tx.EventUpdate(ev); err != nil {
			return err
		}
	}
	return nil
}
