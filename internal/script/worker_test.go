package script

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

func nativeLoopScript(loop string) string {
	return `export default Keep.workflow({
  name: "spin",
  topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "5m" }, handler: async (ctx, state) => {
    ` + loop + `
    return {}
  } } },
})`
}

// Issue 11 #3: built-ins that loop natively never check QuickJS's
// interrupt. The host stops them anyway, at the time limit, by killing the
// sandbox process; the run gets a logic error that says what happened, and
// the next invocation runs in a fresh worker.
func TestNativeLoopsAreStoppedAtTheTimeLimit(t *testing.T) {
	t.Parallel()
	for _, loop := range []string{
		`Array.prototype.indexOf.call({ length: 2 ** 53 - 1 }, 1)`,
		`Array.prototype.includes.call({ length: 2 ** 53 - 1 }, 1)`,
		`Array.prototype.lastIndexOf.call({ length: 2 ** 53 - 1 }, 1)`,
		`Array.prototype.every.call({ length: 2 ** 53 - 1 }, () => true)`,
	} {
		t.Run(loop[:strings.Index(loop, ".call")], func(t *testing.T) {
			t.Parallel()
			p := compile(t, nativeLoopScript(loop))
			defer p.Release()
			done := make(chan error, 1)
			go func() {
				_, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
					Tools: map[string][]string{}, Limits: Limits{Timeout: 300 * time.Millisecond, MemoryLimit: 32 << 20}, Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil }})
				done <- err
			}()
			// No wall-clock assertion: the call must simply return, however
			// busy the machine is (it never did before workers).
			err := <-done
			if err == nil || kt.ClassOf(err) != kt.ClassLogic || !strings.Contains(err.Error(), "time limit of 300ms") {
				t.Fatalf("want a logic error about the time limit, got %v", err)
			}
		})
	}
}

// A script whose top level loops natively cannot hang a deploy either.
func TestATopLevelNativeLoopFailsTheLoad(t *testing.T) {
	t.Parallel()
	_, err := Compile("wf.js", `Array.prototype.indexOf.call({ length: 2 ** 53 - 1 }, 1)
`+nativeLoopScript(""))
	if err == nil || !strings.Contains(err.Error(), "while loading the script") || !strings.Contains(err.Error(), "time limit") {
		t.Fatalf("want a load error about the time limit, got %v", err)
	}
}

