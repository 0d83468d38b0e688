package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/testsink"
)

type result struct {
	code     int
	out, err string
}

func keep(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(args, &out, &errb)
	return result{code, out.String(), errb.String()}
}

// sinkConfig writes dir/keep.toml allowing the sink (keep refuses loopback
// addresses a keep.toml does not allow) and returns its path.
func sinkConfig(t *testing.T, dir string, sink *testsink.Sink) string {
	t.Helper()
	cfg := filepath.Join(dir, "keep.toml")
	if err := os.WriteFile(cfg, []byte(sink.AllowTOML()), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// quickstartOrders are the tests' own three orders: what a user drops into
// examples/quickstart/incoming/ (as the README suggests) must not change
// what the tests see (issue 12).
var quickstartOrders = map[string]string{
	"order-1001.json": `{ "id": 1001, "customer": "alice@example.com", "items": [ { "sku": "MUG-BLUE", "qty": 2, "price": 12.5 } ] }`,
	"order-1002.json": `{ "id": 1002, "customer": "bob@example.com", "items": [ { "sku": "TEA-GREEN", "qty": 1, "price": 8 }, { "sku": "CUP", "qty": 4, "price": 3.25 } ] }`,
	"order-1003.json": `{ "id": 1003, "customer": "carol@example.com", "items": [ { "sku": "POT-CAST", "qty": 1, "price": 49 } ] }`,
}

// quickstart sets up the example's script in a temp dir with the tests'
// own orders, so its out/ stays there.
func quickstart(t *testing.T) (dir, data string) {
	t.Helper()
	dir = t.TempDir()
	src, err := os.ReadFile("../../examples/quickstart/workflow.js")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "incoming"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "workflow.js"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, order := range quickstartOrders {
		if err := os.WriteFile(filepath.Join(dir, "incoming", name), []byte(order), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, filepath.Join(dir, "data")
}

func TestQuickstartRunsAndIsIdempotent(t *testing.T) {
	t.Parallel()
	dir, data := quickstart(t)
	r := keep(t, "run", "--data", data, filepath.Join(dir, "workflow.js"))
	if r.code != 0 || !strings.Contains(r.out, "idle") || strings.Count(r.out, "applied") != 3 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	files, _ := os.ReadDir(filepath.Join(dir, "out"))
	if len(files) != 3 {
		t.Fatalf("out files %d", len(files))
	}
	// Running again changes nothing.
	r = keep(t, "run", "--data", data, "--json", filepath.Join(dir, "workflow.js"))
	var got struct {
		Workflow struct{ Name, Version string }
		Inputs   []map[string]any
		Outputs  []map[string]any
		Runs     []map[string]any
		Blocked  []map[string]any
	}
	if err := json.Unmarshal([]byte(r.out), &got); err != nil || r.code != 0 {
		t.Fatalf("json: %v exit %d %s", err, r.code, r.out)
	}
	if got.Workflow.Name != "quickstart-orders" || len(got.Inputs) != 3 || len(got.Outputs) != 3 || len(got.Blocked) != 0 {
		t.Fatalf("%+v", got)
	}
	for _, f := range []string{"id", "source", "type", "externalId", "title", "status", "attempt", "createdAt"} {
		if _, ok := got.Inputs[0][f]; !ok {
			t.Errorf("inputs lack %q", f)
		}
	}
	for _, f := range []string{"mutationId", "runId", "tool", "method", "status", "inputIds", "result", "error", "resolvedBy", "createdAt"} {
		if _, ok := got.Outputs[0][f]; !ok {
			t.Errorf("outputs lack %q", f)
		}
	}
	for _, f := range []string{"id", "handler", "handlerType", "phase", "status", "retryOf", "error", "createdAt"} {
		if _, ok := got.Runs[0][f]; !ok {
			t.Errorf("runs lack %q", f)
		}
	}
	r = keep(t, "status", "--data", data, "--json")
	var st []map[string]any
	if err := json.Unmarshal([]byte(r.out), &st); err != nil || len(st) != 1 {
		t.Fatalf("status %s", r.out)
	}
	for _, f := range []string{"name", "version", "status", "blocked", "blockedRunId", "pendingEvents"} {
		if _, ok := st[0][f]; !ok {
			t.Errorf("status lacks %q", f)
		}
	}
	if st[0]["status"] != "idle" {
		t.Fatalf("status %v", st[0])
	}
	// run-now + a new order: one more output, nothing repeated.
	os.WriteFile(filepath.Join(dir, "incoming", "order-2000.json"), []byte(`{"id":2000,"customer":"dan@example.com","items":[{"qty":1,"price":1}]}`), 0o644)
	if r := keep(t, "run-now", "--data", data, "quickstart-orders"); r.code != 0 {
		t.Fatalf("run-now: %d %s", r.code, r.err)
	}
	r = keep(t, "run", "--data", data, filepath.Join(dir, "workflow.js"))
	if r.code != 0 || strings.Count(r.out, "applied") != 4 {
		t.Fatalf("after a new order: %s", r.out)
	}
	// keep run alone is the development loop: the producer runs at its
	// start although it is not due, and keep run says when it is (issue 12 #2).
	os.WriteFile(filepath.Join(dir, "incoming", "order-2001.json"), []byte(`{"id":2001,"customer":"eve@example.com","items":[{"qty":1,"price":1}]}`), 0o644)
	r = keep(t, "run", "--data", data, filepath.Join(dir, "workflow.js"))
	if r.code != 0 || strings.Count(r.out, "applied") != 5 || !strings.Contains(r.out, "next: producer pollOrders at ") {
		t.Fatalf("keep run after another new order: %s", r.out)
	}
	if out, _ := os.ReadDir(filepath.Join(dir, "out")); len(out) != 5 {
		t.Fatalf("%d confirmations, want 5", len(out))
	}
}

func TestValidateReportsErrorsWithExit2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.js")
	os.WriteFile(bad, []byte("export default Keep.workflow({ name: \"x\", topics: {},\n  producers: { p: { publishes: [\"nope\"], schedule: { interval: \"5 min\" }, handler: async () => {} } } })\n"), 0o644)
	r := keep(t, "validate", bad)
	if r.code != 2 || !strings.Contains(r.out, `invalid interval "5 min"`) || !strings.Contains(r.out, "bad.js:2: error: producers.p: ") || !strings.Contains(r.out, `topic "nope"`) {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	syntax := filepath.Join(dir, "syntax.js")
	os.WriteFile(syntax, []byte("export default Keep.workflow({\n  name: 'x',,\n})"), 0o644)
	r = keep(t, "validate", syntax)
	if r.code != 2 || !strings.Contains(r.err, "syntax.js:2:") {
		t.Fatalf("exit %d %s %s", r.code, r.out, r.err)
	}
	// --json is always one JSON document: a syntax error and a missing
	// file included (issue 12).
	for _, f := range []string{syntax, filepath.Join(dir, "missing.js")} {
		r = keep(t, "validate", "--json", f)
		var v struct {
			Valid    bool
			Problems []struct {
				Severity, Message string
				Line              int
			}
		}
		if err := json.Unmarshal([]byte(r.out), &v); err != nil || v.Valid || len(v.Problems) != 1 || v.Problems[0].Severity != "error" {
			t.Fatalf("validate --json %s: exit %d, %v\n%s", f, r.code, err, r.out)
		}
		if f == syntax && (v.Problems[0].Line != 2 || !strings.Contains(v.Problems[0].Message, "syntax error")) {
			t.Fatalf("the syntax error's problem: %+v", v.Problems[0])
		}
	}
	// deploy refuses too, and nothing is stored.
	r = keep(t, "deploy", "--grant", "--data", filepath.Join(dir, "data"), bad)
	if r.code != 2 || !strings.Contains(r.err, "nothing was deployed") {
		t.Fatalf("deploy: %d %s", r.code, r.err)
	}
	if r := keep(t, "status", "--data", filepath.Join(dir, "data"), "--json"); r.out != "[]\n" {
		t.Fatalf("something was stored: %q %s", r.out, r.err)
	}
	r = keep(t, "validate", filepath.Join(dir, "missing.js"))
	if r.code != 1 || !strings.Contains(r.err, "missing.js") {
		t.Fatalf("missing file: %d %s", r.code, r.err)
	}
}

func TestBlockedRunExits3AndIsResolvedFromTheCLI(t *testing.T) {
	t.Parallel()
	sink, dir, data, r := blockedHook(t, `, headers: { Authorization: "Bearer planted-secret-123" }`)
	if r.code != 3 || !strings.Contains(r.out, "BLOCKED") || !strings.Contains(r.out, "outcome unknown") || !strings.Contains(r.out, "--didnt-happen") || !strings.Contains(r.out, "Job a") {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if strings.Contains(r.out+r.err, "planted-secret-123") {
		t.Fatal("a credential header was printed")
	}
	var st []struct {
		Status       string
		Blocked      bool
		BlockedRunID string
	}
	json.Unmarshal([]byte(keep(t, "status", "--data", data, "--json").out), &st)
	if len(st) != 1 || !st[0].Blocked || st[0].Status != "blocked" {
		t.Fatalf("status %+v", st)
	}
	runID := st[0].BlockedRunID
	show := keep(t, "show", "run", "--data", data, runID)
	if show.code != 0 || !strings.Contains(show.out, "TRACE") || !strings.Contains(show.out, "in_flight") || strings.Contains(show.out, "planted-secret-123") {
		t.Fatalf("show run: %s %s", show.out, show.err)
	}
	if r := keep(t, "resolve", "--data", data, runID, "--try-again"); r.code == 0 || !strings.Contains(r.err, "no reconcile") {
		t.Fatalf("try-again without reconcile: %d %s", r.code, r.err)
	}
	if r := keep(t, "resolve", "--data", data, runID); r.code != exitUsageCode {
		t.Fatalf("resolve without a choice: %d %s", r.code, r.err)
	}
	if r := keep(t, "resolve", "--data", data, "no-such-run", "--skip"); r.code != 1 || !strings.Contains(r.err, `there is no run "no-such-run"`) {
		t.Fatalf("unknown run: %d %s", r.code, r.err)
	}
	// Without keep serve the decision is carried out at once, not at the
	// next keep run (issue 12 #6).
	if r := keep(t, "resolve", "--data", data, runID, "--skip"); r.code != 0 || !strings.Contains(r.out, "will be skipped") || !strings.Contains(r.out, "carried out; hook is idle") {
		t.Fatalf("skip: %d %s %s", r.code, r.out, r.err)
	}
	if r := keep(t, "inputs", "--data", data, "hook"); !strings.Contains(r.out, "skipped") {
		t.Fatalf("after skip, the input: %s", r.out)
	}
	r = keep(t, "run", "--data", data, "--config", filepath.Join(dir, "keep.toml"), filepath.Join(dir, "wf.js"))
	if r.code != 0 || !strings.Contains(r.out, "skipped") {
		t.Fatalf("after skip: %d\n%s\n%s", r.code, r.out, r.err)
	}
	if r := keep(t, "resolve", "--data", data, runID, "--skip"); r.code != 1 || !strings.Contains(r.err, "not blocked") {
		t.Fatalf("resolve a finished run: %d %s", r.code, r.err)
	}
	if r := keep(t, "inputs", "--data", data, "nope"); r.code != 1 || !strings.Contains(r.err, `there is no workflow "nope"`) {
		t.Fatalf("unknown workflow: %d %s", r.code, r.err)
	}
	if len(sink.Writes()) != 1 {
		t.Fatalf("writes %d", len(sink.Writes()))
	}
}

func TestRunRefusesWhileServeOwnsTheData(t *testing.T) {
	t.Parallel()
	dir, data := quickstart(t)
	r := keep(t, "run", "--data", data, filepath.Join(dir, "workflow.js"))
	if r.code != 0 {
		t.Fatal(r.err)
	}
	k, err := daemon.Open(daemon.Options{DataDir: data, FilesRoot: dir})
	if err != nil {
		t.Fatal(err)
	}
	r = keep(t, "run", "--data", data, filepath.Join(dir, "workflow.js"))
	if r.code != 1 || !strings.Contains(r.err, "another keep process") {
		t.Fatalf("run beside an engine: %d %s", r.code, r.err)
	}
	// Reads and decisions work beside it.
	if r := keep(t, "--data", data, "status"); r.code != 0 || !strings.Contains(r.out, "quickstart-orders") {
		t.Fatalf("status: %s", r.err)
	}
	if r := keep(t, "--data", data, "pause", "quickstart-orders"); r.code != 0 {
		t.Fatalf("pause: %s", r.err)
	}
	if r := keep(t, "--data", data, "status", "--json"); !strings.Contains(r.out, `"paused"`) {
		t.Fatalf("status after pause: %s", r.out)
	}
	k.Close()
	if r := keep(t, "status", "--data", filepath.Join(dir, "empty")); r.code != 1 || !strings.Contains(r.err, "no keep data") {
		t.Fatalf("no data: %d %s", r.code, r.err)
	}
	if r := keep(t, "bogus"); r.code != exitUsageCode {
		t.Fatalf("unknown command: %d", r.code)
	}
	if r := keep(t, "run", "--data", data, "--config", filepath.Join(dir, "missing.toml"), filepath.Join(dir, "workflow.js")); r.code != 1 || !strings.Contains(r.err, "missing.toml") {
		t.Fatalf("missing config: %d %s", r.code, r.err)
	}
}

// keep run serves no webhook: for a workflow fed by one it says where the
// webhook is served and which secret it needs, not only "idle, 0 runs".
func TestRunSaysWhereWebhooksAreServed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := filepath.Join(dir, "hooks.js")
	os.WriteFile(f, []byte(`export default Keep.workflow({ name: "pushes", topics: { push: {} },
  webhooks: { github: { publishes: ["push"], verify: { hmac: { header: "X-Hub-Signature-256", prefix: "sha256=", secret: "GH_SECRET" } },
    handler: async (ctx, req) => {} } } })`), 0o644)
	r := keep(t, "run", "--data", filepath.Join(dir, "data"), f)
	want := "webhook: github takes POST /hooks/pushes/github under keep serve --webhooks-addr ADDR, verified with the secret GH_SECRET (keep secret set GH_SECRET); keep run serves no webhook"
	if r.code != 0 || !strings.Contains(r.out, want) {
		t.Fatalf("keep run: exit %d\n%s%s\nwant %q", r.code, r.out, r.err, want)
	}
}

// blockedHook runs workflow "hook" once with keep run: its producer
// registers input "Job a", its consumer's write to a sink loses its
// answer (the run blocks on it). extra ends the write's options; sink
// is the one written to.
func blockedHook(t *testing.T, extra string) (sink *testsink.Sink, dir, data string, r result) {
	t.Helper()
	sink = testsink.New()
	t.Cleanup(sink.Close)
	sink.Queue(testsink.TimeoutAfter)
	dir = t.TempDir()
	data = filepath.Join(dir, "data")
	src := `export default Keep.workflow({ name: "hook", topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job a" })
    await ctx.publish("job", { messageId: "a", inputId, payload: {} }) } } },
  consumers: { c: Keep.consumer({ subscribe: ["job"],
    async prepare(ctx) { const [e] = await ctx.peek("job"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "job", ids: [e.messageId] }], data: {} } },
    async mutate(ctx) { await ctx.http.request({ method: "POST", url: "` + sink.URL + `/write/a", json: {}, timeoutMs: 200` + extra + ` }) } }) } })`
	os.WriteFile(filepath.Join(dir, "wf.js"), []byte(src), 0o644)
	return sink, dir, data, keep(t, "run", "--data", data, "--config", sinkConfig(t, dir, sink), filepath.Join(dir, "wf.js"))
}
