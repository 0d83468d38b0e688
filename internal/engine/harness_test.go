package engine_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/apitype"
	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/daemon"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/testsink"
)

// env is a real keep over a real SQLite file in a temp dir, with a real
// local HTTP sink and short host policies.
type env struct {
	t    testing.TB
	dir  string
	k    *daemon.Keep
	sink *testsink.Sink
	opts daemon.Options
}

const testPolicy = `[policy]
transient_retries = 2
transient_backoff = "10ms"
transient_backoff_max = "40ms"
reconcile_attempts = 2
reconcile_backoff = "10ms"
reconcile_backoff_max = "40ms"
handler_timeout = "2s"
tool_timeout = "2s"
memory_limit = "32MiB"
`

func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvWith(t, testPolicy)
}

// roomyPolicy is testPolicy with a time limit far out of reach, for tests
// of another limit (memory, log lines, sizes): on a busy machine the time
// limit must not trip first (issue 12).
var roomyPolicy = strings.Replace(testPolicy, `handler_timeout = "2s"`, `handler_timeout = "120s"`, 1)

func newEnvWith(t testing.TB, policy string) *env {
	t.Helper()
	return newEnvAt(t, policy, nil)
}

// newEnvAt is newEnvWith whose engine tells atStep each durable step it
// reaches (engine.Crash*), from the step's own goroutine.
func newEnvAt(t testing.TB, policy string, atStep func(step string)) *env {
	t.Helper()
	// KEEP_TEST_ENGINE_STORE=postgres runs the engine's tests on
	// PostgreSQL (a schema each); .ci/run does, after the default run.
	storeURL := ""
	if os.Getenv("KEEP_TEST_ENGINE_STORE") == "postgres" {
		storeURL = pgtest.FreshSchema(t)
	}
	return newEnvOn(t, policy, atStep, storeURL)
}

// newEnvOn is newEnvAt on the store at storeURL ("": SQLite in the
// data directory).
func newEnvOn(t testing.TB, policy string, atStep func(step string), storeURL string) *env {
	t.Helper()
	return newEnvOver(t, policy, atStep, storeURL, nil)
}

// newEnvOver is newEnvOn whose engine runs over what over makes of the
// store opened at storeURL (daemon.Options.Over): a test's store that
// holds a chosen write back until the test lets it go. nil over: the
// store itself, opened by daemon.Open. SQLite only when over is set (the
// engine lock of PostgreSQL is the store's own method, which a wrapper
// hides).
func newEnvOver(t testing.TB, policy string, atStep func(step string), storeURL string, over func(store.Store) store.Store) *env {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "keep.toml")
	// The sink is on 127.0.0.1: keep.toml allows it, as a person would.
	s := testsink.New()
	// %SINK% in the policy is the sink's URL (a custom connector's base_url).
	if err := os.WriteFile(cfg, []byte(strings.ReplaceAll(policy, "%SINK%", s.URL)+"\n"+s.AllowTOML()), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := daemon.Options{DataDir: filepath.Join(dir, "data"), Store: storeURL, ConfigFile: cfg, FilesRoot: filepath.Join(dir, "files"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), AtDurableStep: atStep}
	if over != nil {
		if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		st, err := daemon.OpenStore(opts.DataDir, storeURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := st.Close(); err != nil {
				t.Error(err)
			}
		})
		opts.Over = over(st)
	}
	k, err := daemon.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "files"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, k: k, sink: s, opts: opts}
	t.Cleanup(func() { s.Close(); e.k.Close() })
	return e
}

