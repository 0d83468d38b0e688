package script

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// Why worker processes: QuickJS checks its interrupt only between bytecode
// instructions, so a built-in that loops natively — Array.prototype.indexOf
// over {length: 2**53-1}, includes, every, lastIndexOf — never sees the time
// limit: an attack kept one at 86 % CPU for ten minutes, deaf to SIGTERM,
// and it spun again after a restart (issue 11). A host can always stop a
// process. So every handler runs in a sandbox worker: a child process of
// keep itself (the same binary, recognised by workerEnv at start), one
// script version loaded, speaking length-prefixed JSON frames over its
// standard input and output. The host kills it at the deadline and starts a
// new one; a killed invocation fails its run as a logic error.
//
// Workers are pooled per Program (one script version of one workflow: never
// two, the rule the VM pool follows too), at most maxIdleWorkers in all.

const (
	// workerEnv marks a process started as a sandbox worker.
	workerEnv = "KEEP_SANDBOX_WORKER"
	// isolationEnv chooses where handlers run, over [policy] sandbox
	// (SetSandbox): "wasm", "worker", or "in-process" (keep's own process,
	// not isolated: for debugging and for measuring what isolation costs).
	isolationEnv = "KEEP_SANDBOX"
	// killGrace is how long past its time limit an invocation may take to
	// report the limit itself (an interrupted JavaScript loop does) before
	// its worker is killed (a native loop does not).
	killGrace = time.Second
	// maxIdleWorkers bounds the processes kept between invocations.
	maxIdleWorkers = 128
	// maxFrame bounds one frame: a handler's arguments and results are
	// 1 MiB each at most (SPEC §6); the rest is headroom.
	maxFrame = 64 << 20
)

func init() {
	if v := os.Getenv(workerEnv); v == "1" || v == "runs" {
		tuneWorker()
		os.Exit(serveWorker(os.Stdin, os.Stdout, v == "runs"))
	}
}

// tuneWorker fits the Go runtime to a worker's one thread of work: one
// invocation at a time, on one goroutine, with up to 128 workers beside
// keep on the same cores. With one P the scheduler has no idle
// processors to wake and spin looking for work at every pipe read (that
// spinning, times 32 busy workers, was 40 % of their CPU: issue 25). The
// worker's Go heap is small (frames and their JSON; QuickJS allocates
// outside it), so a collection at a larger multiple of it costs little
// memory and runs less often.
func tuneWorker() {
	runtime.GOMAXPROCS(1)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}

// InProcess reports whether handlers run in modernc's QuickJS in keep's own
// process, not isolated (KEEP_SANDBOX=in-process).
func InProcess() bool { return sandbox() == "in-process" }

// frame is every message between the host and a worker.
type frame struct {
	T string `json:"t"`
	// load
	File   string `json:"file,omitempty"`
	Source string `json:"source,omitempty"`
	// Known says the host knows the declaration already: the worker only
	// compiles the script and prepares the VM its invocations will use.
	Known bool `json:"known,omitempty"`
	// Bytecode is the script compiled by the host, sent with Known: the
	// worker then compiles nothing.
	Bytecode []byte `json:"bytecode,omitempty"`
	// invoke
	Kind   kt.HandlerType      `json:"kind,omitempty"`
	Name   string              `json:"name,omitempty"`
	Phase  string              `json:"phase,omitempty"`
	Args   []json.RawMessage   `json:"args,omitempty"`
	Tools  map[string][]string `json:"tools,omitempty"`
	Limits *Limits             `json:"limits,omitempty"`
	// host calls and their answers
	Method  string          `json:"method,omitempty"`
	NoReply bool            `json:"noReply,omitempty"`
	Value   json.RawMessage `json:"value,omitempty"`
	Suspend bool            `json:"suspend,omitempty"`
	// Answers (invoke) are host calls answered ahead (Invocation.Answers);
	// Answered (host) says the worker gave the script the answer with
	// that number (from 1) and did not wait for the host's.
	Answers  []Answer `json:"answers,omitempty"`
	Answered int      `json:"answered,omitempty"`
	// Writes (invoke) tell the calls the host takes over
	// (Invocation.Writes); TakenOver (host) says the worker took this
	// call for one and did not wait for the host's answer.
	Writes    map[string]*kt.ReadsBy `json:"writes,omitempty"`
	TakenOver bool                   `json:"takenOver,omitempty"`
	// SameTools and SameWrites (invoke) say this frame's Tools or Writes
	// are the last ones the worker was sent, which the frame leaves out:
	// they are the same for every invocation of a registry (about 1 KB
	// of names), and decoding them into maps at every phase was a tenth
	// of a busy worker's CPU (issue 25). See sentContext.
	SameTools  bool `json:"sameTools,omitempty"`
	SameWrites bool `json:"sameWrites,omitempty"`
	// Then (invoke) is the phase to run next in the same invocation
	// (Invocation.Then): its Args are the first phase's value, sent to
	// the host first in a frame "phase".
	Then *frame `json:"then,omitempty"`
	// done
	Suspended bool `json:"suspended,omitempty"`
	// Decl answers describe.
	Decl *Declaration `json:"decl,omitempty"`
	Err  *wireError   `json:"err,omitempty"`
}

