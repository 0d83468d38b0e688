// Package otel runs keep as an operator does, with keep.toml's [otel]
// pointing at an OTLP/HTTP receiver, and checks the traces it receives
// against what keep runs shows.
package otel

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/testbin"
	"github.com/keep-run/keep/internal/testotlp"
	"github.com/keep-run/keep/internal/testsink"
)

var keepBin string

func TestMain(m *testing.M) {
	testbin.Main(m, &keepBin)
}

// traced is a workflow with each kind of run: a producer registers two
// inputs; consumer c writes each to the sink (prepare, mutate, next); task
// t writes one item.
func traced(sink string) string {
	return fmt.Sprintf(`export default Keep.workflow({ name: "traced", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    for (const id of ["a", "b"]) {
      const inputId = ctx.registerInput({ source: "system", type: "schedule", id, title: "Job " + id })
      await ctx.publish("job", { messageId: id, inputId, payload: { id } })
    } } } },
  consumers: {
    c: Keep.consumer({ subscribe: ["job"],
      async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: { id: e.messageId } } },
      async mutate(ctx, prepared) { await ctx.http.request({ method: "POST", url: "%[1]s/write/" + prepared.data.id, json: {} }) },
      async next(ctx) { return {} } }) },
  tasks: { t: Keep.task({ schedule: { interval: "1h" }, async run(ctx) {
    await ctx.withItem("item:x", "Item x", async (ctx) => { await ctx.http.request({ method: "POST", url: "%[1]s/write/item-x", json: {} }) }) } }) } })`, sink)
}

// refused is a workflow whose one write the server refuses (403: a
// permission failure, which blocks the workflow until a person acts).
func refused(sink string) string {
	return fmt.Sprintf(`export default Keep.workflow({ name: "refused", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "r", title: "Job r" })
    await ctx.publish("job", { messageId: "r", inputId, payload: {} }) } } },
  consumers: {
    r: Keep.consumer({ subscribe: ["job"],
      async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: {} } },
      async mutate(ctx) { await ctx.http.request({ method: "POST", url: "%s/write/r", json: {} }) } }) } })`, sink)
}