// Host calls cross the process boundary: arguments, answers, the errors the
// host returns (the very same value) and the take-over of a terminal call.
func TestWorkerHostCalls(t *testing.T) {
	t.Parallel()
	p := compile(t, isolationScript(`
    const a = await ctx.files.read({ path: "x" })
    let caught = ""
    try { await ctx.files.read({ path: "fail" }) } catch (e) { caught = "caught" }
    return { a, caught }`))
	defer p.Release()
	sentinel := &kt.Error{Class: kt.ClassPrecondition, Message: "no such file: fail"}
	var mu sync.Mutex
	var calls []string
	o, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
		Tools: map[string][]string{"files": {"read"}}, Limits: Limits{Timeout: 5 * time.Second, MemoryLimit: 32 << 20},
		Host: func(m string, a json.RawMessage) (json.RawMessage, error) {
			mu.Lock()
			calls = append(calls, m+" "+string(a))
			mu.Unlock()
			if strings.Contains(string(a), "fail") {
				return nil, sentinel
			}
			return json.RawMessage(`{"content":"hello"}`), nil
		}})
	if err != sentinel {
		t.Fatalf("the host's own error must come back (it aborts the run even if caught): %v %s", err, o.Value)
	}
	if len(calls) != 2 || !strings.Contains(calls[0], `files.read {"path":"x"}`) {
		t.Fatalf("calls %q", calls)
	}
	ok := compile(t, isolationScript(`return await ctx.files.read({ path: "x" })`))
	defer ok.Release()
	o, err = ok.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
		Tools: map[string][]string{"files": {"read"}}, Limits: Limits{Timeout: 5 * time.Second, MemoryLimit: 32 << 20},
		Host: func(string, json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{"content":"hello"}`), nil
		}})
	if err != nil || string(o.Value) != `{"content":"hello"}` {
		t.Fatalf("%v %s", err, o.Value)
	}
	sus := compile(t, isolationScript(`await ctx.files.read({ path: "x" }); throw new Error("must not run")`))
	defer sus.Release()
	o, err = sus.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
		Tools: map[string][]string{"files": {"read"}}, Limits: Limits{Timeout: 5 * time.Second, MemoryLimit: 32 << 20},
		Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, ErrSuspend }})
	if err == nil || o.Suspended || !strings.Contains(err.Error(), "after its mutation call") {
		t.Fatalf("suspend, then a throw: %+v %v", o, err)
	}
}

// Issue 10 #11: a script that catches its out-of-memory error and returns
// success still fails, as out of memory.
func TestACaughtOutOfMemoryStillFailsTheRun(t *testing.T) {
	t.Parallel()
	p := compile(t, isolationScript(`
    let caught = false
    try { const a = []; for (;;) a.push("x".repeat(1 << 20) + Math.random()) } catch (e) { caught = true }
    return { caught }`))
	defer p.Release()
	o, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
		Tools: map[string][]string{}, Limits: Limits{Timeout: time.Minute, MemoryLimit: 32 << 20},
		Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil }})
	if err == nil || kt.ClassOf(err) != kt.ClassLogic || !strings.Contains(err.Error(), "out of memory") || !strings.Contains(err.Error(), "32 MiB") {
		t.Fatalf("want a logic error: out of memory (limit 32 MiB), got %v (returned %s)", err, o.Value)
	}
}

// Issue 40 #4: a worker inherits, at exec, the peak resident memory of the
// process that started it, and getrusage's peak never falls below it: in a
// keep larger than the worker plus its limit (keep run, keep serve), a
// script that caught its OOM and returned committed. Here the test process
// is made that large before it starts the worker; the caught OOM still
// ends the worker, as out of memory, with its memory limit named.
func TestACaughtOutOfMemoryFailsInAWorkerOfALargeProcess(t *testing.T) {
	big := make([]byte, 256<<20)
	for i := 0; i < len(big); i += 4096 {
		big[i] = 1
	}
	src := isolationScript(`
    let caught = false
    try { const a = []; for (;;) a.push("x".repeat(1 << 20) + Math.random()) } catch (e) { caught = true }
    return { caught }`)
	wk, _, err := startWorker(std, "wf.js", src, time.Minute, false)
	if err != nil {
		t.Fatal(err)
	}
	defer wk.kill()
	runtime.KeepAlive(big)
	inv := Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
		Tools: map[string][]string{}, Limits: Limits{Timeout: time.Minute, MemoryLimit: 32 << 20},
		Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil }}
	r := wk.invoke(inv, func(time.Duration) {})
	if r.healthy || r.err != nil {
		t.Fatalf("the worker returned %s (err %v): a caught out of memory passed as success", r.o.Value, r.err)
	}
	wk.kill()
	err = wk.deathError("producer p: handler", inv.Timeout, inv.MemoryLimit)
	if kt.ClassOf(err) != kt.ClassLogic || !strings.Contains(err.Error(), "memory limit of 32 MiB") {
		t.Fatalf("want a logic error naming the memory limit of 32 MiB, got %v", err)
	}
}

// Issue 25: memory is no longer polled; the kernel's peak of the worker's
// resident memory is read at host calls and at the end. A peak the script
// made and let go before it returned (below QuickJS's own backstop, so
// nothing threw) is out of memory all the same, and so is one reached
// before a host call that the script then waits on.
func TestAPeakOfMemoryGoneByTheEndStillFailsTheRun(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"before the end":     `{ const a = new Uint8Array(48 << 20); a.fill(1) } return { ok: true }`,
		"before a host call": `{ const a = new Uint8Array(48 << 20); a.fill(1) } await ctx.files.read({ path: "x" }); throw new Error("must not run")`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := compile(t, isolationScript(body))
			defer p.Release()
			o, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
				Tools: map[string][]string{"files": {"read"}}, Limits: Limits{Timeout: time.Minute, MemoryLimit: 32 << 20},
				Host: func(string, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"content":""}`), nil }})
			if err == nil || kt.ClassOf(err) != kt.ClassLogic || !strings.Contains(err.Error(), "out of memory") || !strings.Contains(err.Error(), "32 MiB") {
				t.Fatalf("want a logic error: out of memory (limit 32 MiB), got %v (returned %s)", err, o.Value)
			}
		})
	}
	// Within the limit, the same script returns.
	p := compile(t, isolationScript(`{ const a = new Uint8Array(8 << 20); a.fill(1) } return { ok: true }`))
	defer p.Release()
	o, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
		Tools: map[string][]string{}, Limits: Limits{Timeout: time.Minute, MemoryLimit: 32 << 20},
		Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil }})
	if err != nil || string(o.Value) != `{"ok":true}` {
		t.Fatalf("8 MiB under a 32 MiB limit: %v %s", err, o.Value)
	}
}

// A sandbox worker gets no environment but the Go runtime's: keep's own
// (KEEP_TOKEN, credentials) stays out of the process that runs scripts.
func TestWorkersDoNotInheritKeepsEnvironment(t *testing.T) {
	t.Setenv("KEEP_TOKEN", "planted-env-secret")
	wk, _, err := startWorker(std, "wf.js", isolationScript(`return {}`), time.Minute, false)
	if err != nil {
		t.Fatal(err)
	}
	defer wk.kill()
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", wk.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env), "planted-env-secret") || !strings.Contains(string(env), workerEnv+"=1") {
		t.Fatalf("worker environment: %q", env)
	}
}

// workersOnly runs t on sandbox workers, whatever the default: it tests
// what the worker protocol does (round trips, answers ahead, kills).
func workersOnly(t *testing.T) { t.Setenv(isolationEnv, SandboxWorker) }

// inWorkers tells whether invocations run in sandbox workers here.
func inWorkers() bool { return sandbox() == SandboxWorker }