// wireError carries an error across the pipe. Ref names an error a host
// call returned, so that the host can hand its caller the very error it
// returned (the engine branches on its types).
type wireError struct {
	Class   kt.ErrorClass `json:"class"`
	Message string        `json:"message"`
	Ref     int           `json:"ref,omitempty"`
	Syntax  *SyntaxError  `json:"syntax,omitempty"`
}

func (w *wireError) Error() string { return w.Message }

func toWire(err error) *wireError {
	if err == nil {
		return nil
	}
	var we *wireError
	if errors.As(err, &we) {
		return we
	}
	var se *SyntaxError
	if errors.As(err, &se) {
		return &wireError{Class: kt.ClassLogic, Message: se.Error(), Syntax: se}
	}
	var ke *kt.Error
	if errors.As(err, &ke) {
		return &wireError{Class: ke.Class, Message: ke.Error()}
	}
	return &wireError{Class: kt.ClassInternal, Message: err.Error()}
}

func (w *wireError) toError() error {
	if w.Syntax != nil {
		return w.Syntax
	}
	return &kt.Error{Class: w.Class, Message: w.Message}
}

// noReply lists the host calls whose answer is always "undefined" on
// success: the worker does not wait for them (a log line or a publish costs
// no round trip). A failing one ends the invocation from the host's side.
var noReply = map[string]bool{"log": true, "publish": true}

func writeFrame(w frameWriter, f frame) error {
	if err := bufferFrame(w, f); err != nil {
		return err
	}
	return w.Flush()
}

// bufferFrame writes a frame without flushing it.
func bufferFrame(w frameWriter, f frame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// frameWriter is where frames are written: keep's end of a worker's pipe,
// or in a worker its lockedWriter.
type frameWriter interface {
	io.Writer
	Flush() error
}

// lockedWriter is a worker's buffered output, which the invocation's
// goroutine writes and a timer may flush (see serveWorker): a frame sent
// without waiting (a log line, a publish, a call answered ahead or taken
// over) waits in the buffer for the next frame, and must not die there
// with a worker stopped in a native loop.
type lockedWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Flush()
}

func readFrame(r *bufio.Reader) (frame, error) {
	var f frame
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return f, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return f, fmt.Errorf("a sandbox frame of %d bytes is over the limit of %d", size, maxFrame)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return f, err
	}
	return f, json.Unmarshal(b, &f)
}

// ---------- the worker side ----------

// serveWorker is the main loop of a sandbox worker process: it loads one
// script version and runs the invocations the host sends, forwarding every
// call the script makes to the host. It returns the process exit code.
func serveWorker(in io.Reader, out io.Writer, forRuns bool) int {
	// A worker outlives a keep killed with -9 only until it notices: its
	// input closes (seen between invocations) or, in the middle of a native
	// loop that reads nothing, it is handed to another parent. (Pdeathsig
	// would follow the host's OS thread, not its process.)
	parent := os.Getppid()
	go func() {
		for range time.Tick(500 * time.Millisecond) {
			if os.Getppid() != parent {
				os.Exit(4)
			}
		}
	}()
	r, w := bufio.NewReaderSize(in, 64<<10), &lockedWriter{w: bufio.NewWriterSize(out, 64<<10)}
	mem := openMemoryWatch()
	mem.flush = w
	var prog *Program
	var received sentContext
	// A worker for runs makes its VM before it knows its script: as a
	// spare, long before (see spare).
	var blank *sandboxVM
	if forRuns {
		blank, _ = newSandboxVM(std, Limits{}, forHandlers)
	}
	for {
		f, err := readFrame(r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0
			}
			fmt.Fprintf(os.Stderr, "keep sandbox worker: %v\n", err)
			return 3
		}
		var reply frame
		switch f.T {
		case "load":
			var err error
			if prog, err = loadHere(f); err == nil && f.Known {
				err = prog.adopt(blank)
				blank = nil
			}
			reply = frame{T: "loaded", Err: toWire(err)}
			if err == nil {
				reply.Decl = &prog.Decl
			}
		case "invoke":
			if prog == nil {
				reply = frame{T: "done", Err: &wireError{Class: kt.ClassInternal, Message: "sandbox worker: invoke before load"}}
				break
			}
			err := received.fillIn(&f)
			if err == nil && f.Then != nil {
				err = received.fillIn(f.Then)
			}
			if err != nil {
				reply = frame{T: "done", Err: toWire(err)}
				break
			}
			o, err := invokeFrame(prog, f, r, w, mem)
			if f.Then != nil && goesOn(o, err) {
				// The next phase at once: keep is told this one's value
				// first, now (not with the next frame that goes): keep
				// kills a phase a grace past its own time limit, and a
				// next phase that spins natively sends nothing else.
				if err := writeFrame(w, frame{T: "phase", Value: o.Value}); err != nil {
					return 3
				}
				next := *f.Then
				next.Args = []json.RawMessage{o.Value}
				o, err = invokeFrame(prog, next, r, w, mem)
			}
			reply = frame{T: "done", Value: o.Value, Suspended: o.Suspended, Err: toWire(err)}
		default:
			reply = frame{T: "done", Err: &wireError{Class: kt.ClassInternal, Message: "sandbox worker: unknown frame " + f.T}}
		}
		if err := writeFrame(w, reply); err != nil {
			return 3
		}
		if f.T == "invoke" && prog != nil {
			prog.prewarm(std)
		}
	}
}

