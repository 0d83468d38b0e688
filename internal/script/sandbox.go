// Package script is keep's JavaScript sandbox: it compiles workflow scripts
// once per version, extracts their declaration for static validation, and
// invokes one handler phase at a time in a QuickJS VM with a memory limit, a
// time limit and no host objects but ctx. VMs are reused between
// invocations of one script version, isolated as vmpool.go explains.
//
// Every call a script makes to the host arrives at a HostFunc on the VM's own
// goroutine. A HostFunc that returns an error aborts the whole invocation: the
// VM is interrupted, which JavaScript cannot catch, so a try/catch in a script
// never hides a phase violation or a failed tool call.
package script

import (
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"modernc.org/quickjs"
)

//go:embed prelude.js
var preludeJS string

// preludeSource is the prelude with keep's bound put in: how deep a
// handler's returned value may nest is kt.MaxJSONDepth, defined once (the
// event API's and a webhook's payload bound is derived from it). The
// replacement keeps the prelude's lines where they are.
var preludeSource = strings.ReplaceAll(preludeJS, "KEEP_MAX_JSON_DEPTH", strconv.Itoa(kt.MaxJSONDepth))

var (
	preludeOnce sync.Once
	preludeCode []byte
	preludeErr  error
)

func preludeBytecode() ([]byte, error) {
	preludeOnce.Do(func() {
		vm, err := quickjs.NewVM()
		if err != nil {
			preludeErr = err
			return
		}
		defer vm.Close()
		// The prelude and a script share QuickJS's file name in stacks; the
		// prelude's lines start at preludeLineBase, so its frames can be told
		// from the script's and left out (issue 11: they showed as script lines).
		preludeCode, preludeErr = vm.Compile(strings.Repeat("\n", preludeLineBase-1)+preludeSource, quickjs.EvalGlobal)
	})
	return preludeCode, preludeErr
}

// Program is one compiled workflow script version.
type Program struct {
	File     string
	Source   string
	bytecode []byte
	Decl     Declaration
	analysis *analysisOnce
	// runtimes are the Runtimes p has run on: Release empties each of
	// its VMs and workers.
	runtimes *sync.Map // *Runtime → struct{}
}

// SyntaxError is a script that does not parse.
type SyntaxError struct {
	File    string
	Line    int
	Column  int
	Message string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s:%d:%d: syntax error: %s", e.File, e.Line, e.Column, e.Message)
}

// Compile parses and compiles a script and reads its declaration: once per
// source in a process (Declare), evaluating its top level in a sandbox
// worker that is ended right after (killed if it does not finish within
// 10 s). A program's invocations start their own worker. It does not
// validate the declaration; see Validate.
func Compile(file, source string) (*Program, error) {
	p, err := compileBytecode(file, source)
	if err != nil {
		return nil, err
	}
	if p.Decl, err = Declare(file, source); err != nil {
		return nil, err
	}
	return p, nil
}

// Declare returns a script's declaration: its top level evaluated once per
// source in this process (in a wasm instance or a sandbox worker, ended
// right after, or here with KEEP_SANDBOX=in-process), then remembered, so that reading a
// version's topology (the topics page, GET …/topics) or compiling a version
// deployed a moment before starts no worker. A script whose top level
// fails is not remembered: each call says why.
func Declare(file, source string) (Declaration, error) {
	if d, ok := declarations.get(source); ok {
		return d, nil
	}
	var d Declaration
	if InProcess() {
		p, err := compileHere(file, source)
		if err != nil {
			return d, err
		}
		d = p.Decl
	} else if Wasm() {
		var err error
		if d, err = (&Program{File: file, Source: source}).describeWasm(); err != nil {
			return d, err
		}
	} else {
		wk, decl, err := startWorker(std, file, source, std.loadDeadline, false)
		if err != nil {
			var ke *kt.Error
			if errors.As(err, &ke) && !strings.HasPrefix(ke.Message, "while loading") && ke.Class == kt.ClassLogic {
				ke.Message = "while loading the script: " + ke.Message
			}
			return d, err
		}
		// No run uses this worker: its program is not known here, and a
		// worker never serves two (issue 25: every deploy left one idle).
		wk.close()
		d = *decl
	}
	declarations.put(source, d)
	return d, nil
}