// setup writes the workflows and a keep.toml with otelTOML, and returns
// the folder, the sink and the refusing sink.
func setup(t *testing.T, otelTOML string) (string, *testsink.Sink, *testsink.Sink) {
	t.Helper()
	sink, refusing := testsink.New(), testsink.New()
	t.Cleanup(sink.Close)
	t.Cleanup(refusing.Close)
	refusing.Queue(testsink.Status(http.StatusForbidden))
	dir := t.TempDir()
	for name, src := range map[string]string{"traced.js": traced(sink.URL), "refused.js": refused(refusing.URL)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	toml := fmt.Sprintf("[connectors.http]\nallow = [%q, %q]\n\n%s", sink.Host(), refusing.Host(), otelTOML)
	if err := os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, sink, refusing
}

// keep runs the binary in dir and returns its output and exit code.
func keep(t *testing.T, dir string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(keepBin, append([]string{"--data", filepath.Join(dir, "data"), "--config", filepath.Join(dir, "keep.toml")}, args...)...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// keepRun runs both workflows with keep run: traced ends idle (exit 0),
// refused with a run that needs a person (exit 3).
func keepRun(t *testing.T, dir string, env ...string) string {
	t.Helper()
	out, code := keep(t, dir, env, "run", "traced.js")
	if code != 0 {
		t.Fatalf("keep run traced.js exited %d\n%s", code, out)
	}
	out2, code := keep(t, dir, env, "run", "refused.js")
	if code != 3 {
		t.Fatalf("keep run refused.js exited %d, want 3 (the refused write needs a person)\n%s", code, out2)
	}
	return out + out2
}

type shownRun struct {
	Workflow    string `json:"-"`
	ID          string `json:"id"`
	Handler     string `json:"handler"`
	HandlerType string `json:"handlerType"`
	Status      string `json:"status"`
}

// runsShown is what keep runs --json shows of both workflows.
func runsShown(t *testing.T, dir string) []shownRun {
	t.Helper()
	var all []shownRun
	for _, wf := range []string{"traced", "refused"} {
		out, code := keep(t, dir, nil, "runs", wf, "--json")
		var runs []shownRun
		if code != 0 || json.Unmarshal([]byte(out), &runs) != nil {
			t.Fatalf("keep runs %s --json (exit %d):\n%s", wf, code, out)
		}
		for i := range runs {
			runs[i].Workflow = wf
		}
		all = append(all, runs...)
	}
	return all
}

// inputIDs is keep inputs --json of both workflows: the inputs' ids by key.
func inputIDs(t *testing.T, dir string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, wf := range []string{"traced", "refused"} {
		out, code := keep(t, dir, nil, "inputs", wf, "--json")
		var ins []struct{ ID, Key string }
		if code != 0 || json.Unmarshal([]byte(out), &ins) != nil {
			t.Fatalf("keep inputs %s --json (exit %d):\n%s", wf, code, out)
		}
		for _, in := range ins {
			ids[in.Key] = in.ID
		}
	}
	return ids
}

// writesAt counts the writes a sink applied, by path.
func writesAt(s *testsink.Sink) map[string]int {
	n := map[string]int{}
	for _, w := range s.Writes() {
		n[w.Path]++
	}
	return n
}

// A keep run with [otel] set sends, by the time it exits, a span per run
// that keep runs shows (its id, workflow, handler), with a child per phase
// and a grandchild per connector call, each call's outcome, the inputs,
// and an error span for the run whose write was refused.
func TestKeepRunSendsASpanPerRun(t *testing.T) {
	t.Parallel()
	col := newCollector(t, http.StatusOK)
	dir, sink, _ := setup(t, fmt.Sprintf("[otel]\nendpoint = %q\nservice_name = \"keep-test\"\nheaders = { Authorization = \"Bearer ${OTEL_TOKEN}\" }\n", col.URL))
	out := keepRun(t, dir, "OTEL_TOKEN=t0ken-for-the-collector")
	if strings.Contains(out, "t0ken-for-the-collector") {
		t.Errorf("keep run printed the collector's token:\n%s", out)
	}
	// keep run flushed at its exit: everything is here, no waiting.
	spans, auth, services := col.Spans(), col.Auth(), col.Services()
	if len(auth) == 0 || auth[0] != "Bearer t0ken-for-the-collector" || services[0] != "keep-test" {
		t.Fatalf("the collector got Authorization %q, service.Name %q", auth, services)
	}
	runs := runsShown(t, dir)
	inputs := inputIDs(t, dir)
	byRun := map[string][]testotlp.Span{}
	polls := 0
	for _, s := range spans {
		switch {
		case strings.HasPrefix(s.Name, "run "):
			byRun[s.Attrs["keep.run.id"]] = append(byRun[s.Attrs["keep.run.id"]], s)
		case strings.HasPrefix(s.Name, "poll "):
			// A consumer's prepare that found nothing: keep stores no run.
			polls++
			if s.Name != "poll traced/c" && s.Name != "poll refused/r" || s.Attrs["keep.run.recorded"] != "false" || s.Attrs["keep.run.status"] != "committed" {
				t.Errorf("poll span %s: %v", s.Name, s.Attrs)
			}
		}
	}
	if polls == 0 {
		t.Errorf("no poll span: consumer c polls once more after its two jobs")
	}
	if len(byRun) != len(runs) {
		t.Errorf("%d runs shown, %d runs traced", len(runs), len(byRun))
	}
	calls := map[string]int{}
	for _, r := range runs {
		rs := byRun[r.ID]
		if len(rs) != 1 {
			t.Errorf("run %s (%s %s): %d spans, want 1", r.ID, r.HandlerType, r.Handler, len(rs))
			continue
		}
		run := rs[0]
		if run.Name != "run "+r.Workflow+"/"+r.Handler || run.Attrs["keep.workflow"] != r.Workflow || run.Attrs["keep.handler"] != r.Handler ||
			run.Attrs["keep.handler.type"] != r.HandlerType || run.Attrs["keep.run.status"] != r.Status || run.Parent != "" {
			t.Errorf("run %s's span: %+v, shown as %+v", r.ID, run, r)
		}
		phases := map[string]testotlp.Span{}
		for _, p := range testotlp.Children(spans, run) {
			phases[p.Name] = p
			if p.Attrs["keep.run.id"] != r.ID {
				t.Errorf("phase %s of run %s carries run id %q", p.Name, r.ID, p.Attrs["keep.run.id"])
			}
		}
		for _, p := range phases {
			for _, c := range testotlp.Children(spans, p) {
				calls[r.Handler+"/"+p.Name+"/"+c.Name+"/"+c.Attrs["keep.call.outcome"]]++
				checkCall(t, r, p, c, inputs)
			}
		}
		checkPhases(t, r, run, phases)
	}
	want := map[string]int{"c/mutate/call http.request/applied": 2, "r/mutate/call http.request/failed": 1, "t/task/call http.request/applied": 1}
	for k, n := range want {
		if calls[k] != n {
			t.Errorf("calls %s: %d, want %d (all: %v)", k, calls[k], n, calls)
		}
	}
	if w := writesAt(sink); w["/write/a"] != 1 || w["/write/b"] != 1 || w["/write/item-x"] != 1 {
		t.Errorf("writes at the sink: %v", w)
	}
}

// blocked is how keep runs shows the run whose write was refused.
const blocked = "paused:approval"

// checkPhases checks a run's phase spans by its kind and outcome.
func checkPhases(t *testing.T, r shownRun, run testotlp.Span, phases map[string]testotlp.Span) {
	t.Helper()
	var want []string
	switch {
	case r.HandlerType == "producer":
		want = []string{"producer"}
	case r.HandlerType == "task":
		want = []string{"task"}
	case r.Status == blocked:
		want = []string{"mutate", "prepare"}
	case len(run.Attrs["keep.input.id"]) > 0:
		want = []string{"mutate", "next", "prepare"}
	default:
		// A consumer run that found nothing to reserve commits at once.
		want = []string{"next", "prepare"}
	}
	var got []string
	for name := range phases {
		got = append(got, name)
	}
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("run %s (%s %s, %s): phases %v, want %v", r.ID, r.HandlerType, r.Handler, r.Status, got, want)
	}
	if r.Status == blocked {
		// The refused write: the run and its mutate phase fail with the
		// class keep gave the run.
		if !run.Error || run.Attrs["keep.error.class"] != "permission" || !strings.HasPrefix(run.Message, "permission: ") {
			t.Errorf("the refused run's span: error %v, class %q, message %q", run.Error, run.Attrs["keep.error.class"], run.Message)
		}
		if m := phases["mutate"]; !m.Error || m.Attrs["keep.error.class"] != "permission" {
			t.Errorf("the refused run's mutate phase: %+v", m)
		}
		return
	}
	if run.Error {
		t.Errorf("run %s (%s) has an error status: %s", r.ID, r.Handler, run.Message)
	}
}

// checkCall checks a call's span: its tool and method, its kind, its
// outcome and class, the input it was made for.
func checkCall(t *testing.T, r shownRun, p, c testotlp.Span, inputs map[string]string) {
	t.Helper()
	if c.Attrs["keep.call.tool"] != "http" || c.Attrs["keep.call.method"] != "request" || c.Attrs["keep.call.kind"] != "write" || c.Attrs["keep.run.id"] != r.ID {
		t.Errorf("call %s of run %s: %+v", c.Name, r.ID, c.Attrs)
	}
	wantInput := map[string]string{"r": inputs["system:schedule:r"], "t": inputs["item:x"]}[r.Handler]
	if r.Handler == "c" {
		if in := c.Attrs["keep.input.id"]; in != inputs["system:schedule:a"] && in != inputs["system:schedule:b"] {
			t.Errorf("call of run %s names input %q; inputs %v", r.ID, in, inputs)
		}
	} else if c.Attrs["keep.input.id"] != wantInput || wantInput == "" {
		t.Errorf("call of run %s (%s) names input %q, want %q (inputs %v)", r.ID, r.Handler, c.Attrs["keep.input.id"], wantInput, inputs)
	}
	if r.Handler == "r" {
		if !c.Error || c.Attrs["keep.error.class"] != "permission" {
			t.Errorf("the refused call: %+v", c)
		}
	} else if c.Error {
		t.Errorf("call of run %s failed: %s", r.ID, c.Message)
	}
}

// A collector that is down, or that answers 500, never blocks or fails a
// run: keep run ends as it would without [otel], each write applied once.
func TestACollectorThatFailsCostsTheRunsNothing(t *testing.T) {
	t.Parallel()
	for name, endpoint := range map[string]func(t *testing.T) (string, *testotlp.Collector){
		"down": func(t *testing.T) (string, *testotlp.Collector) { return "http://" + testbin.FreePort(t), nil },
		"500": func(t *testing.T) (string, *testotlp.Collector) {
			c := newCollector(t, http.StatusInternalServerError)
			return c.URL, c
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url, col := endpoint(t)
			dir, sink, refusing := setup(t, fmt.Sprintf("[otel]\nendpoint = %q\n", url))
			keepRun(t, dir)
			if w := writesAt(sink); w["/write/a"] != 1 || w["/write/b"] != 1 || w["/write/item-x"] != 1 || len(sink.Writes()) != 3 {
				t.Errorf("writes at the sink: %v", w)
			}
			if n := len(refusing.Writes()); n != 0 {
				t.Errorf("the refusing sink applied %d writes", n)
			}
			statuses := map[string]int{}
			for _, r := range runsShown(t, dir) {
				statuses[r.Handler+" "+r.Status]++
			}
			if statuses["p committed"] != 2 || statuses["t committed"] != 1 || statuses["r "+blocked] != 1 || statuses["c committed"] < 2 {
				t.Errorf("runs: %v", statuses)
			}
			if col != nil {
				if col.Requests() == 0 {
					t.Errorf("keep never tried the collector")
				}
			}
		})
	}
}

// keep serve sends the spans still queued when it is stopped (SIGTERM).
func TestKeepServeSendsItsSpansWhenStopped(t *testing.T) {
	t.Parallel()
	col := newCollector(t, http.StatusOK)
	dir, sink, _ := setup(t, fmt.Sprintf("[otel]\nendpoint = %q\n", col.URL+"/v1/traces"))
	for _, wf := range []string{"traced.js", "refused.js"} {
		if out, code := keep(t, dir, nil, "deploy", "--grant", wf); code != 0 {
			t.Fatalf("deploy %s: exit %d\n%s", wf, code, out)
		}
	}
	cmd := exec.Command(keepBin, "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--config", filepath.Join(dir, "keep.toml"))
	logs := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	testbin.WaitFor(t, "the three writes at the sink", func() bool { return len(sink.Writes()) == 3 }, logs)
	runs := runsShown(t, dir)
	testbin.WaitFor(t, "every run shown to be finished", func() bool {
		runs = runsShown(t, dir)
		waiting := false
		for _, r := range runs {
			if r.Status == "active" {
				return false
			}
			waiting = waiting || r.Status == blocked
		}
		return waiting
	}, logs)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("keep serve stopped with %v\n%s", waitErr, logs.String())
		}
	case <-time.After(testbin.Patience()):
		t.Fatalf("keep serve did not stop on SIGTERM\n%s", logs.String())
	}
	spans := col.Spans()
	traced := map[string]bool{}
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "run ") {
			traced[s.Attrs["keep.run.id"]] = true
		}
	}
	for _, r := range runs {
		if !traced[r.ID] {
			t.Errorf("run %s (%s %s) has no span after keep serve stopped\n%s", r.ID, r.Handler, r.Status, logs.String())
		}
	}
}

