package engine_test

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
)

// A consumer run's second commit (the write's answer, the consumption,
// next's state) writes on the copies its first commit wrote, without
// reading the rows again (runExec.held, runExec.ledger): on PostgreSQL one
// round trip. While the write is out at the service the rows may change
// under it: the event republished with new content, re-opened by another
// writer, the ledger row moved by another, the consumer's row marked.
// Each change stands as it did when the commit read the rows: a write on a
// stale copy is refused (store.ErrStale) and the commit is made again from
// a read, with no step failing and nothing sent twice.
func TestRowsChangedWhileTheWriteIsOutStandAtTheRunsCommit(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		change func(tx store.Tx, wf string) error
		check  func(t *testing.T, e *env, wf string)
	}{
		"the event republished with new content": {
			change: func(tx store.Tx, wf string) error {
				ev, err := tx.EventGet(wf, "job", "a")
				if err != nil {
					return err
				}
				again := kt.Event{Workflow: wf, Topic: "job", MessageID: "a", Payload: json.RawMessage(`{"id":"a","v":2}`),
					CausedBy: ev.CausedBy, Attempt: ev.Attempt, UpdatedAt: ev.UpdatedAt + 1}
				_, err = tx.EventPublish(&again)
				return err
			},
			check: func(t *testing.T, e *env, wf string) {
				if evs := e.events(wf, "job"); len(evs) != 1 || evs[0].Status != kt.EventConsumed || string(evs[0].Payload) != `{"id":"a","v":2}` {
					t.Fatalf("events %+v, want the one consumed with its new content", evs)
				}
			},
		},
		"the event re-opened by another writer": {
			change: func(tx store.Tx, wf string) error {
				ev, err := tx.EventGet(wf, "job", "a")
				if err != nil {
					return err
				}
				ev.ReservedBy, ev.UpdatedAt = "", ev.UpdatedAt+1
				return tx.EventUpdate(ev)
			},
			check: func(t *testing.T, e *env, wf string) {
				// Not the run's to consume any more: the next run finds the
				// write applied under the same identity and replays it.
				if evs := e.events(wf, "job"); len(evs) != 1 || evs[0].Status != kt.EventConsumed {
					t.Fatalf("events %+v, want the one consumed by the next run", evs)
				}
			},
		},
		"the ledger row moved by another writer": {
			change: func(tx store.Tx, wf string) error {
				ms, err := tx.MutationList(wf)
				if err != nil || len(ms) != 1 {
					return err
				}
				ms[0].Status = kt.MutationNeedsReconcile
				return tx.MutationPut(ms[0])
			},
			check: func(t *testing.T, e *env, wf string) {
				if evs := e.events(wf, "job"); len(evs) != 1 || evs[0].Status != kt.EventConsumed {
					t.Fatalf("events %+v, want the one consumed", evs)
				}
			},
		},
		"the consumer's row marked": {
			change: func(tx store.Tx, wf string) error {
				h, err := tx.HandlerGet(wf, "c")
				if err != nil {
					return err
				}
				h.Queued, h.UpdatedAt = true, h.UpdatedAt+1
				return tx.HandlerPut(h)
			},
			check: func(t *testing.T, e *env, wf string) {
				must(t, e.k.Store.View(e.ctx(), func(tx store.Tx) error {
					h, err := tx.HandlerGet(wf, "c")
					if err != nil {
						return err
					}
					if !h.Queued || string(h.State) != `{"last":"applied"}` {
						t.Fatalf("the consumer's row %+v: the mark lost, or next's state not stored", h)
					}
					return nil
				}))
			},
		},
	}
	for _, backend := range []string{"sqlite", "postgres"} {
		for name, c := range cases {
			t.Run(backend+"/"+name, func(t *testing.T) {
				t.Parallel()
				wf := "hook"
				e := changeWhileTheWriteIsOut(t, backend, hookScript("", withProbe), func(tx store.Tx) error { return c.change(tx, wf) })
				if m := e.mutation(wf); m.Status != kt.MutationApplied {
					t.Fatalf("the ledger row is %s, want applied", m.Status)
				}
				for _, r := range e.runs(wf) {
					if r.Handler == "c" && r.Status != string(kt.StatusCommitted) {
						t.Fatalf("consumer run %s is %s (%s), want committed", r.ID, r.Status, r.Error)
					}
				}
				c.check(t, e, wf)
			})
		}
	}
}

