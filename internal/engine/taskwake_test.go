package engine_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/control"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
)

// A person's Reprocess of a done task item taken while a run of that task
// is under way (past the item already) is carried out by a next run at
// once, as its message says ("queued now"), not at the task's next
// scheduled time, an hour later: the run's commit must not clear the
// queue mark the reprocess set meanwhile.
func TestAReprocessDuringATaskRunIsTakenAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeInbox(t, e, "a", "b")
	var reads atomic.Int32
	var once sync.Once
	done := make(chan error, 1)
	e.sink.OnRead = func(path string) {
		if path != "/read" || reads.Add(1) != 4 {
			return
		}
		// The second run reads b's: it is past a, which a person reprocesses now.
		once.Do(func() {
			_, err := reprocessRef(e.ctx(), e.k.Store, control.ItemRef{Workflow: "items", Ref: "email:a"}, time.Now())
			done <- err
		})
	}
	wf := e.deploy(itemScript("", `await ctx.http.request({ method: "GET", url: "%SINK%/read" })
          `+twoMutations))
	e.settle()
	if n := len(e.sink.Writes()); n != 2 {
		t.Fatalf("writes after the first run: %d, want 2", n)
	}
	if _, err := runNow(e, wf); err != nil {
		t.Fatal(err)
	}
	e.settle()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("the second run never read b (reads %d): the test did not reprocess", reads.Load())
	}
	e.noOpenRun(wf)
	if n := len(e.sink.Writes()); n != 3 {
		t.Fatalf("writes at the sink: %d, want 3 (a written again by its new attempt)", n)
	}
	d, err := report.ShowItem(e.ctx(), e.k.Store, wf, "email:a")
	if err != nil {
		t.Fatal(err)
	}
	if d.Item.Status != kt.ItemDone || d.Item.Attempt != 2 {
		t.Fatalf("item a: %+v", d.Item)
	}
}