// restart closes keep and opens it again on the same store, as an upgrade
// or a restart does.
func (e *env) restart() {
	e.t.Helper()
	if err := e.k.Close(); err != nil {
		e.t.Fatal(err)
	}
	k, err := daemon.Open(e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.k = k
}

func (e *env) ctx() context.Context { return context.Background() }

// deploy deploys a script; %SINK% is replaced by the sink's URL.
func (e *env) deploy(src string) string {
	e.t.Helper()
	src = strings.ReplaceAll(src, "%SINK%", e.sink.URL)
	res, err := control.DeployAndGrant(e.ctx(), e.k.Engine, "wf.js", src, control.DeployOptions{})
	if err != nil {
		e.t.Fatalf("deploy: %v", err)
	}
	return res.Workflow
}

// deployUnchecked deploys a script the static analysis refuses, to try
// the run-time checks behind it.
func (e *env) deployUnchecked(src string) string {
	e.t.Helper()
	src = strings.ReplaceAll(src, "%SINK%", e.sink.URL)
	res, err := control.DeployUnchecked(e.ctx(), e.k.Engine, "wf.js", src)
	if err != nil {
		e.t.Fatalf("deploy: %v", err)
	}
	return res.Workflow
}

func (e *env) redeploy(src string, kind kt.DeployKind) {
	e.t.Helper()
	src = strings.ReplaceAll(src, "%SINK%", e.sink.URL)
	if _, err := control.DeployAndGrant(e.ctx(), e.k.Engine, "wf.js", src, control.DeployOptions{Kind: kind}); err != nil {
		e.t.Fatalf("deploy: %v", err)
	}
}

// settle runs until nothing is due and nothing waits for a timed retry.
// unknownWrite deploys hookScript against a sink that applies the write and
// never answers in time, with no probe: the run blocks on a write whose
// outcome is unknown. It returns the env, the workflow and that run.
func unknownWrite(t *testing.T) (*env, string, kt.Run) {
	t.Helper()
	e := newEnv(t)
	e.sink.Queue(testsink.TimeoutAfter)
	wf := e.deploy(hookScript("", ""))
	e.settle()
	return e, wf, e.open(wf)
}

// activeVersion returns the label of a workflow's active version.
func (e *env) activeVersion(wf string) string {
	e.t.Helper()
	var label string
	if err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		w, err := tx.WorkflowGet(wf)
		if err != nil {
			return err
		}
		v, err := tx.VersionGet(wf, w.ActiveVersion)
		label = v.Label()
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return label
}

func (e *env) settle() {
	e.t.Helper()
	// A guard against a scheduler that never goes idle, not a measure of
	// speed: a test that settles 17 MiB of events on PostgreSQL takes 20–30 s
	// alone here and more on a busy machine (CI runs the suite beside two CPU
	// hogs), so the guard is far above any honest settle.
	ctx, cancel := context.WithTimeout(e.ctx(), 5*time.Minute)
	defer cancel()
	if err := e.k.Scheduler.RunUntilIdle(ctx); err != nil {
		e.t.Fatalf("settle: %v", err)
	}
	if errs := e.k.Scheduler.Errors(); len(errs) > 0 {
		e.t.Fatalf("internal errors while stepping: %v", errs)
	}
}

func (e *env) runs(wf string) []apitype.Run {
	e.t.Helper()
	rs, err := report.AllRuns(e.ctx(), e.k.Store, wf)
	if err != nil {
		e.t.Fatal(err)
	}
	return rs
}

func (e *env) outputs(wf string) []apitype.Output {
	e.t.Helper()
	os, err := report.AllOutputs(e.ctx(), e.k.Store, wf)
	if err != nil {
		e.t.Fatal(err)
	}
	return os
}

func (e *env) inputs(wf string) []apitype.Input {
	e.t.Helper()
	in, err := report.AllInputs(e.ctx(), e.k.Store, wf)
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

// open returns the workflow's blocking run, failing the test when there is none.
func (e *env) open(wf string) kt.Run {
	e.t.Helper()
	var r kt.Run
	err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		var err error
		r, err = tx.RunOpen(wf)
		return err
	})
	if err != nil {
		e.t.Fatalf("expected a blocked run of %s: %v", wf, err)
	}
	return r
}

func (e *env) noOpenRun(wf string) {
	e.t.Helper()
	err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		r, err := tx.RunOpen(wf)
		if err == nil {
			e.t.Fatalf("workflow %s has an unfinished run: %s %s in %s: %s", wf, r.Status, r.Handler, r.Phase, r.ErrorMessage)
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) resolve(runID string, what kt.Resolution) string {
	e.t.Helper()
	msg, err := resolve(e.ctx(), e.k.Store, runID, what, time.Now())
	if err != nil {
		e.t.Fatalf("resolve %s %s: %v", runID, what, err)
	}
	return msg
}

func (e *env) events(wf, topic string) []kt.Event {
	e.t.Helper()
	var out []kt.Event
	err := e.k.Store.View(e.ctx(), func(tx store.Tx) error {
		ins, err := tx.InputList(wf)
		if err != nil {
			return err
		}
		seen := map[int64]bool{}
		for _, in := range ins {
			evs, err := tx.EventsByInput(in.ID)
			if err != nil {
				return err
			}
			for _, ev := range evs {
				if ev.Topic == topic && !seen[ev.ID] {
					seen[ev.ID] = true
					out = append(out, ev)
				}
			}
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// hookScript is one input "a" → one consumer run → one http POST to the sink.
func hookScript(extra, mutateOpts string) string {
	return `export default Keep.workflow({
  name: "hook", ` + extra + `
  topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx, state) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: { id: "a" } })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) {
      const [e] = await ctx.peek("job")
      if (!e) return { reservations: [] }
      return { reservations: [{ topic: "job", ids: [e.messageId] }], data: e.payload }
    },
    async mutate(ctx, p) {
      await ctx.http.request({ method: "POST", url: "%SINK%/write/" + p.data.id, json: p.data, timeoutMs: 300` + mutateOpts + ` })
    },
    async next(ctx, p, r) { return { last: r.status } },
  }) },
})`
}

const withProbe = `, reconcile: { url: "%SINK%/writes/{idempotencyKey}" }`

type storeTx = store.Tx

func nowT() time.Time { return time.Now() }

func runNow(e *env, wf string) (int, error) {
	rep, err := act(e.ctx(), e.k.Store, time.Now(), control.Request{Action: kt.ActRunNow, Workflow: wf})
	return rep.Queued, err
}

func pause(e *env, wf string) error {
	_, err := act(e.ctx(), e.k.Store, time.Now(), control.Request{Action: kt.ActPause, Workflow: wf})
	return err
}

func resume(e *env, wf string) error {
	_, err := act(e.ctx(), e.k.Store, time.Now(), control.Request{Action: kt.ActResume, Workflow: wf})
	return err
}

func writeInbox(t testing.TB, e *env, ids ...string) {
	t.Helper()
	dir := filepath.Join(e.dir, "files", "inbox")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := os.WriteFile(filepath.Join(dir, id+".json"), []byte(`{}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// stepUntil steps one workflow until cond holds.
func stepUntil(t testing.TB, e *env, wf string, cond func() bool) {
	t.Helper()
	for i := 0; i < 50 && !cond(); i++ {
		if _, err := e.k.Engine.Step(e.ctx(), wf); err != nil {
			t.Fatal(err)
		}
	}
	if !cond() {
		t.Fatal("condition not reached")
	}
}