// invokeFrame runs the phase an invoke frame names.
func invokeFrame(prog *Program, f frame, r *bufio.Reader, w *lockedWriter, mem *memoryWatch) (Outcome, error) {
	inv := Invocation{Kind: f.Kind, Name: f.Name, Phase: f.Phase, Args: f.Args, Tools: f.Tools, Host: workerHost(r, w, mem, f.Answers, f.Writes)}
	if f.Limits != nil {
		inv.Limits = *f.Limits
	}
	inv.MemoryLimit = mem.start(inv.MemoryLimit)
	// At the time limit, what the script sent without waiting reaches
	// keep: in a native loop the interrupt never comes, and keep kills
	// this process a grace later (killGrace).
	var flushAtLimit *time.Timer
	if inv.Timeout > 0 {
		flushAtLimit = time.AfterFunc(inv.Timeout, func() { _ = w.Flush() })
	}
	o, err := prog.invokeHere(inv)
	if flushAtLimit != nil {
		flushAtLimit.Stop()
	}
	mem.check()
	return o, err
}

// prewarm makes a VM for p's next invocation when none is idle (the last
// one ended abnormally and was closed), after the answer has gone: the
// host has its own work to do with it meanwhile.
func (p *Program) prewarm(rt *Runtime) {
	if rt.idleVMs.count(func(v *sandboxVM) bool { return v.prog == p }) > 0 {
		return
	}
	if v, err := p.takeVM(rt, Limits{}); err == nil {
		v.giveBack()
	}
}

// loadHere loads the script a load frame carries: its bytecode and, unless
// the host knows it, its declaration (its top level evaluated).
func loadHere(f frame) (*Program, error) {
	if f.Known && len(f.Bytecode) > 0 {
		return &Program{File: f.File, Source: f.Source, bytecode: f.Bytecode, analysis: &analysisOnce{}, runtimes: &sync.Map{}}, nil
	}
	if f.Known {
		return compileBytecode(f.File, f.Source)
	}
	return compileHere(f.File, f.Source)
}

// adopt loads p into v, a VM made for runs that has run no script yet (nil
// when none could be made: the first invocation makes one), and keeps it
// for p's first invocation. Loading evaluates the bytecode that hands the
// prelude the script's function; none of the script runs.
func (p *Program) adopt(v *sandboxVM) error {
	if v == nil {
		return nil
	}
	if err := v.loadScript(p); err != nil {
		v.close()
		return err
	}
	v.giveBack()
	return nil
}

// memoryWatch bounds the memory an invocation may add to its worker
// without polling: the kernel keeps the process's peak resident memory
// (VmHWM), and writing "5" to /proc/self/clear_refs sets that peak back to
// what is resident now. So an invocation starts by resetting the peak and
// noting what is resident; at each of its host calls and at its end the
// worker reads the peak, and when the invocation grew it by more than its
// limit, the worker ends itself: the script ran out of memory, and nothing
// it caught changes that (issue 10: a script caught its OOM and returned
// success). Between those checks QuickJS's own allocator limit, set
// higher, bounds the heap; a peak between two checks is seen all the same,
// as the kernel kept it.
//
// getrusage's ru_maxrss, one system call, is read where it can tell:
// it is the larger of VmHWM and a peak the kernel keeps for the whole
// process that clear_refs never lowers and that a worker inherits at
// exec from the process that started it (keep's own peak, the memory of
// the vfork'd child that exec'd). Where keep's peak is above the worker's
// resident memory plus the limit, ru_maxrss stays at keep's while the
// script grows the worker past its limit (issue 40 #4: a caught OOM
// committed through keep run, whose process is larger than the script
// package's tests); the invocation then reads VmHWM itself at each check.
type memoryWatch struct {
	clearRefs *os.File // nil where /proc/self/clear_refs cannot be written
	status    *os.File // /proc/self/status, read for VmHWM
	limit     int64
	base      int64
	// exact: ru_maxrss cannot see this invocation's growth (see above);
	// each check reads VmHWM.
	exact bool
	// flush sends what the worker buffered before it ends itself: the
	// calls the script made without waiting are keep's to serve and trace.
	flush frameWriter
}