// Input b's publish merges into job/a (same message id, same attempt: the
// event stays pending and reserved by the run, its caused_by becomes
// [a, b]) while the run's write is out. Its updated_at is the run's
// copy's (a publish stamped in the same millisecond: the merge keeps the
// publisher's time). The run's next publishes out/o: the old read path
// gives it the causes the event has at the commit ([a, b]); the copy path
// gave the causes prepare read ([a]) until EventSettle compared the
// causes too (a helper's attack on 0ba2080 found it).
const lineageScript = `export default Keep.workflow({
  name: "hook",
  topics: { "job": {}, "out": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    ctx.registerInput({ source: "system", type: "schedule", id: "b", title: "Job b" })
    await ctx.publish("job", { messageId: "a", inputId, payload: { id: "a" } })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"], publishes: ["out"],
    async prepare(ctx) {
      const [e] = await ctx.peek("job")
      if (!e) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload }
    },
    async mutate(ctx, p) {
      await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, timeoutMs: 300 })
    },
    async next(ctx, p, r) { await ctx.publish("out", { messageId: "o", payload: { from: p.data.id } }); return { last: r.status } },
  }) },
})`

func TestAMergedPublishAtTheCopysTimeKeepsItsLineage(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		for name, skew := range map[string]int64{"stamped a millisecond later": 1, "stamped in the same millisecond": 0} {
			t.Run(backend+"/"+name, func(t *testing.T) {
				t.Parallel()
				var inputB string
				e := changeWhileTheWriteIsOut(t, backend, lineageScript, func(tx store.Tx) error {
					ins, err := tx.InputList("hook")
					if err != nil {
						return err
					}
					for _, in := range ins {
						if in.Title == "Job b" {
							inputB = in.ID
						}
					}
					ev, err := tx.EventGet("hook", "job", "a")
					if err != nil {
						return err
					}
					again := kt.Event{Workflow: "hook", Topic: "job", MessageID: "a", Payload: json.RawMessage(`{"id":"a","from":"b"}`),
						CausedBy: []string{inputB}, Attempt: ev.Attempt, UpdatedAt: ev.UpdatedAt + skew}
					_, err = tx.EventPublish(&again)
					return err
				})
				if inputB == "" {
					t.Fatal("no input b")
				}
				var job, out kt.Event
				must(t, e.k.Store.View(e.ctx(), func(tx store.Tx) error {
					var err error
					if job, err = tx.EventGet("hook", "job", "a"); err != nil {
						return err
					}
					out, err = tx.EventGet("hook", "out", "o")
					return err
				}))
				t.Logf("job/a: %s caused by %v; out/o caused by %v", job.Status, job.CausedBy, out.CausedBy)
				if job.Status != kt.EventConsumed || !slices.Contains(job.CausedBy, inputB) {
					t.Fatalf("job/a %+v: want consumed, caused by b too", job)
				}
				if !slices.Contains(out.CausedBy, inputB) {
					t.Fatalf("out/o is caused by %v: input b's event was consumed by the run, but what the run published does not descend from b (the old read path gives %v)", out.CausedBy, job.CausedBy)
				}
			})
		}
	}
}

// stepWithoutError steps workflow wf until it has nothing to do, failing t
// at a step's error.
func stepWithoutError(t *testing.T, e *env, wf string) {
	t.Helper()
	for i := 0; ; i++ {
		if i == 50 {
			t.Fatal("the workflow still steps after 50 steps")
		}
		did, err := e.k.Engine.Step(e.ctx(), wf)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !did {
			return
		}
	}
}

// changeWhileTheWriteIsOut deploys src (workflow "hook") on backend
// ("sqlite" or "postgres"), runs change in a transaction of its own once
// the consumer's write is out (engine.CrashAfterCall: after the in_flight
// commit, before the outcome's) and steps the workflow to the end with no
// step failing; the workflow ends with no open run and one write at the
// sink.
func changeWhileTheWriteIsOut(t *testing.T, backend, src string, change func(tx store.Tx) error) *env {
	t.Helper()
	url := ""
	if backend == "postgres" {
		url = pgtest.FreshSchema(t)
	}
	var e *env
	var once sync.Once
	changed := make(chan error, 1)
	e = newEnvOn(t, testPolicy, func(step string) {
		if step == engine.CrashAfterCall {
			once.Do(func() { changed <- e.k.Store.Update(e.ctx(), change) })
		}
	}, url)
	e.deploy(src)
	stepWithoutError(t, e, "hook")
	select {
	case err := <-changed:
		if err != nil {
			t.Fatalf("the change: %v", err)
		}
	default:
		t.Fatal("the write never went out: nothing was changed")
	}
	e.noOpenRun("hook")
	if n := len(e.sink.Writes()); n != 1 {
		t.Fatalf("writes at the sink: %d, want 1", n)
	}
	return e
}