// declarations remembers the declarations read, by source, up to
// maxDeclarations (the oldest go first). Each is kept as its JSON and
// decoded for every caller, who may then change it freely.
var declarations = &declCache{m: map[[32]byte][]byte{}}

const maxDeclarations = 4096

type declCache struct {
	mu    sync.Mutex
	m     map[[32]byte][]byte
	order [][32]byte
}

func (c *declCache) get(source string) (Declaration, bool) {
	k := sha256.Sum256([]byte(source))
	c.mu.Lock()
	b, ok := c.m[k]
	c.mu.Unlock()
	var d Declaration
	if !ok || json.Unmarshal(b, &d) != nil {
		return d, false
	}
	return d, true
}

func (c *declCache) put(source string, d Declaration) {
	b, err := json.Marshal(d)
	if err != nil {
		return
	}
	k := sha256.Sum256([]byte(source))
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		return
	}
	c.m[k] = b
	c.order = append(c.order, k)
	if len(c.order) > maxDeclarations {
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
}

// compileHere is Compile inside the current process (a sandbox worker, or
// keep itself with KEEP_SANDBOX=in-process).
func compileHere(file, source string) (*Program, error) {
	p, err := compileBytecode(file, source)
	if err != nil {
		return nil, err
	}
	decl, err := p.describe()
	if err != nil {
		return nil, err
	}
	p.Decl = decl
	return p, nil
}

