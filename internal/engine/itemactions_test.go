package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/control"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/testsink"
)

func skipItem(e *env, wf, ref string) (string, error) {
	return skipRef(e.ctx(), e.k.Store, control.ItemRef{Workflow: wf, Ref: ref}, time.Now())
}

func reprocessItem(e *env, wf, ref string) (string, error) {
	return reprocessRef(e.ctx(), e.k.Store, control.ItemRef{Workflow: wf, Ref: ref}, time.Now())
}

func TestReprocessRunsTheWriteAgainAndKeepsTheOldAttempt(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"task", "input"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var wf, key string
			if kind == "task" {
				writeInbox(t, e, "a")
				wf, key = e.deploy(itemScript("", twoMutations)), "email:a"
			} else {
				wf, key = e.deploy(hookScript("", withProbe)), "system:schedule:a"
			}
			e.settle()
			before := len(e.sink.Writes())
			msg, err := reprocessItem(e, wf, key)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(msg, "attempt 2") {
				t.Fatalf("message %q", msg)
			}
			e.settle()
			e.noOpenRun(wf)
			if n := len(e.sink.Writes()); n != before+1 {
				t.Fatalf("writes %d → %d, want one more", before, n)
			}
			d, err := report.ShowItem(e.ctx(), e.k.Store, wf, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Attempts) != 2 || d.Attempts[0].Attempt != 1 || d.Attempts[1].Attempt != 2 || !d.Attempts[1].Current ||
				len(d.Attempts[0].Mutations) == 0 || len(d.Attempts[1].Mutations) != len(d.Attempts[0].Mutations) || d.Attempts[0].Mutations[0].Status != "applied" {
				t.Fatalf("attempts %+v", d.Attempts)
			}
			if d.Item.Status != "done" || d.Item.Attempt != 2 || d.Attempts[0].Version != "1.0" {
				t.Fatalf("item %+v attempts %+v", d.Item, d.Attempts)
			}
		})
	}
}

func TestReprocessReopensDownstreamEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(chainScript)
	e.settle()
	if _, err := reprocessItem(e, wf, "system:schedule:x"); err != nil {
		t.Fatal(err)
	}
	e.settle()
	e.noOpenRun(wf)
	// x went through both consumers again: one more file write and one more http write.
	if n := len(e.sink.Writes()); n != 3 {
		t.Fatalf("http writes %d, want 3 (x twice, y once)", n)
	}
	for _, ev := range e.events(wf, "b") {
		if ev.MessageID == "b-x" && (ev.Attempt != 2 || ev.Status != kt.EventConsumed) {
			t.Fatalf("downstream event %+v", ev)
		}
	}
}