// openMemoryWatch opens /proc/self/clear_refs and /proc/self/status once,
// before any script runs.
func openMemoryWatch() *memoryWatch {
	f, err := os.OpenFile("/proc/self/clear_refs", os.O_WRONLY, 0)
	if err != nil {
		return &memoryWatch{}
	}
	st, err := os.Open("/proc/self/status")
	if err != nil {
		f.Close()
		return &memoryWatch{}
	}
	return &memoryWatch{clearRefs: f, status: st}
}

// start begins watching an invocation with limit bytes (0: no limit). It
// returns the limit to set on QuickJS's allocator: a far backstop that a
// script could catch when the peak can be watched, the limit itself when it
// cannot.
func (m *memoryWatch) start(limit int64) int64 {
	m.limit = 0
	if limit <= 0 {
		return 0
	}
	if m.clearRefs == nil {
		return limit
	}
	if _, err := m.clearRefs.Write([]byte("5")); err != nil {
		return limit
	}
	base, ok := m.highWater()
	if !ok {
		return limit
	}
	// ru_maxrss is max(VmHWM, the inherited peak): it tells this
	// invocation's growth only while the inherited peak is below what
	// the limit allows.
	m.limit, m.base, m.exact = limit, base, peakResident()-base >= limit
	return 2*limit + 16<<20
}

// check ends the worker when the invocation under way grew its peak
// resident memory by more than its limit.
func (m *memoryWatch) check() {
	if m.limit <= 0 {
		return
	}
	var peak int64
	if m.exact {
		var ok bool
		if peak, ok = m.highWater(); !ok {
			peak = m.base + m.limit + 1 // cannot tell any more: not a pass
		}
	} else {
		peak = peakResident()
	}
	if used := peak - m.base; used > m.limit {
		if m.flush != nil {
			_ = m.flush.Flush()
		}
		fmt.Fprintf(os.Stderr, "keep sandbox: out of memory: the script grew the sandbox by %d bytes, over its limit of %d\n", used, m.limit)
		os.Exit(5)
	}
}

// highWater reads VmHWM, the process's peak resident memory since the
// last reset, from /proc/self/status (read again from its start each time).
func (m *memoryWatch) highWater() (int64, bool) {
	var buf [4096]byte
	n, err := m.status.ReadAt(buf[:], 0)
	if n == 0 && err != nil {
		return 0, false
	}
	return vmHWM(buf[:n])
}

// vmHWM finds the "VmHWM:   1234 kB" line of a /proc/PID/status text.
func vmHWM(status []byte) (int64, bool) {
	const key = "\nVmHWM:"
	i := bytes.Index(status, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := status[i+len(key):]
	if j := bytes.IndexByte(rest, '\n'); j >= 0 {
		rest = rest[:j]
	}
	f := strings.Fields(string(rest))
	if len(f) != 2 || f[1] != "kB" {
		return 0, false
	}
	kb, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, false
	}
	return kb << 10, true
}

// peakResident is getrusage's ru_maxrss: the larger of VmHWM and the
// peak the process inherited (see memoryWatch).
func peakResident() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss << 10 // kilobytes on Linux
}

// workerHost forwards a script's host call to the keep process and waits
// for its answer, unless the call is one of answers (answered ahead: the
// first call with exactly its method and arguments gets its value, and the
// host is told without waiting) or the phase's first write (writes: the
// host takes it over, and is told without waiting).
func workerHost(r *bufio.Reader, w frameWriter, mem *memoryWatch, answers []Answer, writes map[string]*kt.ReadsBy) HostFunc {
	given := make([]bool, len(answers))
	// takenOver: the host took a call over. It refuses any call after
	// that but a log line, so none is taken for a write any more.
	takenOver := false
	return func(method string, args json.RawMessage) (json.RawMessage, error) {
		mem.check()
		if !takenOver && isWrite(writes, method, args) {
			takenOver = true
			if err := bufferFrame(w, frame{T: "host", Method: method, Value: args, NoReply: true, TakenOver: true}); err != nil {
				return nil, &kt.Error{Class: kt.ClassInternal, Message: "sandbox worker: the host went away"}
			}
			return nil, ErrSuspend
		}
		for i, a := range answers {
			if given[i] || a.Method != method || !bytes.Equal(a.Args, args) {
				continue
			}
			given[i] = true
			if err := bufferFrame(w, frame{T: "host", Method: method, Value: args, NoReply: true, Answered: i + 1}); err != nil {
				return nil, &kt.Error{Class: kt.ClassInternal, Message: "sandbox worker: the host went away"}
			}
			return a.Value, nil
		}
		if noReply[method] {
			// Sent without waiting: the host answers nothing, and if the
			// call fails there it ends this invocation itself.
			if err := bufferFrame(w, frame{T: "host", Method: method, Value: args, NoReply: true}); err != nil {
				return nil, &kt.Error{Class: kt.ClassInternal, Message: "sandbox worker: the host went away"}
			}
			return nil, nil
		}
		if err := writeFrame(w, frame{T: "host", Method: method, Value: args}); err != nil {
			return nil, &kt.Error{Class: kt.ClassInternal, Message: "sandbox worker: the host went away"}
		}
		f, err := readFrame(r)
		if err != nil {
			return nil, &kt.Error{Class: kt.ClassInternal, Message: "sandbox worker: the host went away"}
		}
		switch {
		case f.Suspend:
			takenOver = true
			return nil, ErrSuspend
		case f.Err != nil:
			return nil, f.Err
		}
		return f.Value, nil
	}
}

