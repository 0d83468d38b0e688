package engine_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/daemon"
	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testsink"
)

func TestTwoPeopleResolvingOneRunAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.sink.Queue(testsink.TimeoutAfter)
	wf := e.deploy(hookScript("", ""))
	e.settle()
	r := e.open(wf)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			what := kt.ResolveSkip
			if i%2 == 1 {
				what = kt.ResolveDidntHappen
			}
			_, err := resolve(e.ctx(), e.k.Store, r.ID, what, time.Now())
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ok++
			} else if strings.Contains(err.Error(), "already has a decision") || strings.Contains(err.Error(), "applies to a mutation whose outcome is unknown") {
				refused++
			} else {
				t.Errorf("unexpected error: %v", err)
			}
		}(i)
	}
	wg.Wait()
	if ok != 1 || refused != 7 {
		t.Fatalf("%d decisions accepted, %d refused; want exactly one accepted", ok, refused)
	}
	e.settle()
	e.noOpenRun(wf)
}

// tmpfs mounts a small tmpfs for a test, or skips when this machine cannot.
func tmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes a file until the disk is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			return
		}
	}
}

// TestFullDataDirNeverStartsAnUnrecordedCall fills the data directory's disk
// between a person's approval and the call: keep must not send anything it
// cannot record first, and must carry on once there is room again.
func TestFullDataDirNeverStartsAnUnrecordedCall(t *testing.T) {
	t.Parallel()
	mnt := tmpfs(t, "8M")
	sink := testsink.New()
	defer sink.Close()
	cfg := filepath.Join(t.TempDir(), "keep.toml")
	if err := os.WriteFile(cfg, []byte(sink.AllowTOML()), 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := daemon.Open(daemon.Options{DataDir: filepath.Join(mnt, "data"), ConfigFile: cfg, FilesRoot: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	e := &env{t: t, dir: mnt, k: k, sink: sink}
	wf := e.deploy(hookScript(`requireApproval: true,`, withProbe))
	e.settle()
	r := e.open(wf)
	e.resolve(r.ID, kt.ResolveApprove)

	fill(t, filepath.Join(mnt, "filler"))
	if err := k.Scheduler.RunUntilIdle(e.ctx()); err != nil {
		t.Fatal(err)
	}
	errs := k.Scheduler.Errors()
	if len(errs) == 0 || !strings.Contains(strings.ToLower(errs[0].Error()), "full") {
		t.Fatalf("want a clear disk-full error, got %v", errs)
	}
	// keep status, the API and the page must not say idle (issue 11 #15).
	srv := httptest.NewServer(k.HTTPHandler(""))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"ok":false`) || !strings.Contains(strings.ToLower(string(body)), "full") {
		t.Fatalf("health while the disk is full: %s", body)
	}
	page, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	html, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if !strings.Contains(string(html), "cannot go on by itself") {
		t.Fatalf("the page does not show the problem")
	}
	if sink.Requests() != 0 {
		t.Fatalf("keep sent %d requests it could not record", sink.Requests())
	}
	os.Remove(filepath.Join(mnt, "filler"))
	time.Sleep(1100 * time.Millisecond) // the scheduler backs off a failing workflow for a second
	if err := k.Scheduler.RunUntilIdle(e.ctx()); err != nil {
		t.Fatal(err)
	}
	e.noOpenRun(wf)
	if n := len(sink.Writes()); n != 1 || sink.Requests() != 1 {
		t.Fatalf("writes %d requests %d, want 1", n, sink.Requests())
	}
}

// TestFullDiskGivesAClearError starts keep on a data directory with no room.
func TestFullDiskGivesAClearError(t *testing.T) {
	t.Parallel()
	mnt := tmpfs(t, "256k")
	fill(t, filepath.Join(mnt, "filler"))
	_, err := daemon.Open(daemon.Options{DataDir: filepath.Join(mnt, "data"), FilesRoot: t.TempDir()})
	if err == nil {
		t.Fatal("keep opened a data directory on a full disk without an error")
	}
	msg := strings.ToLower(err.Error())
	if !strings.Contains(msg, "full") && !strings.Contains(msg, "space") {
		t.Fatalf("the error does not say the disk is full: %v", err)
	}
	_ = kt.ErrNotFound
}

// A huge thrown message is kept cut, saying how long it was (issue 11 #13),
// and a credential in it is masked (issue 11 #7).
func TestHugeErrorsAreCutAndSecretsMasked(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, roomyPolicy) // the time limit is not what is tested
	wf := e.deploy(`export default Keep.workflow({ name: "huge", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx) => {
    throw new Error("see https://u:hunter2-secret@h.example/x " + "x".repeat(2 << 20))
  } } } })`)
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusFailedLogic {
		t.Fatalf("run %s: %.200s", r.Status, r.ErrorMessage)
	}
	if len(r.ErrorMessage) > 5000 || !strings.Contains(r.ErrorMessage, "cut:") {
		t.Fatalf("stored error is %d bytes: %.300s", len(r.ErrorMessage), r.ErrorMessage)
	}
	if strings.Contains(r.ErrorMessage, "hunter2-secret") || strings.Contains(string(r.Trace), "hunter2-secret") {
		t.Fatal("the credential in the thrown message was stored")
	}
	if len(r.Trace) > 64<<10 {
		t.Fatalf("trace is %d bytes", len(r.Trace))
	}
}

// Chapter 06's flat event ({ messageId, subject, from }) is refused by name
// instead of storing payload: null (issue 10 #9).
func TestFlatPublishIsRefusedByName(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(`export default Keep.workflow({ name: "flat", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "x", title: "X" })
    await ctx.publish("a", { messageId: "x", inputId, subject: "Hi", from: "a@b" })
  } } } })`)
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, "unknown field(s) from, subject") || !strings.Contains(r.ErrorMessage, "payload") {
		t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
	}
}

// A run's publishes are bounded (issue 11 #9): the run fails with a clear
// message and nothing of it is committed.
func TestPublishesPerRunAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, roomyPolicy) // the time limit is not what is tested
	wf := e.deploy(`export default Keep.workflow({ name: "flood", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "x", title: "X" })
    for (let i = 0; i <= ` + fmt.Sprint(engine.MaxPublishesPerRun) + `; i++) await ctx.publish("a", { messageId: "m" + i, inputId, payload: i })
  } } } })`)
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, "at most 10000 events") {
		t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
	}
	var n int
	_ = e.k.Store.View(e.ctx(), func(tx storeTx) error {
		evs, err := tx.EventsPending(wf, "a", 10)
		n = len(evs)
		return err
	})
	if n != 0 {
		t.Fatalf("%d events of the failed run were committed", n)
	}
}

// A producer's publish is held to the bound the event API holds a posted
// payload to (kt.MaxPayloadDepth, issue 41): at the bound its consumer
// passes the payload on through prepare and writes; one level deeper the
// producer's run fails saying so, and nothing of it is committed — before,
// it was taken and every run of its consumer failed instead, far from the
// cause.
func TestAPublishDeeperThanAConsumerCanPassOnIsRefused(t *testing.T) {
	t.Parallel()
	script := func(name string, depth int) string {
		return `export default Keep.workflow({ name: "` + name + `", topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "x", title: "X" })
    let v = 0; for (let i = 0; i < ` + fmt.Sprint(depth) + `; i++) v = { v }
    await ctx.publish("a", { messageId: "deep", inputId, payload: v })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"],
    async prepare(ctx) { const [e] = await ctx.peek("a"); if (!e) return { reservations: [] }; return { reservations: [{ topic: "a", ids: [e.messageId] }], data: e.payload } },
    async mutate(ctx, p) { await ctx.files.write({ path: "` + name + `/out", content: "passed on" }) },
  }) } })`
	}
	e := newEnv(t)
	at := e.deploy(script("at", kt.MaxPayloadDepth))
	over := e.deploy(script("over", kt.MaxPayloadDepth+1))
	e.settle()
	if n := len(e.outputs(at)); n != 1 {
		t.Fatalf("a payload %d levels deep (the bound): %d outputs, want its consumer's one write", kt.MaxPayloadDepth, n)
	}
	r := e.open(over)
	want := fmt.Sprintf("nests %d levels deep, more than keep's bound of %d", kt.MaxPayloadDepth+1, kt.MaxPayloadDepth)
	if r.Status != kt.StatusFailedLogic || !strings.Contains(r.ErrorMessage, want) {
		t.Fatalf("the producer's run: %s: %s; want failed:logic saying %q", r.Status, r.ErrorMessage, want)
	}
	var n int
	if err := e.k.Store.View(e.ctx(), func(tx storeTx) error {
		evs, err := tx.EventsPending(over, "a", 10)
		n = len(evs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n != 0 || len(e.outputs(over)) != 0 {
		t.Fatalf("%d events and %d outputs of the refused publish", n, len(e.outputs(over)))
	}
}