// TestSkipInEveryEventState walks SPEC §8.2: pending, reserved before the
// mutation, reserved after the mutation, consumed.
func TestSkipInEveryEventState(t *testing.T) {
	t.Parallel()
	t.Run("pending", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		wf := e.deploy(hookScript("", ""))
		if err := pause(e, wf); err != nil {
			t.Fatal(err)
		}
		// Run only the producer: resume, step until the input exists, pause.
		resume(e, wf)
		stepUntil(t, e, wf, func() bool { return len(e.inputs(wf)) == 1 })
		pause(e, wf)
		if in := e.inputs(wf); in[0].Status != "pending" {
			t.Fatalf("input %s", in[0].Status)
		}
		msg, err := skipItem(e, wf, "system:schedule:a")
		if err != nil || !strings.Contains(msg, "1 pending events skipped") {
			t.Fatalf("%q %v", msg, err)
		}
		resume(e, wf)
		e.settle()
		if in := e.inputs(wf); in[0].Status != "skipped" || e.sink.Requests() != 0 {
			t.Fatalf("input %s requests %d", in[0].Status, e.sink.Requests())
		}
	})
	t.Run("reserved before the mutation", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.sink.Queue(testsink.Status(409))
		wf := e.deploy(hookScript("", ""))
		e.settle()
		r := e.open(wf) // blocked in mutate, event pinned
		msg, err := skipItem(e, wf, "system:schedule:a")
		if err != nil || !strings.Contains(msg, "will be skipped") {
			t.Fatalf("%q %v", msg, err)
		}
		e.settle()
		e.noOpenRun(wf)
		if in := e.inputs(wf); in[0].Status != "skipped" || len(e.sink.Writes()) != 0 {
			t.Fatalf("input %s writes %d (run %s)", in[0].Status, len(e.sink.Writes()), r.ID)
		}
	})
	t.Run("reserved after the mutation", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		src := strings.Replace(hookScript("", ""), `async next(ctx, p, r) { return { last: r.status } }`, `async next(ctx, p, r) { if (r.status === "applied" && !globalThis.fixed) throw new Error("next is broken") }`, 1)
		wf := e.deploy(src)
		e.settle()
		r := e.open(wf)
		if r.Phase != kt.PhaseEmitting {
			t.Fatalf("run in %s", r.Phase)
		}
		msg, err := skipItem(e, wf, "system:schedule:a")
		if err != nil || !strings.Contains(msg, "already happened") {
			t.Fatalf("%q %v", msg, err)
		}
		// The write happened: the run completes once next is fixed.
		e.redeploy(strings.Replace(src, "!globalThis.fixed", "false", 1), kt.DeployMinor)
		e.settle()
		e.noOpenRun(wf)
		if in := e.inputs(wf); in[0].Status != "done" || len(e.sink.Writes()) != 1 {
			t.Fatalf("input %s writes %d", in[0].Status, len(e.sink.Writes()))
		}
	})
	t.Run("consumed", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		wf := e.deploy(hookScript("", ""))
		e.settle()
		msg, err := skipItem(e, wf, "system:schedule:a")
		if err != nil || !strings.Contains(msg, "already consumed") {
			t.Fatalf("%q %v", msg, err)
		}
		if in := e.inputs(wf); in[0].Status != "done" {
			t.Fatalf("a consumed input changed to %s", in[0].Status)
		}
	})
	t.Run("task item blocked on an unknown write", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		writeInbox(t, e, "a", "b")
		e.sink.Queue(testsink.TimeoutAfter)
		wf := e.deploy(itemScript("", strings.Replace(twoMutations, `, reconcile: { url: "%SINK%/writes/{idempotencyKey}" }`, "", 1)))
		e.settle()
		r := e.open(wf)
		if r.Status != kt.StatusReconciliation {
			t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
		}
		items := e.inputs(wf)
		if items[0].Status != "needs_attention" {
			t.Fatalf("items %+v", items)
		}
		if _, err := skipItem(e, wf, "email:a"); err != nil {
			t.Fatal(err)
		}
		e.settle()
		e.noOpenRun(wf)
		got := map[string]string{}
		for _, it := range e.inputs(wf) {
			got[it.Key] = string(it.Status)
		}
		if got["email:a"] != "skipped" || got["email:b"] != "done" {
			t.Fatalf("items %v", got)
		}
	})
}

func TestComparePayloadOnReplayAfterMinorVersion(t *testing.T) {
	t.Parallel()
	// The first write applies, the second fails (400): the item fails. A
	// minor version changes the first write's content and fixes the second.
	body := func(content string) string {
		return `await ctx.files.write({ path: "out/" + id + ".txt", content: "` + content + `" })
          await ctx.http.request({ method: "POST", url: "%SINK%/write/" + id, json: { id } })`
	}
	for name, c := range map[string]struct {
		content string
		ok      bool
	}{
		"minor (whitespace)": {"hello   world", true},
		"significant":        {"goodbye", false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			writeInbox(t, e, "a")
			e.sink.Queue(testsink.Status(400))
			wf := e.deploy(itemScript("", body("hello world")))
			e.settle()
			if it := e.inputs(wf); it[0].Status != "failed" {
				t.Fatalf("item %+v", it)
			}
			e.redeploy(itemScript("", body(c.content)), kt.DeployMinor)
			e.settle()
			if c.ok {
				e.noOpenRun(wf)
				if it := e.inputs(wf); it[0].Status != "done" || len(e.sink.Writes()) != 1 {
					t.Fatalf("item %+v writes %d", it, len(e.sink.Writes()))
				}
				d, _ := report.ShowItem(e.ctx(), e.k.Store, wf, "email:a")
				if n := len(d.Attempts[0].Mutations); n != 2 {
					t.Fatalf("mutations %d: the file write was repeated instead of cached", n)
				}
				return
			}
			r := e.open(wf)
			if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, "significant") {
				t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
			}
			if it := e.inputs(wf); it[0].Status != "needs_attention" || len(e.sink.Writes()) != 0 {
				t.Fatalf("item %+v writes %d", it, len(e.sink.Writes()))
			}
		})
	}
}