// isWrite says whether writes tell a call of method with args for a write.
func isWrite(writes map[string]*kt.ReadsBy, method string, args json.RawMessage) bool {
	rule, ok := writes[method]
	if !ok {
		return false
	}
	if rule == nil {
		return true
	}
	var a map[string]any
	if json.Unmarshal(args, &a) != nil {
		return false // not arguments: the host says why
	}
	return !rule.IsRead(a)
}

// ---------- the host side ----------

// worker is one sandbox worker process with one script version loaded.
type worker struct {
	rt     *Runtime // the runtime that started it
	cmd    *exec.Cmd
	stdin  io.Closer
	r      *bufio.Reader
	w      *bufio.Writer
	stderr *tailBuffer
	prog   *Program
	uses   int
	dead   atomic.Bool
	// timedOut is set when the worker is killed at a deadline.
	timedOut atomic.Bool
	// exited is closed once the process is gone and its stderr copied.
	exited chan struct{}
	// sent is what this worker was last sent of an invocation's context.
	sent sentContext
}

// sentContext holds the Tools and Writes one side of a worker's pipe last
// sent or received, so that a frame whose own are the same leaves them
// out (frame.SameTools, frame.SameWrites). Both sides apply it to the
// invoke frames in the order they are written: the frame, then its Then.
// A frame without Tools or Writes, or with empty ones (a prepare has no
// Writes; a registry may have no connector), neither uses nor changes
// what is held.
type sentContext struct {
	tools  map[string][]string
	writes map[string]*kt.ReadsBy
}

// leaveOut is the host's side: it drops from f what the worker holds
// already, and holds a copy of what f sends (the caller's maps may change
// after the frame is written).
func (c *sentContext) leaveOut(f *frame) {
	// An empty map is left out of the frame by its encoding (omitempty)
	// and is what no map means to the worker: neither held nor used.
	if len(f.Tools) > 0 {
		if c.tools != nil && maps.EqualFunc(f.Tools, c.tools, slices.Equal) {
			f.Tools, f.SameTools = nil, true
		} else {
			c.tools = make(map[string][]string, len(f.Tools))
			for k, v := range f.Tools {
				c.tools[k] = slices.Clone(v)
			}
		}
	}
	if len(f.Writes) > 0 {
		if c.writes != nil && maps.EqualFunc(f.Writes, c.writes, sameReadsBy) {
			f.Writes, f.SameWrites = nil, true
		} else {
			c.writes = make(map[string]*kt.ReadsBy, len(f.Writes))
			for k, v := range f.Writes {
				if v != nil {
					v = &kt.ReadsBy{Arg: v.Arg, Default: v.Default, Reads: slices.Clone(v.Reads)}
				}
				c.writes[k] = v
			}
		}
	}
}

// fillIn is the worker's side: it puts back what f left out, and holds
// what f brings.
func (c *sentContext) fillIn(f *frame) error {
	switch {
	case f.SameTools && c.tools == nil, f.SameWrites && c.writes == nil:
		return errors.New("sandbox worker: an invocation refers to tools or writes it was never sent (a bug in keep)")
	}
	if f.SameTools {
		f.Tools = c.tools
	} else if len(f.Tools) > 0 {
		c.tools = f.Tools
	}
	if f.SameWrites {
		f.Writes = c.writes
	} else if len(f.Writes) > 0 {
		c.writes = f.Writes
	}
	return nil
}

func sameReadsBy(a, b *kt.ReadsBy) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Arg == b.Arg && a.Default == b.Default && slices.Equal(a.Reads, b.Reads)
}

// startWorker starts a worker process and loads source into it, with
// deadline bounding the load. Unless known (the host has the declaration
// already), the script's top level runs there and its declaration comes back.
func startWorker(rt *Runtime, file, source string, deadline time.Duration, known bool) (*worker, *Declaration, error) {
	wk, err := spawnWorker(rt, known)
	if err != nil {
		return nil, nil, err
	}
	decl, err := wk.load(frame{T: "load", File: file, Source: source, Known: known}, deadline)
	if err != nil {
		return nil, nil, err
	}
	return wk, decl, nil
}