func newCollector(t *testing.T, status int) *testotlp.Collector {
	c := testotlp.New(status)
	t.Cleanup(c.Close)
	return c
}

// The collector's token may be one of keep's secrets ({secret:NAME}, set
// with keep secret set): it reaches the collector and nowhere else. A
// ${VAR} keep's environment does not set stops keep at start, saying which.
func TestTheCollectorsTokenFromKeepsSecrets(t *testing.T) {
	t.Parallel()
	col := newCollector(t, http.StatusOK)
	dir, sink, _ := setup(t, fmt.Sprintf("[otel]\nendpoint = %q\nheaders = { Authorization = \"Bearer {secret:otel_token}\" }\n", col.URL))
	set := exec.Command(keepBin, "--data", filepath.Join(dir, "data"), "--config", filepath.Join(dir, "keep.toml"), "secret", "set", "otel_token")
	set.Stdin = strings.NewReader("s3cret-of-the-collector")
	if out, err := set.CombinedOutput(); err != nil {
		t.Fatalf("keep secret set: %v\n%s", err, out)
	}
	out, code := keep(t, dir, nil, "run", "traced.js")
	if code != 0 || strings.Contains(out, "s3cret-of-the-collector") {
		t.Fatalf("keep run exited %d\n%s", code, out)
	}
	if auth := col.Auth(); len(auth) == 0 || auth[0] != "Bearer s3cret-of-the-collector" {
		t.Errorf("the collector got Authorization %q", auth)
	}
	if n := len(sink.Writes()); n != 3 {
		t.Errorf("writes at the sink: %d", n)
	}

	dir, sink, _ = setup(t, fmt.Sprintf("[otel]\nendpoint = %q\nheaders = { Authorization = \"Bearer ${KEEP_TEST_UNSET_OTEL_TOKEN}\" }\n", col.URL))
	out, code = keep(t, dir, nil, "run", "traced.js")
	want := "keep.toml [otel] headers: Authorization uses ${KEEP_TEST_UNSET_OTEL_TOKEN}, which keep's environment does not set"
	if code == 0 || !strings.Contains(out, want) {
		t.Errorf("keep run with an unset ${VAR} exited %d, want an error saying %q:\n%s", code, want, out)
	}
	if n := len(sink.Writes()); n != 0 {
		t.Errorf("writes at the sink: %d (keep must not start)", n)
	}
}