func TestOrphansAfterMajorVersionWithNewKeyFormat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	writeInbox(t, e, "a", "b")
	e.sink.Queue(testsink.OK, testsink.Status(401)) // b is left incomplete
	wf := e.deploy(itemScript("", twoMutations))
	e.settle()
	r := e.open(wf)
	// The intent changes: items are threads now.
	newSrc := strings.Replace(itemScript("", twoMutations), `"email:" + id`, `"thread:" + id`, 1)
	newSrc = strings.ReplaceAll(newSrc, "%SINK%", e.sink.URL)
	// Issue 10 #12: a major version needs the reprocess choice; a key
	// format change needs consent before activation, with sample orphans;
	// a minor version may not change the key format at all.
	if _, err := control.DeployAndGrant(e.ctx(), e.k.Engine, "wf.js", newSrc, control.DeployOptions{Kind: kt.DeployMajor}); err == nil || !strings.Contains(err.Error(), "--reprocess=none") || !strings.Contains(err.Error(), "--reprocess=all") {
		t.Fatalf("major without a choice: %v", err)
	}
	if _, err := control.Deploy(e.ctx(), e.k.Engine, "wf.js", newSrc, control.DeployOptions{Kind: kt.DeployMajor, Reprocess: "none"}); err == nil || !strings.Contains(err.Error(), "email:b") || !strings.Contains(err.Error(), "--accept-orphans") {
		t.Fatalf("major with a key format change, without consent: %v", err)
	}
	if _, err := control.DeployAndGrant(e.ctx(), e.k.Engine, "wf.js", newSrc, control.DeployOptions{Kind: kt.DeployMinor}); err == nil || !strings.Contains(err.Error(), "keeps the ids of done work") || !strings.Contains(err.Error(), "thread:a") || !strings.Contains(err.Error(), "email:b") {
		t.Fatalf("minor with a key format change: %v", err)
	}
	if v := e.activeVersion(wf); v != "1.0" {
		t.Fatalf("a refused deploy changed the active version: %s", v)
	}
	res, err := control.Deploy(e.ctx(), e.k.Engine, "wf.js", newSrc, control.DeployOptions{Kind: kt.DeployMajor, Reprocess: "none", AcceptOrphans: true})
	if err != nil {
		t.Fatal(err)
	}
	// The key format's warning, and the replay of the failed run (issue 39).
	if len(res.Warnings) != 2 || !strings.Contains(res.Warnings[1], "a new item thread:a") || !strings.Contains(res.Warnings[0], "email:") || !strings.Contains(res.Warnings[0], "thread:") || !strings.Contains(res.Warnings[0], "1 incomplete") {
		t.Fatalf("warnings %v", res.Warnings)
	}
	e.resolve(r.ID, kt.ResolveTryAgain) // the retry runs the new version
	e.settle()
	e.noOpenRun(wf)
	orphans, err := report.AllItems(e.ctx(), e.k.Store, wf, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(orphans) != 1 || orphans[0].Key != "email:b" || !orphans[0].Orphaned {
		t.Fatalf("orphans %+v", orphans)
	}
	if _, err := skipItem(e, wf, "email:b"); err != nil {
		t.Fatal(err)
	}
	if orphans, _ := report.AllItems(e.ctx(), e.k.Store, wf, true); len(orphans) != 0 {
		t.Fatalf("orphans after skip %+v", orphans)
	}
	keys := map[string]string{}
	all, _ := report.AllItems(e.ctx(), e.k.Store, wf, false)
	for _, it := range all {
		keys[it.Key] = string(it.Status)
	}
	if keys["thread:a"] != "done" || keys["thread:b"] != "done" || keys["email:a"] != "done" || keys["email:b"] != "skipped" {
		t.Fatalf("items %v", keys)
	}
}