// spawnWorker starts a worker process with nothing loaded. One for runs
// (forRuns) makes at once the locked-down VM its first invocation will use;
// one that reads a declaration needs another VM (vmpool.go: forDeclaration).
func spawnWorker(rt *Runtime, forRuns bool) (*worker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "start a sandbox worker: %v", err)
	}
	cmd := exec.Command(exe)
	// Only what the Go runtime reads: keep's own environment (KEEP_TOKEN,
	// credentials) has no business in a process that runs untrusted code,
	// even one with no way to read it.
	cmd.Env = []string{workerEnv + "=1"}
	if forRuns {
		cmd.Env[0] = workerEnv + "=runs"
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GO") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// Its own process group, so that a Ctrl-C at a terminal reaches keep
	// (which stops its workers) and not the workers directly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "start a sandbox worker: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "start a sandbox worker: %v", err)
	}
	tail := &tailBuffer{max: 4096}
	cmd.Stderr = tail
	if err := cmd.Start(); err != nil {
		return nil, kt.Errorf(kt.ClassInternal, "start a sandbox worker: %v", err)
	}
	rt.workersStarted.Add(1)
	wk := &worker{rt: rt, cmd: cmd, stdin: stdin, r: bufio.NewReaderSize(stdout, 64<<10), w: bufio.NewWriterSize(stdin, 64<<10), stderr: tail, exited: make(chan struct{})}
	liveWorkers.Store(wk, struct{}{})
	// The one Wait: it also finishes copying the worker's stderr, which
	// deathError reads (why it stopped: out of memory, a crash).
	go func() {
		_ = cmd.Wait()
		if ps := cmd.ProcessState; ps != nil {
			exitedCPU.Add(int64(ps.UserTime() + ps.SystemTime()))
		}
		liveWorkers.Delete(wk)
		close(wk.exited)
	}()
	return wk, nil
}

// load loads a script version into a worker that has none, with deadline
// bounding the load; see startWorker.
func (wk *worker) load(f frame, deadline time.Duration) (*Declaration, error) {
	stop := time.AfterFunc(deadline, func() {
		wk.timedOut.Store(true)
		wk.kill()
	})
	defer stop.Stop()
	if err := writeFrame(wk.w, f); err != nil {
		wk.kill()
		return nil, wk.deathError("while loading the script", deadline, 0)
	}
	f, err := readFrame(wk.r)
	if err != nil {
		wk.kill()
		return nil, wk.deathError("while loading the script", deadline, 0)
	}
	if f.Err != nil {
		wk.close()
		return nil, f.Err.toError()
	}
	return f.Decl, nil
}

// kill ends the worker at once; its invocation, if any, fails.
func (wk *worker) kill() {
	if wk.dead.Swap(true) {
		return
	}
	wk.rt.workersKilled.Add(1)
	_ = wk.cmd.Process.Kill()
	_ = wk.stdin.Close()
}

// close ends an idle worker: closing its input ends its loop.
func (wk *worker) close() {
	if wk.dead.Swap(true) {
		return
	}
	_ = wk.stdin.Close()
	go func() {
		select {
		case <-wk.exited:
		case <-time.After(5 * time.Second):
			_ = wk.cmd.Process.Kill()
		}
	}()
}

// deathError explains why a worker stopped answering: killed at its time
// limit, out of memory, or crashed.
func (wk *worker) deathError(where string, limit time.Duration, mem int64) error {
	// Its last words are on stderr, copied until the process is gone.
	select {
	case <-wk.exited:
	case <-time.After(10 * time.Second):
	}
	tail := wk.stderr.String()
	switch {
	case wk.timedOut.Load():
		return kt.Errorf(kt.ClassLogic, "%s ran longer than its time limit of %s and was stopped: its sandbox process was killed (an endless loop, a built-in over a huge array such as indexOf on {length: 2**53-1}, or a call that never returns?)", where, limit)
	case strings.Contains(tail, "out of memory"):
		return kt.Errorf(kt.ClassLogic, "%s: the script ran out of memory: it grew its sandbox past its memory limit of %s ([policy] memory_limit) and its sandbox process was stopped", where, sizeText(mem))
	}
	return kt.Errorf(kt.ClassLogic, "%s: the sandbox process stopped unexpectedly (%s)", where, strings.TrimSpace(firstLine(tail)))
}

