package crash

import (
	"context"
	"github.com/keep-run/keep/internal/testbin"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqlite"
	"github.com/keep-run/keep/internal/testsink"
)

const spinScript = `export default Keep.workflow({
  name: "spin",
  topics: { "job": {} },
  producers: { p: { publishes: ["job"], schedule: { interval: "1h" }, handler: async (ctx) => {
    Array.prototype.indexOf.call({ length: 2 ** 53 - 1 }, 1)
  } } },
})`

// children lists the pids whose parent is pid.
func children(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// spinning reports whether one of the processes has used ticks (1/100 s)
// of CPU: a handler is in its loop.
func spinning(procs []int, ticks int) bool {
	for _, w := range procs {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(w), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 13 {
			ut, _ := strconv.Atoi(f[11])
			st, _ := strconv.Atoi(f[12])
			if ut+st >= ticks {
				return true
			}
		}
	}
	return false
}

// onWorkers runs keep serve's handlers in sandbox worker processes (the
// sandbox = "worker" path): these tests watch the worker processes
// themselves, which the default sandbox (wasm, in keep's process) has none of.
const onWorkers = "KEEP_SANDBOX=worker"

func spinSetup(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "wf.js"), []byte(spinScript), 0o644); err != nil {
		t.Fatal(err)
	}
	// A time limit far away: only the stop (or the kill) can end the spin.
	if err := os.WriteFile(filepath.Join(dir, "keep.toml"), []byte("[policy]\nhandler_timeout = \"1h\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(keepBin, "deploy", "--grant", "--data", filepath.Join(dir, "data"), filepath.Join(dir, "wf.js")).CombinedOutput(); err != nil {
		t.Fatalf("deploy: %v\n%s", err, out)
	}
	return dir
}

// Issue 11 #3: a handler spinning in a native loop (QuickJS never checks
// its interrupt there) does not keep keep serve from stopping on SIGTERM,
// and its run is recovered at the next start.
func TestSIGTERMStopsAHandlerSpinningInANativeLoop(t *testing.T) {
	t.Parallel()
	dir := spinSetup(t)
	p := serve(t, dir, onWorkers)
	var workers []int
	testbin.WaitFor(t, "a handler to start spinning in a sandbox worker", func() bool {
		workers = children(p.cmd.Process.Pid)
		return spinning(workers, 50)
	})
	stopWhileSpinning(t, dir, p)
	for _, w := range workers {
		testbin.WaitFor(t, "the sandbox worker to be gone", func() bool { return !alive(w) })
	}
}

// The same in the default sandbox (wasm, in keep's own process): keep
// serve's own CPU passing 5 s (far more than its start and the
// interpreter's compilation take) is the handler in its native loop.
func TestSIGTERMStopsAWasmHandlerSpinningInANativeLoop(t *testing.T) {
	t.Parallel()
	dir := spinSetup(t)
	p := serve(t, dir, "KEEP_SANDBOX=wasm")
	testbin.WaitFor(t, "a handler to spin in keep serve's own process", func() bool {
		return spinning([]int{p.cmd.Process.Pid}, 500)
	})
	stopWhileSpinning(t, dir, p)
}

// stopWhileSpinning sends keep serve SIGTERM while its handler spins: it
// stops, and nothing is recorded as failed.
func stopWhileSpinning(t *testing.T, dir string, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Bounded far below the 1 h time limit; no race with the machine's speed.
	if !p.exited(2 * time.Minute) {
		t.Fatalf("keep serve did not stop on SIGTERM while a handler spun\n%s", p.logs.String())
	}
	// Nothing is recorded as failed: the stop is not the script's fault, and
	// the next start runs the producer again.
	st, err := sqlite.Open(filepath.Join(dir, "data", "keep.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.View(context.Background(), func(tx store.Tx) error {
		runs, err := tx.RunList("spin", 0)
		for _, r := range runs {
			if r.Status != kt.StatusActive {
				t.Errorf("the stopped run was recorded as %s (%s)", r.Status, r.ErrorMessage)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// After kill -9 of keep, a worker spinning in a native loop does not spin on
// as an orphan: it notices it lost its parent and exits.
func TestAWorkerDoesNotOutliveAKilledKeep(t *testing.T) {
	t.Parallel()
	dir := spinSetup(t)
	p := serve(t, dir, onWorkers)
	var workers []int
	testbin.WaitFor(t, "a handler to start spinning in a sandbox worker", func() bool {
		workers = children(p.cmd.Process.Pid)
		return spinning(workers, 50)
	})
	p.kill()
	for _, w := range workers {
		testbin.WaitFor(t, "the orphaned sandbox worker to exit", func() bool { return !alive(w) })
	}
}

// Issue 11 #15: a WAL deleted after a kill -9 took the last transactions
// with it; keep refuses to run on what is left instead of sending writes
// again that the lost ledger recorded.
func TestADeletedWALIsDetected(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	dir := setup(t, sink, true)
	p := serve(t, dir)
	testbin.WaitFor(t, "the write to be applied", func() bool { return committed(read(t, dir)) })
	p.kill()
	wal := filepath.Join(dir, "data", "keep.db-wal")
	if _, err := os.Stat(wal); err != nil {
		t.Fatalf("no WAL after kill -9: %v", err)
	}
	if err := os.Remove(wal); err != nil {
		t.Fatal(err)
	}
	p2 := serve(t, dir)
	if !p2.exited(60 * time.Second) {
		t.Fatal("keep serve runs on a database whose WAL was deleted")
	}
	if !strings.Contains(p2.logs.String(), "the last ones are lost") {
		t.Fatalf("keep serve did not say why it stopped (%v):\n%s", p2.cmd.ProcessState, p2.logs.String())
	}
	if sink.Requests() != 1 {
		t.Fatalf("requests at the sink: %d", sink.Requests())
	}
}