// compileBytecode parses a script into bytecode; parsing runs none of it.
func compileBytecode(file, source string) (*Program, error) {
	wrapped, err := wrapScript(source)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	vm, err := quickjs.NewVM()
	if err != nil {
		return nil, fmt.Errorf("start JavaScript engine: %w", err)
	}
	defer vm.Close()
	code, err := vm.Compile(wrapped, quickjs.EvalGlobal)
	if err != nil {
		var qe *quickjs.Error
		if errors.As(err, &qe) {
			return nil, &SyntaxError{File: file, Line: qe.LineNumber, Column: qe.ColumnNumber, Message: qe.Message}
		}
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	return &Program{File: file, Source: source, bytecode: code, analysis: &analysisOnce{}, runtimes: &sync.Map{}}, nil
}

// Limits bound one invocation.
type Limits struct {
	Timeout     time.Duration // wall time for the phase, host calls included
	MemoryLimit int64         // bytes of JavaScript heap
	// ClockShift moves the script's clock on (Date.now, ms) and a
	// ChanceSeed other than 0 makes Math.random a fixed sequence: a dry
	// run that compares two versions (issue 39) runs both with the same
	// moved clock and chance, so a write that depends on either shows.
	// Both 0 outside a dry run: the real clock and chance.
	ClockShift int64 `json:",omitempty"`
	ChanceSeed int64 `json:",omitempty"`
}

// HostFunc serves one call from the script: method is "log", "now",
// "files.read", ...; args is the JSON the script passed. A nil result means
// undefined. Returning an error aborts the invocation.
type HostFunc func(method string, args json.RawMessage) (json.RawMessage, error)

// ErrSuspend is returned by a HostFunc to take over a call (a consumer's
// mutation, sent by the host after mutate ends): the script's call gives
// undefined and the script goes on to its end, so that what it does after
// the call is seen (a second mutation is refused by the host, a throw fails
// the invocation); the invocation ends with Outcome.Suspended.
var ErrSuspend = errors.New("call taken over by the host")

// Invocation is one handler phase to run.
type Invocation struct {
	Kind  kt.HandlerType
	Name  string
	Phase string // prepare, mutate, next; "handler" for producers, "run" for tasks
	Args  []json.RawMessage
	Tools map[string][]string // connector → method names exposed on ctx
	Host  HostFunc
	Limits
	// Answers are host calls answered ahead, when keep has read already
	// what a call will read (prepare's first ctx.peek: the step's plan
	// read its page). In a sandbox worker the script's first call with
	// exactly an answer's method and arguments gets its value at once,
	// without a round trip to keep; Host is still called for it, in the
	// order of the script's calls, as the worker goes on — its checks,
	// trace and counts are the call's — and must answer the very same
	// bytes: an error or another answer ends the invocation with that
	// error (the script saw a value it should not have) and its worker.
	// In keep's own process (KEEP_SANDBOX=in-process) Host answers.
	Answers []Answer
	// Writes tell a consumer's mutate which calls are writes, which the
	// host takes over (ErrSuspend), by "tool.method": every call (nil),
	// or those the rule does not call reads (connector.Registry.WriteRules).
	// In a sandbox worker the phase's first such call is taken over at
	// once, without a round trip to keep; Host is still called for it, in
	// order, and must take it over: an error (a grant missing, arguments
	// keep refuses) ends the invocation with that error, as it would have
	// ended it when asked; none of the script's calls after it is served,
	// and the worker serves on (a user's mistake costs no process). A
	// read's answer (the two sides disagree: a bug in keep) ends the
	// invocation and its worker.
	Writes map[string]*kt.ReadsBy
	// Then is the phase that follows this one in the same invocation when
	// this one returns a value that reserves events (a consumer's mutate
	// after its prepare: issue 25, one round trip to the worker fewer per
	// run). Its Args are this phase's value; its own Host, Limits and
	// Writes serve it. Next is called first, with this phase's value,
	// before any of Then's calls is served: it says whether Then may go
	// on. When Next says no, nothing of Then is served and its work is
	// thrown away (a worker running it is killed: it may be running
	// still); Outcome.Then stays nil. When this phase fails, returns
	// nothing to reserve, or is suspended, Then does not run.
	Then *Invocation
	// Runtime is the sandbox it runs on (its owner's: the daemon's);
	// nil is the process's default runtime (Default).
	Runtime *Runtime
	Next    func(value json.RawMessage) bool
}

// ReservesEvents says a prepare's value reserves at least one event, by
// the shape the engine decodes (reservations, each with its ids): the
// rule by which Invocation.Then runs. A value the engine reads otherwise
// only costs the round trip saved (Next says no, or the engine invokes
// mutate itself).
func ReservesEvents(value json.RawMessage) bool {
	var pr struct {
		Reservations []struct {
			IDs []json.RawMessage `json:"ids"`
		} `json:"reservations"`
	}
	if json.Unmarshal(value, &pr) != nil {
		return false
	}
	for _, r := range pr.Reservations {
		if len(r.IDs) > 0 {
			return true
		}
	}
	return false
}

// Answer is one host call answered ahead (Invocation.Answers).
type Answer struct {
	Method string          `json:"method"`
	Args   json.RawMessage `json:"args"`
	Value  json.RawMessage `json:"value"`
}

// Outcome is what a handler phase returned.
type Outcome struct {
	Value     json.RawMessage // nil when the handler returned undefined
	Suspended bool            // the host took over a terminal call (see ErrSuspend)
	// Then is what Invocation.Then returned when it ran, ThenErr its
	// error (as Invoke's error for a phase of its own).
	Then    *Outcome
	ThenErr error
}

// thenRuns says whether inv.Then runs after a phase that returned o.
func (inv *Invocation) thenRuns(o Outcome, err error) bool {
	return inv.Then != nil && goesOn(o, err)
}

// goesOn says whether a phase that returned o is followed by the next
// one of its invocation, if it has one.
func goesOn(o Outcome, err error) bool {
	return err == nil && !o.Suspended && ReservesEvents(o.Value)
}

type vmState struct {
	settled   bool
	ok        bool
	payload   string
	abortErr  error
	suspended bool
}

func newVM(lim Limits) (*quickjs.VM, error) {
	vm, err := quickjs.NewVM()
	if err != nil {
		return nil, fmt.Errorf("start JavaScript engine: %w", err)
	}
	if lim.MemoryLimit > 0 {
		vm.SetMemoryLimit(uintptr(lim.MemoryLimit))
	}
	// Deep recursion becomes a catchable-but-recorded error, never a Go stack overflow.
	vm.SetMaxStackSize(0)
	return vm, nil
}

// Invoke runs one handler phase and returns what it returned. Script
// failures come back as *kt.Error with class logic; a HostFunc's error comes
// back as it was returned. It runs in a sandbox worker process (worker.go)
// unless KEEP_SANDBOX=in-process.
func (p *Program) Invoke(inv Invocation) (Outcome, error) {
	if InProcess() || Wasm() {
		here := p.invokeHere
		if Wasm() {
			here = p.invokeWasm
		}
		o, err := here(inv)
		if inv.thenRuns(o, err) && inv.Next(o.Value) {
			then := *inv.Then
			then.Args = []json.RawMessage{o.Value}
			to, terr := here(then)
			o.Then, o.ThenErr = &to, terr
		}
		return o, err
	}
	return p.invokeInWorker(inv.runtime(), inv)
}

// invokeHere runs one handler phase in a VM of this process.
func (p *Program) invokeHere(inv Invocation) (Outcome, error) {
	if inv.Tools == nil {
		inv.Tools = map[string][]string{}
	}
	v, err := p.takeVM(inv.runtime(), inv.Limits)
	if err != nil {
		return Outcome{}, err
	}
	st := v.start(inv)
	vm := v.vm

	// The timer may fire while the invocation ends; finished makes a late
	// one harmless, and a VM that was interrupted is never reused.
	var mu sync.Mutex
	expired, finished := false, false
	var timer *time.Timer
	if inv.Timeout > 0 {
		timer = time.AfterFunc(inv.Timeout, func() {
			mu.Lock()
			defer mu.Unlock()
			if !finished {
				expired = true
				vm.Interrupt()
			}
		})
	}
	didExpire := func() bool { mu.Lock(); defer mu.Unlock(); return expired }

	args := "[" + joinRaw(inv.Args) + "]"
	spec := v.specFor(inv.Tools, inv.Kind == kt.HandlerTask, inv.ClockShift, inv.ChanceSeed)
	_, callErr := v.enter("__keep_invoke", string(inv.Kind), inv.Name, inv.Phase, args, spec, v.epoch)
	// Drain the job queue until it is empty, also after the handler settled:
	// a promise chain left running that calls ctx then is caught (its work
	// would be lost), instead of silently dropped. An empty queue is also
	// what lets the VM serve the next invocation.
	for callErr == nil && st.abortErr == nil && !didExpire() {
		n, jerr := vm.ExecutePendingJobs()
		if jerr != nil && drainCapped(n, jerr) {
			// A long chain of promise jobs is not an error by itself:
			// QuickJS stops one drain at its cap to give the host a
			// turn, and the queue is still there. It goes on until it
			// empties or the time limit stops it (an endless chain then
			// fails as "ran longer than its time limit", whichever of
			// the cap and the timer came first). Without a time limit
			// nothing else would end it.
			if inv.Timeout > 0 {
				continue
			}
			callErr = errEndlessJobs
			break
		}
		if jerr != nil {
			if !st.settled {
				callErr = jerr
			}
			break
		}
		if n == 0 {
			break
		}
	}
	mu.Lock()
	finished = true
	timedOut := expired
	mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	v.finish(st, callErr, timedOut)
	return p.outcomeOf(inv, st, callErr, timedOut)
}

// start makes v's next invocation inv's: its count, its epoch (a ctx of an
// earlier one is refused), its state and host.
func (v *sandboxVM) start(inv Invocation) *vmState {
	v.uses++
	v.epoch++
	st := &vmState{}
	v.st, v.host = st, inv.Host
	return st
}

// finish reuses only a VM whose invocation ended cleanly: returned, or
// taken over by the host at a terminal call; any other is closed.
func (v *sandboxVM) finish(st *vmState, callErr error, timedOut bool) {
	if !timedOut && st.abortErr == nil && callErr == nil && ((st.settled && st.ok) || (st.suspended && !st.settled)) {
		v.giveBack()
		return
	}
	v.st, v.host = nil, nil
	v.rt.vmsDiscarded.Add(1)
	v.close()
}

// drainJobsCap is how many promise jobs one ExecutePendingJobs runs at most
// (modernc.org/quickjs's maxJobs): it then returns an error of its own, not
// a script's exception, with the queue not drained.
const drainJobsCap = 1 << 20

// drainCapped tells the drain's cap from a job's failure: a job that threw
// comes as a *quickjs.Error, and only a drain that ran the whole cap ends
// at it.
func drainCapped(n int, err error) bool {
	var jsErr *quickjs.Error
	return n >= drainJobsCap && !errors.As(err, &jsErr)
}

// errEndlessJobs ends an invocation without a time limit whose promise jobs
// did not run out within one drain's cap.
var errEndlessJobs = errors.New("its promise jobs never ran out (more than a million in a row): an endless chain of promises?")

// outcomeOf is what an invocation that ended comes to: its value, the host
// taking over a terminal call, or an error a person can act on.
func (p *Program) outcomeOf(inv Invocation, st *vmState, callErr error, timedOut bool) (Outcome, error) {
	switch {
	case st.abortErr != nil:
		return Outcome{}, st.abortErr
	case st.suspended && st.settled && !st.ok:
		// The handler threw after the call the host took over: what it did
		// next (often a use of the call's result, or a second write) would
		// be lost without a word.
		info := throwInfo(st.payload)
		return Outcome{}, &kt.Error{Class: kt.ClassLogic, Message: p.describeThrow(inv, info.Name, info.Message, info.Stack) +
			" — after its mutation call, which must be the last thing " + inv.Phase + " does: that call's result is not available there (next receives it as mutationResult), and nothing was sent"}
	case st.suspended && (callErr == nil || st.settled):
		return Outcome{Suspended: true}, nil
	case timedOut:
		return Outcome{}, kt.Errorf(kt.ClassLogic, "%s %s: %s ran longer than its time limit of %s and was stopped (an endless loop, or a call that never returns?)", inv.Kind, inv.Name, inv.Phase, inv.Timeout)
	case callErr != nil && !st.settled:
		return Outcome{}, p.scriptError(fmt.Sprintf("in %s %s.%s", inv.Kind, inv.Name, inv.Phase), callErr, st)
	case !st.settled:
		return Outcome{}, kt.Errorf(kt.ClassLogic, "%s %s: %s never finished: it awaits a promise that nothing will ever settle", inv.Kind, inv.Name, inv.Phase)
	}
	if !st.ok {
		info := throwInfo(st.payload)
		if info.Load {
			msg := info.Name + ": " + info.Message
			if s := p.cleanStack(info.Stack); s != "" {
				msg += " (" + s + ")"
			}
			return Outcome{}, kt.Errorf(kt.ClassLogic, "while loading the script: %s", msg)
		}
		return Outcome{}, &kt.Error{Class: kt.ClassLogic, Message: p.describeThrow(inv, info.Name, info.Message, info.Stack)}
	}
	if st.payload == "" {
		return Outcome{}, nil
	}
	if !json.Valid([]byte(st.payload)) {
		// Only a script that tampered with the engine's internals gets here.
		return Outcome{}, kt.Errorf(kt.ClassLogic, "%s %s: %s returned something that is not JSON", inv.Kind, inv.Name, inv.Phase)
	}
	return Outcome{Value: json.RawMessage(st.payload)}, nil
}

// thrown is what the prelude reports of a throw.
type thrown struct {
	Name, Message, Stack string
	Load                 bool
}

// throwInfo decodes the prelude's report of a throw; one it cannot read
// (only a script that tampered with the prelude) says so as the message.
func throwInfo(payload string) thrown {
	var info thrown
	if err := json.Unmarshal([]byte(payload), &info); err != nil {
		info = thrown{Name: "thrown value", Message: "an error keep cannot read (" + err.Error() + ")"}
	}
	return info
}

func joinRaw(args []json.RawMessage) string {
	parts := make([]string, len(args))
	for i, a := range args {
		if len(a) == 0 {
			parts[i] = "null"
		} else {
			parts[i] = string(a)
		}
	}
	return strings.Join(parts, ",")
}

var stackLoc = regexp.MustCompile(`<(?:input|eval)>:(\d+)(?::(\d+))?`)

// preludeLineBase is the first line of the prelude in stacks: no script is
// that long (SPEC §6 bounds what a run may hold far below it).
const preludeLineBase = 1_000_000

// inPrelude reports whether a stack line is a frame of the prelude.
func inPrelude(line string) bool {
	m := stackLoc.FindStringSubmatch(line)
	if m == nil {
		return false
	}
	n, err := strconv.Atoi(m[1])
	return err == nil && n >= preludeLineBase
}

// CleanStack turns a QuickJS stack into "file:line" frames of the script only.
func (p *Program) CleanStack(stack string) string { return p.cleanStack(stack) }

func (p *Program) cleanStack(stack string) string {
	var keep []string
	for _, l := range strings.Split(stack, "\n") {
		if strings.TrimSpace(l) == "" || inPrelude(l) || isPreludeFrame(l) {
			continue
		}
		l = stackLoc.ReplaceAllString(l, p.File+":$1")
		if strings.Contains(l, "<anonymous>") && !strings.Contains(l, p.File) {
			continue
		}
		keep = append(keep, strings.TrimSpace(l))
	}
	if len(keep) > 5 {
		keep = keep[:5]
	}
	return strings.Join(keep, "; ")
}

// preludeFrames are the functions of prelude.js; their frames say nothing
// about the script and would point at lines the script does not have.
var preludeFrames = []string{"at value (", "at makeCtx (", "at call (", "at handlerOf (", "at jsonCheck (", "at errInfo (", "at fmt (", "at log (", "at mark ("}

func isPreludeFrame(l string) bool {
	for _, f := range preludeFrames {
		if strings.Contains(l, f) {
			return true
		}
	}
	return false
}

func (p *Program) describeThrow(inv Invocation, name, msg, stack string) string {
	where := fmt.Sprintf("%s %s: %s threw", inv.Kind, inv.Name, inv.Phase)
	text := fmt.Sprintf("%s %s: %s", where, name, msg)
	if name == "thrown value" {
		text = fmt.Sprintf("%s %s", where, msg)
		if msg == "null" {
			// QuickJS rejects with null when it cannot even allocate the
			// "out of memory" error, and describing an error fails when no
			// memory is left; a script throwing null itself is rare.
			text += fmt.Sprintf(" — most likely the script ran out of memory (limit %s)", sizeText(inv.MemoryLimit))
		}
	}
	if s := p.cleanStack(stack); s != "" {
		text += " (" + s + ")"
	}
	if name == "TypeError" && (strings.Contains(msg, "not extensible") || strings.Contains(msg, "read-only") || strings.Contains(msg, "built-ins are shared")) {
		text += " — globals and built-ins are frozen, so that no run leaves anything behind for another: keep what must last in the state a handler returns, or in events"
	}
	return text
}

func (p *Program) scriptError(where string, err error, st *vmState) error {
	msg := err.Error()
	var qe *quickjs.Error
	if errors.As(err, &qe) {
		msg = qe.Name + ": " + qe.Message
		if s := p.cleanStack(qe.Stack); s != "" {
			msg += " (" + s + ")"
		}
	}
	switch {
	case strings.Contains(msg, "out of memory"):
		return kt.Errorf(kt.ClassLogic, "%s: the script ran out of memory (over its limit); it builds data too large for one run", where)
	case strings.Contains(msg, "stack overflow"):
		return kt.Errorf(kt.ClassLogic, "%s: stack overflow (recursion too deep): %s", where, msg)
	}
	return kt.Errorf(kt.ClassLogic, "%s: %s", where, msg)
}

// Declaration is the shape of a workflow as its script declares it.
type Declaration struct {
	Missing         bool                   `json:"missing"`
	Name            any                    `json:"name"`
	Topics          []string               `json:"topics"`
	TopicFrom       map[string]string      `json:"topicFrom"` // topic → its from: (FromAPI), as declared
	Producers       map[string]HandlerDecl `json:"producers"`
	Consumers       map[string]HandlerDecl `json:"consumers"`
	Tasks           map[string]HandlerDecl `json:"tasks"`
	Webhooks        map[string]WebhookDecl `json:"webhooks"`
	RequireApproval any                    `json:"requireApproval"`
	ShapeErrors     []string               `json:"shapeErrors"`
	// Test is the object of a test file (export default Keep.test({...}))
	// as JSON; TestError says what in it JSON cannot carry (a function).
	Test      json.RawMessage `json:"test,omitempty"`
	TestError string          `json:"testError,omitempty"`
}

// HandlerDecl describes one producer, consumer or task.
type HandlerDecl struct {
	Publishes    []string       `json:"publishes"`
	PublishesSet bool           `json:"publishesRaw"`
	Subscribe    []string       `json:"subscribe"`
	Schedule     map[string]any `json:"schedule"`
	Handler      bool           `json:"handler"`
	Prepare      bool           `json:"prepare"`
	Mutate       bool           `json:"mutate"`
	Next         bool           `json:"next"`
	Run          bool           `json:"run"`
}

// FromAPI is the one value of a topic's from: the topic is open to events
// posted through keep's API (POST …/topics/{topic}/events, keep publish).
const FromAPI = "api"

// OpenToAPI says whether the workflow declares topic as { from: "api" }.
func (d Declaration) OpenToAPI(topic string) bool {
	return slices.Contains(d.Topics, topic) && d.TopicFrom[topic] == FromAPI
}

// ConsumerOf maps each topic to the consumer that subscribes to it: the
// handler a publish to the topic wakes.
func (d Declaration) ConsumerOf() map[string]string {
	m := map[string]string{}
	for name, c := range d.Consumers {
		for _, t := range c.Subscribe {
			m[t] = name
		}
	}
	return m
}

// WorkflowName returns the declared name, or "" when it is not a string.
func (d Declaration) WorkflowName() string {
	s, _ := d.Name.(string)
	return s
}

func (p *Program) describe() (Declaration, error) {
	var d Declaration
	v, err := newSandboxVM(std, Limits{MemoryLimit: 64 << 20}, forDeclaration)
	if err != nil {
		return d, err
	}
	defer v.close()
	timer := time.AfterFunc(5*time.Second, v.vm.Interrupt)
	defer timer.Stop()
	if err := v.loadScript(p); err != nil {
		return d, err
	}
	r, err := v.enter("__keep_describe")
	if err != nil {
		return d, p.scriptError("while loading the script", err, &vmState{})
	}
	s, _ := r.(string)
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return d, fmt.Errorf("read the workflow declaration: %w", err)
	}
	return d, nil
}

func sizeText(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