func firstLine(s string) string {
	if s == "" {
		return "no message"
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// takeWorker returns an idle worker that runs p, else the spare worker
// (started ahead, its VM made) with p loaded, else a new one.
func (p *Program) takeWorker(rt *Runtime) (*worker, error) {
	p.ranOn(rt)
	if wk, ok := rt.idleWorkers.take(func(wk *worker) bool { return wk.prog == p }); ok {
		return wk, nil
	}
	wk := rt.spare.take()
	if wk == nil {
		var err error
		if wk, err = spawnWorker(rt, true); err != nil {
			return nil, err
		}
	}
	// No script code runs in this load (the bytecode only hands the
	// prelude the script's function), so a busy machine's slow process
	// start does not count against the handler's time limit.
	if _, err := wk.load(frame{T: "load", File: p.File, Source: p.Source, Known: true, Bytecode: p.bytecode}, rt.loadDeadline); err != nil {
		return nil, err
	}
	wk.prog = p
	return wk, nil
}

// spare is the one worker for runs started ahead of need: a first call of
// a script version (a new version, or one whose workers were retired) then
// pays for loading its bytecode into a VM made already, not for a process
// and a VM (≈ 5 ms of the VM's built-ins, prelude and lockdown: issue 25).
// Each one taken is replaced in the background. A spare has run no script,
// so it may serve any version.
type spareWorker struct {
	rt       *Runtime
	mu       sync.Mutex
	wk       *worker
	starting bool
}

// take returns the spare, if one is ready; the invocation that took it
// starts the next once it is done (invokeInWorker), so that the two do not
// share the cores.
func (s *spareWorker) take() *worker {
	s.mu.Lock()
	wk := s.wk
	s.wk = nil
	s.mu.Unlock()
	if wk != nil && wk.dead.Load() {
		return nil
	}
	return wk
}

// refill starts a spare in the background unless one is there or coming.
func (s *spareWorker) refill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wk != nil || s.starting || s.rt.stopping.Load() {
		return
	}
	s.starting = true
	go func() {
		wk, err := spawnWorker(s.rt, true)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.starting = false
		if err != nil {
			return
		}
		if s.wk != nil || s.rt.stopping.Load() {
			wk.close()
			return
		}
		s.wk = wk
	}()
}

// stop ends the spare (keep is stopping).
func (s *spareWorker) stop() {
	s.mu.Lock()
	wk := s.wk
	s.wk = nil
	s.mu.Unlock()
	if wk != nil {
		wk.close()
	}
}

func (wk *worker) giveBack() {
	if wk.dead.Load() {
		return
	}
	if retired, ok := wk.rt.idleWorkers.put(wk); ok {
		retired.close()
	}
}

// releaseWorkers ends the idle workers of a program that will not run again.
func (p *Program) releaseWorkers(rt *Runtime) {
	for _, wk := range rt.idleWorkers.remove(func(wk *worker) bool { return wk.prog == p }) {
		wk.close()
	}
}

// ErrStopping is the error of an invocation whose worker was killed because
// keep is stopping: the run is left as a crash leaves it, and recovered when
// keep starts again (prepare and mutate have no side effects of their own).
var ErrStopping = errors.New("keep is stopping: the handler was stopped and its run is recovered at the next start")

// invokeInWorker runs one handler phase in a worker process, serving the
// script's host calls here, and kills the worker if the phase outlives its
// time limit.
func (p *Program) invokeInWorker(rt *Runtime, inv Invocation) (Outcome, error) {
	wk, err := p.takeWorker(rt)
	if err != nil {
		return Outcome{}, err
	}
	wk.uses++
	rt.busy.Store(wk, struct{}{})
	defer rt.busy.Delete(wk)
	if rt.stopping.Load() {
		wk.kill()
		return Outcome{}, ErrStopping
	}
	// The phase under way is killed a grace after its time limit: the
	// next phase (Invocation.Then) starts its own.
	var stop *time.Timer
	arm := func(limit time.Duration) {
		if stop != nil {
			stop.Stop()
			stop = nil
		}
		if limit > 0 {
			stop = time.AfterFunc(limit+killGrace, func() {
				wk.timedOut.Store(true)
				wk.kill()
			})
		}
	}
	arm(inv.Timeout)
	r := wk.invoke(inv, arm)
	if stop != nil {
		stop.Stop()
	}
	rt.spare.refill()
	ran := inv // the phase that ran last
	if r.first != nil {
		ran = *inv.Then
	}
	o, err := r.o, r.err
	if !r.healthy {
		wk.kill()
		switch {
		case r.abandoned:
		case rt.stopping.Load() && !wk.timedOut.Load():
			o, err = Outcome{}, ErrStopping
		case err == nil:
			o, err = Outcome{}, wk.deathError(fmt.Sprintf("%s %s: %s", ran.Kind, ran.Name, ran.Phase), ran.Timeout, ran.MemoryLimit)
		}
	} else {
		wk.giveBack()
	}
	if r.first == nil {
		return o, err
	}
	first := *r.first
	if !r.abandoned {
		first.Then, first.ThenErr = &o, err
	}
	return first, nil
}

// invoked is what a worker's invocation came to: the outcome of the phase
// that ran last and its error; first is the first phase's outcome when
// the next one (Invocation.Then) ran after it, abandoned that the host
// did not let it go on (Invocation.Next). healthy is false when the
// worker can no longer be trusted to serve another invocation (it died,
// the pipe broke, its work was abandoned).
type invoked struct {
	o                  Outcome
	err                error
	first              *Outcome
	healthy, abandoned bool
}

// maxDrained bounds the frames a worker may send after a call the host
// refused before it is killed: a script's last lines after its write (a
// log line, a read the refusal stops), not a loop that logs to its time
// limit.
const maxDrained = 64

// invoke runs inv on the worker (and inv.Then after it, arming its time
// limit with arm).
func (wk *worker) invoke(inv Invocation, arm func(time.Duration)) invoked {
	var first *Outcome
	abandoned := false
	o, err, healthy := wk.invokeFrames(inv, func(value json.RawMessage) (*Invocation, bool) {
		first = &Outcome{Value: value}
		if inv.Then == nil || !inv.Next(value) {
			abandoned = true
			return nil, false
		}
		arm(inv.Then.Timeout)
		return inv.Then, true
	})
	return invoked{o: o, err: err, first: first, healthy: healthy, abandoned: abandoned}
}

// invokeFrames runs inv's frames on the worker. next is called at a frame
// "phase" with the phase's value: it gives the invocation whose host
// serves the next phase, or false to abandon it. healthy is false when the
// worker can no longer be trusted to serve another invocation.
func (wk *worker) invokeFrames(inv Invocation, next func(json.RawMessage) (*Invocation, bool)) (o Outcome, err error, healthy bool) {
	lim := inv.Limits
	wk.rt.roundTrips.Add(1)
	start := frame{T: "invoke", Kind: inv.Kind, Name: inv.Name, Phase: inv.Phase, Args: inv.Args, Tools: inv.Tools, Limits: &lim, Answers: inv.Answers, Writes: inv.Writes}
	if t := inv.Then; t != nil {
		tlim := t.Limits
		start.Then = &frame{T: "invoke", Kind: t.Kind, Name: t.Name, Phase: t.Phase, Tools: t.Tools, Limits: &tlim, Writes: t.Writes}
	}
	wk.sent.leaveOut(&start)
	if start.Then != nil {
		wk.sent.leaveOut(start.Then)
	}
	if err := writeFrame(wk.w, start); err != nil {
		return o, nil, false
	}
	var hostErrs []error
	// refused: the host refused a call the script did not wait for (a
	// write taken over, a log line, a publish) — a user's mistake, such
	// as a grant missing. The script has gone on past it: the invocation
	// ends with that error once the worker is done, none of the script's
	// calls after it is served, and the worker serves on (killing it cost
	// a process start, ≈ 40 ms of CPU, per refused attempt) — unless the
	// script goes on talking (more than maxDrained calls: a loop that
	// logs), which is not waited for.
	var refused error
	drained := 0
	for {
		f, err := readFrame(wk.r)
		if err != nil {
			return o, refused, false
		}
		if refused != nil {
			if drained++; drained > maxDrained {
				return o, refused, false
			}
			switch f.T {
			case "host":
				if f.NoReply {
					continue
				}
				// A call that waits gets the error, which stops the script.
				hostErrs = append(hostErrs, refused)
				reply := frame{T: "reply", Err: toWire(refused)}
				reply.Err.Ref = len(hostErrs)
				wk.rt.roundTrips.Add(1)
				if err := writeFrame(wk.w, reply); err != nil {
					return o, refused, false
				}
				continue
			case "done":
				return o, refused, true
			}
			return o, refused, false
		}
		switch f.T {
		case "phase":
			then, ok := next(f.Value)
			if !ok {
				return Outcome{}, nil, false
			}
			inv = *then
		case "host":
			res, herr := inv.Host(f.Method, f.Value)
			if f.TakenOver {
				// The script went on as if the host took the call over: the
				// host must have.
				switch {
				case herr == nil:
					return o, kt.Errorf(kt.ClassInternal, "ctx.%s: the sandbox took it for a write and keep for a read (a bug in keep)", f.Method), false
				case !errors.Is(herr, ErrSuspend):
					refused = herr
				}
				continue
			}
			if f.Answered > 0 {
				// The script has its answer already: the host's must be it.
				if herr == nil && (f.Answered > len(inv.Answers) || !bytes.Equal(res, inv.Answers[f.Answered-1].Value)) {
					herr = kt.Errorf(kt.ClassInternal, "ctx.%s: keep answered it ahead with something else than it answers now (a bug in keep)", f.Method)
				}
				if herr != nil {
					return o, herr, false
				}
				continue
			}
			if f.NoReply {
				if herr != nil && !errors.Is(herr, ErrSuspend) {
					refused = herr // the script does not wait for this answer
				}
				continue
			}
			reply := frame{T: "reply", Value: res}
			switch {
			case errors.Is(herr, ErrSuspend):
				reply.Suspend = true
			case herr != nil:
				hostErrs = append(hostErrs, herr)
				reply.Err = toWire(herr)
				reply.Err.Ref = len(hostErrs)
			}
			wk.rt.roundTrips.Add(1)
			if err := writeFrame(wk.w, reply); err != nil {
				return o, nil, false
			}
		case "done":
			if f.Err != nil {
				if f.Err.Ref > 0 && f.Err.Ref <= len(hostErrs) {
					return o, hostErrs[f.Err.Ref-1], true
				}
				return o, f.Err.toError(), true
			}
			return Outcome{Value: f.Value, Suspended: f.Suspended}, nil, true
		default:
			return o, nil, false
		}
	}
}

// tailBuffer keeps the last bytes written to it (a worker's stderr).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
