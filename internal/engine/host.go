package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/redact"
	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/transition"
)

// Per-run bounds of what a handler publishes (buffered until the commit).
const (
	MaxPublishesPerRun    = kt.MaxPublishesPerRun
	MaxPublishBytesPerRun = kt.MaxPublishBytesPerRun
)

const (
	// maxTraceText bounds one text of a trace entry, and maxTraceArgs the
	// arguments of one call as the trace keeps them.
	maxTraceText    = 4000
	maxTraceArgs    = 16 << 10
	maxTraceEntries = 2000
	maxTraceResult  = 256 << 10
	maxTraceResults = 2 << 20
	maxLogLine      = 1000
	maxLogLines     = 10000
)

// trace accumulates a run's trace; it is saved with every transition.
type trace struct {
	entries []kt.TraceEntry
	dropped int
	// results is the bytes of read results kept (maxTraceResults).
	results int
	// progressed says the run failed transiently after its call got
	// somewhere and kept it (kt.Error.Progressed): its retry is not counted.
	progressed bool
}

func loadTrace(raw json.RawMessage) *trace {
	t := &trace{}
	if len(raw) > 0 {
		// The entries as stored: a read's answer stays stored once
		// (kt.TraceEntry.StoredOnce) in the trace this run saves again.
		var w struct {
			Entries    json.RawMessage `json:"entries"`
			Dropped    int             `json:"dropped"`
			Progressed bool            `json:"progressed"`
		}
		if json.Unmarshal(raw, &w) == nil {
			entries, err := kt.StoredTraceEntries(w.Entries)
			if err != nil && len(w.Entries) > 0 && string(w.Entries) != "null" {
				return t
			}
			t.entries, t.dropped, t.progressed = entries, w.Dropped, w.Progressed
			for _, e := range entries {
				t.results += len(e.Result)
			}
		}
	}
	return t
}

// add records an entry. Every entry passes here, so this is where a trace
// is made safe to store and show: credentials masked (package redact) and
// long values cut, saying how long they were (a 20 MB write was once stored
// three times in one trace).
func (t *trace) add(e kt.TraceEntry) {
	if len(t.entries) >= maxTraceEntries {
		t.dropped++
		return
	}
	e.Text = kt.Clip(redact.String(e.Text), maxTraceText)
	e.Outcome = kt.Clip(redact.String(e.Outcome), maxTraceText)
	if e.Args != nil {
		e.Args = redact.Value(e.Args)
		if b, err := json.Marshal(e.Args); err == nil && len(b) > maxTraceArgs {
			e.Args = fmt.Sprintf("(%d bytes of arguments, not kept in the trace; the first %d: %s…)", len(b), maxTraceText/4, kt.Clip(string(b), maxTraceText/4))
		}
	}
	if len(e.Result) > maxTraceResult || t.results+len(e.Result) > maxTraceResults {
		e.Result = nil
	} else if len(e.Result) > 0 {
		var v any
		if json.Unmarshal(e.Result, &v) == nil {
			e.Result, _ = json.Marshal(redact.Value(v))
		}
		// The answer stored once: an HTTP read's parsed body is made
		// again from its body when the trace is read (issue 44).
		e = e.StoredOnce()
	}
	if e.Args != nil && e.ArgsHash == "" {
		// A write's arguments once (requested, in flight, applied): a
		// later entry of the same write says they are as before
		// (kt.TraceEntries makes it whole when the trace is read).
		for i := len(t.entries) - 1; i >= 0; i-- {
			if p := t.entries[i]; p.Method == e.Method && p.Args != nil {
				if kt.SameArgs(p.Args, e.Args) {
					e.Args, e.ArgsAsBefore = nil, true
				}
				break
			}
		}
	}
	t.results += len(e.Result)
	t.entries = append(t.entries, e)
}

func (t *trace) json() json.RawMessage {
	w := map[string]any{"entries": t.entries, "dropped": t.dropped}
	if t.progressed {
		w["progressed"] = true
	}
	b, _ := json.Marshal(w)
	return b
}

// capturedCall is the mutation a mutate phase asked for.
type capturedCall struct {
	Tool   string         `json:"tool"`
	Method string         `json:"method"`
	Args   map[string]any `json:"args"`
}

// host serves one handler phase's ctx calls and enforces SPEC §3.
type host struct {
	*runExec
	phase   hostPhase
	decl    declView
	handler string
	// released, in a dry run's prepare, is the failed run whose pinned
	// events peek sees as free (DryRun).
	released string

	// producer
	inputs      []kt.Input
	inputByKey  map[string]string
	knownInputs map[string]bool
	publishes   []transition.Publish
	// publishedBytes counts the payload bytes of publishes.
	publishedBytes int
	allowPublish   map[string]bool
	// more: a read of this step stopped at its bound while more matched
	// (connector.Result.More), so a producer that moved its state runs
	// again at once (readsOn).
	more bool
	// ahead is the page the step's plan read for prepare's first ctx.peek
	// (peekahead.go); peeks counts the phase's ctx.peek calls.
	ahead *peekAhead
	peeks int
	// mutate
	captured *capturedCall
	logLines int
	// item scripts
	task *taskState
}

// declView is the part of a declaration the host checks against.
type declView struct {
	publishes map[string]bool
	subscribe map[string]bool
}

// storeError passes a script's mistake found inside a transaction (a
// *kt.Error) on as it is, and names what failed otherwise: the store's
// error is keep's, not the script's.
func storeError(err error, what string) error {
	var ke *kt.Error
	if errors.As(err, &ke) {
		return err
	}
	return kt.Errorf(kt.ClassInternal, "%s: %v", what, err)
}

func violation(format string, args ...any) error {
	return kt.Errorf(kt.ClassLogic, "phase violation: "+format, args...)
}

func (h *host) traceCall(method string, args any, start time.Time, outcome string) {
	h.tr.add(kt.TraceEntry{At: start.UnixMilli(), Phase: string(h.phase), Kind: "call", Method: method, Args: args, Duration: time.Since(start).Milliseconds(), Outcome: outcome})
}

// call is the script.HostFunc for this phase. What crosses into keep's
// process is bounded here, whatever the call: its arguments and its answer,
// each call and the whole run (kt.MaxHostCallBytes, kt.MaxHostBytesPerRun).
func (h *host) call(method string, raw json.RawMessage) (json.RawMessage, error) {
	if err := h.countBytes(method, "its arguments", len(raw)); err != nil {
		return nil, err
	}
	res, err := h.serve(method, raw)
	if err == nil {
		err = h.countBytes(method, "keep's answer", len(res))
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// countBytes adds n bytes that crossed between the sandbox and keep to the
// run's budget, or says which bound they break.
func (h *host) countBytes(method, what string, n int) error {
	if n > kt.MaxHostCallBytes {
		return kt.OverBound(h.where(method), what+" came to", n, kt.Bound{Max: kt.MaxHostCallBytes, Unit: "bytes"},
			"one call may move at most that much between the script and keep; pass smaller pieces (and references instead of content)")
	}
	h.hostBytes += n
	if h.hostBytes > kt.MaxHostBytesPerRun {
		return kt.OverBound(h.where(method), "this run's calls moved", h.hostBytes, kt.Bound{Max: kt.MaxHostBytesPerRun, Unit: "bytes"},
			"one run may move at most that much between the script and keep in all; do less per run (a producer can return a cursor in its state and go on in its next run)")
	}
	return nil
}

// where names a call for an error: the handler and the call as the script
// wrote it.
func (h *host) where(method string) string {
	call := "ctx." + method
	if strings.HasPrefix(method, "item.") {
		call = "ctx.withItem"
	}
	return fmt.Sprintf("%s %s, %s", h.run.HandlerType, h.run.Handler, call)
}

// serve answers one call.
func (h *host) serve(method string, raw json.RawMessage) (json.RawMessage, error) {
	if h.captured != nil {
		// The mutation call is terminal (SPEC §3): nothing may follow it but
		// a log line. The script goes on after it (script.ErrSuspend), so a
		// call it makes next fails the run here, before anything is sent,
		// instead of vanishing.
		first := "ctx." + h.captured.Tool + "." + h.captured.Method
		if method == "log" {
			return h.log(raw)
		}
		if _, m, ok := h.toolMethod(method); ok && isMutation(m, raw) {
			return nil, violation("ctx.%s after %s: a second mutation in mutate; a consumer run performs at most one mutation, so neither was sent — split the work across runs (the second write in a consumer of what next publishes)", method, first)
		}
		return nil, violation("ctx.%s was called after the mutation call %s; the mutation must be the last thing mutate does (nothing was sent)", method, first)
	}
	switch method {
	case "log":
		return h.log(raw)
	case "now":
		n := h.e.NowMs() + h.clockShift
		if h.frozenNow != 0 {
			n = h.frozenNow + h.clockShift
		}
		h.tr.add(kt.TraceEntry{At: n, Phase: string(h.phase), Kind: "now", Text: fmt.Sprint(n)})
		return json.RawMessage(fmt.Sprint(n)), nil
	case "random":
		r := rand.Float64()
		if h.chanceSeed != 0 {
			// A dry run's fixed chance (unseen.go): the same sequence for
			// both versions it compares.
			h.chanceSeed = (h.chanceSeed*1103515245 + 12345) % 2147483648
			r = float64(h.chanceSeed) / 2147483648
		}
		h.tr.add(kt.TraceEntry{At: h.e.NowMs(), Phase: string(h.phase), Kind: "random", Text: fmt.Sprint(r)})
		b, _ := json.Marshal(r)
		return b, nil
	case "registerInput":
		return h.registerInput(raw)
	case "publish":
		return h.publish(raw)
	case "peek", "getByIds":
		return h.queueRead(method, raw)
	case "item.enter", "item.exit", "item.fail", "item.nested", "item.badHandler":
		return h.itemCall(method, raw)
	}
	return h.connectorCall(method, raw)
}

// log adds a script's log line to the trace, within SPEC §6's bounds.
func (h *host) log(raw json.RawMessage) (json.RawMessage, error) {
	h.logLines++
	if h.logLines > maxLogLines {
		return nil, kt.Errorf(kt.ClassLogic, "%s %s logged more than %d lines in one run; log less (keep keeps the first %d in the trace)", h.run.HandlerType, h.run.Handler, maxLogLines, maxTraceEntries)
	}
	var s string
	_ = json.Unmarshal(raw, &s)
	if len(s) > maxLogLine {
		s = s[:maxLogLine] + "…"
	}
	h.tr.add(kt.TraceEntry{At: h.e.NowMs(), Phase: string(h.phase), Kind: "log", Text: s})
	return nil, nil
}

// connectorCall serves ctx.TOOL.METHOD: checked against the phase's table,
// a read is made at once, a write goes through the ledger (captured for a
// consumer's mutate, at once for an item).
func (h *host) connectorCall(method string, raw json.RawMessage) (json.RawMessage, error) {
	tool, m, ok := h.toolMethod(method)
	if !ok {
		return nil, kt.Errorf(kt.ClassLogic, "ctx.%s does not exist", method)
	}
	args, err := h.checkArgs(tool, method, m, raw)
	if err != nil {
		return nil, err
	}
	if m.KindFor(args) == connector.KindMutate {
		if h.phase == phaseTask {
			return h.itemMutation(tool, m, args)
		}
		h.captured = &capturedCall{Tool: tool, Method: m.Name, Args: args}
		h.tr.add(kt.TraceEntry{At: h.e.NowMs(), Phase: string(h.phase), Kind: "mutation", Method: method, Args: m.Redact(args), Outcome: "requested"})
		return nil, script.ErrSuspend
	}
	argsHash := hashOf(tool, m.Name, args)
	if h.reads != nil {
		// A dry run: the read is answered from what the recorded run read.
		return h.reads.answer(method, argsHash, m.Redact(args))
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(h.ctx, h.pol.ToolTimeout)
	defer cancel()
	res := h.do(cctx, tool, m, connector.Call{Args: args})
	if res.Err != nil {
		h.traceCall(method, m.Redact(args), start, string(res.Err.Class)+": "+res.Err.Message)
		return nil, res.Err
	}
	h.more = h.more || res.More
	b, err := json.Marshal(res.Value)
	if err != nil {
		h.traceCall(method, m.Redact(args), start, "ok")
		return nil, kt.Errorf(kt.ClassInternal, "ctx.%s returned a value keep cannot encode: %v", method, err)
	}
	h.tr.add(kt.TraceEntry{At: start.UnixMilli(), Phase: string(h.phase), Kind: "call", Method: method, Args: m.Redact(args), Duration: time.Since(start).Milliseconds(), Outcome: "ok", ArgsHash: argsHash, Result: b})
	return b, nil
}

// checkArgs decodes a connector call's arguments and checks them: allowed
// in this phase, valid for the method, a string subkey.
func (h *host) checkArgs(tool, method string, m *connector.Method, raw json.RawMessage) (map[string]any, error) {
	args, err := connector.DecodeArgs(raw)
	if err != nil {
		return nil, kt.Errorf(kt.ClassLogic, "ctx.%s: %v", method, err)
	}
	if err := h.allowed(method, m.KindFor(args)); err != nil {
		return nil, err
	}
	// The grant is of what this call reaches (an HTTP method and host, a
	// database), read from its arguments as they are now; checked before
	// the connector's own checks, which may open the database.
	item, err := kt.GrantItem(tool, m.Name, args)
	if err != nil {
		return nil, kt.Errorf(kt.ClassLogic, "ctx.%s: %v", method, err)
	}
	if err := h.checkGrant(item, "ctx."+method+strings.TrimPrefix(item, tool+"."+m.Name)); err != nil {
		return nil, err
	}
	if m.Validate != nil {
		if err := m.Validate(args); err != nil {
			return nil, kt.Errorf(kt.ClassLogic, "ctx.%s: %v", method, err)
		}
	}
	if sk, ok := args["subkey"]; ok {
		s, isStr := sk.(string)
		if !isStr {
			return nil, kt.Errorf(kt.ClassLogic, "ctx.%s: subkey must be a string", method)
		}
		args["subkey"] = h.boundedID(method, "subkey", s)
	}
	return args, nil
}

func isMutation(m *connector.Method, raw json.RawMessage) bool {
	args, err := connector.DecodeArgs(raw)
	return err == nil && m.KindFor(args) == connector.KindMutate
}

func (h *host) toolMethod(method string) (string, *connector.Method, bool) {
	i := strings.IndexByte(method, '.')
	if i < 0 {
		return "", nil, false
	}
	m, err := h.reg.Method(method[:i], method[i+1:])
	if err != nil {
		return "", nil, false
	}
	return method[:i], m, true
}

// ctxPhase is the phase of keeptype's table this host serves: a task's
// run is in an item while withItem's handler runs.
func (h *host) ctxPhase() kt.CtxPhase {
	if h.phase == phaseTask && h.task != nil && h.task.item != nil {
		return kt.CtxItem
	}
	return kt.CtxPhase(h.phase)
}

// allowed applies SPEC §3's table (keeptype's ctxRules) to a connector
// call; the message says what the phase is for and where the call goes.
func (h *host) allowed(method string, kind connector.Kind) error {
	p := h.ctxPhase()
	if kt.CtxAllows(p, kt.CtxCall(kind)) {
		return nil
	}
	switch {
	case p == kt.CtxNext:
		return violation("ctx.%s: next may not call connectors; it only publishes and returns state", method)
	case p == kt.CtxMutate && kind == connector.KindRead:
		return violation("ctx.%s is a list/search read; mutate may only read by id — select in prepare and pass the data along", method)
	case p == kt.CtxProducer && kind == connector.KindMutate:
		return violation("ctx.%s is a mutation; producers only read and publish — move the write into a consumer's mutate", method)
	case p == kt.CtxWebhook && kind == connector.KindMutate:
		return violation("ctx.%s is a mutation; a webhook's handler only reads, registers inputs and publishes — move the write into a consumer's mutate", method)
	case p == kt.CtxPrepare && kind == connector.KindMutate:
		return violation("ctx.%s is a mutation; prepare only reads and selects — do the write in mutate", method)
	case p == kt.CtxTask && kind == connector.KindMutate:
		return violation("ctx.%s is a mutation outside withItem; in an item script every mutation belongs to an item: wrap it in ctx.withItem(id, title, async (ctx) => { ... })", method)
	}
	return violation("ctx.%s (%s) is not allowed in %s; it is allowed in %s", method, kind, kt.CtxPhaseTitle(p), kt.CtxAllowedIn(kt.CtxCall(kind)))
}

func (h *host) registerInput(raw json.RawMessage) (json.RawMessage, error) {
	if !kt.CtxAllows(h.ctxPhase(), kt.CallRegisterInput) {
		return nil, violation("registerInput is only allowed in %s (called in %s)", kt.CtxAllowedIn(kt.CallRegisterInput), h.phase)
	}
	var in struct {
		Source string          `json:"source"`
		Type   string          `json:"type"`
		ID     json.RawMessage `json:"id"`
		Title  any             `json:"title"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, kt.Errorf(kt.ClassLogic, "registerInput expects { source, type, id, title }: %v", err)
	}
	id := scriptID(in.ID)
	title, _ := in.Title.(string)
	switch {
	case in.Source == "" || in.Type == "":
		return nil, kt.Errorf(kt.ClassLogic, "registerInput needs source and type, e.g. { source: \"files\", type: \"file\", id, title }")
	case id == "":
		return nil, kt.Errorf(kt.ClassLogic, "registerInput needs id: the external identifier of the %s/%s input (a string)", in.Source, in.Type)
	case strings.TrimSpace(title) == "":
		return nil, kt.Errorf(kt.ClassLogic, "registerInput needs a title that says what the input is, e.g. `Order 1042 from alice@example.com`")
	case len(in.Source) > kt.MaxIDChars || len(in.Type) > kt.MaxIDChars:
		return nil, kt.OverBound(h.where("registerInput"), "the source or type has", max(len(in.Source), len(in.Type)), kt.Bound{Max: kt.MaxIDChars, Unit: "characters"}, "use the source and type a connector declares")
	}
	// A title and an id come from outside data (a mail's subject, a
	// file's name): one over keep's bound must not stop the source.
	title = h.shortTitle("registerInput", title)
	id = h.boundedID("registerInput", "id", id)
	if types, ok := h.reg.SourceAllowed(in.Source, in.Type); !ok {
		if types == nil {
			return nil, kt.Errorf(kt.ClassLogic, "registerInput: unknown source %q (known: %s)", in.Source, strings.Join(h.reg.Sources(), ", "))
		}
		return nil, kt.Errorf(kt.ClassLogic, "registerInput: source %q has no type %q (it has: %s)", in.Source, in.Type, strings.Join(types, ", "))
	}
	if err := h.checkGrant("source:"+in.Source, "registerInput with source "+in.Source); err != nil {
		return nil, err
	}
	key := in.Source + ":" + in.Type + ":" + id
	if existing, ok := h.inputByKey[key]; ok {
		return json.Marshal(existing)
	}
	if len(h.inputByKey) >= kt.MaxInputsPerRun {
		return nil, kt.OverBound(h.where("registerInput"), "this run registered", len(h.inputByKey)+1, kt.Bound{Max: kt.MaxInputsPerRun, Unit: "inputs"},
			"register fewer inputs per run: a producer can return a cursor in its state and go on in its next run")
	}
	var found kt.Input
	err := h.e.store.View(store.NoSnapshot(h.ctx), func(tx store.Tx) error { // one read
		var err error
		found, err = tx.InputGetByKey(h.run.Workflow, key)
		return err
	})
	switch {
	case err == nil:
		h.inputByKey[key] = found.ID
		h.knownInputs[found.ID] = true
		if found.Title != title {
			found.Title = title
			h.inputs = append(h.inputs, found)
		}
		return json.Marshal(found.ID)
	case !errors.Is(err, kt.ErrNotFound):
		return nil, kt.Errorf(kt.ClassInternal, "registerInput: %v", err)
	}
	now := h.e.NowMs()
	in2 := kt.Input{ID: transition.NewID(), Workflow: h.run.Workflow, Key: key, Kind: kt.KindInput, Source: in.Source, Type: in.Type, ExternalID: id, Title: title,
		CurrentAttempt: 1, CreatedBy: h.run.ID, LastRun: h.run.ID, LastVersion: h.run.Version, CreatedAt: now, UpdatedAt: now}
	h.inputs = append(h.inputs, in2)
	h.inputByKey[key] = in2.ID
	h.knownInputs[in2.ID] = true
	return json.Marshal(in2.ID)
}

// shortTitle is title within keep's bound (kt.ShortTitle); the trace says
// when it was shortened.
func (h *host) shortTitle(method, title string) string {
	short, shortened := kt.ShortTitle(title)
	if shortened {
		h.tr.add(kt.TraceEntry{At: h.e.NowMs(), Phase: string(h.phase), Kind: "log", Method: method,
			Text: fmt.Sprintf("%s: the title has %d characters, more than keep's bound of %d: shortened to %d, ending in %s (a title says what it is in a line)", h.where(method), len(title), kt.MaxTitleChars, len(short), kt.TitleEllipsis)})
	}
	return short
}

// boundedID is an id a script chose within keep's bound (kt.BoundedID);
// the trace says when it is the hash of what the script gave.
func (h *host) boundedID(method, what, id string) string {
	bounded, hashed := kt.BoundedID(id)
	if hashed {
		h.tr.add(kt.TraceEntry{At: h.e.NowMs(), Phase: string(h.phase), Kind: "log", Method: method,
			Text: fmt.Sprintf("%s: the %s has %d characters, more than keep's bound of %d: keep names it by its hash, %s (the same %s is always the same name)", h.where(method), what, len(id), kt.MaxIDChars, bounded, what)})
	}
	return bounded
}

func (h *host) publish(raw json.RawMessage) (json.RawMessage, error) {
	if !kt.CtxAllows(h.ctxPhase(), kt.CallPublish) {
		return nil, violation("publish is only allowed in %s (called in %s)", kt.CtxAllowedIn(kt.CallPublish), h.phase)
	}
	req, err := decodePublish(raw)
	if err != nil {
		return nil, err
	}
	topics, err := publishTopics(req.Topics)
	if err != nil {
		return nil, err
	}
	for _, t := range topics {
		if !h.allowPublish[t] {
			return nil, violation("publish to %q: %s %s does not declare it in publishes", t, h.run.HandlerType, h.run.Handler)
		}
	}
	msgID, inputID, err := h.eventIDs(scriptID(req.Event.MessageID), req.Event.InputID)
	if err != nil {
		return nil, err
	}
	msgID = h.boundedID("publish", "messageId", msgID)
	payload := req.Event.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	if len(payload) > MaxJSONBytes {
		return nil, kt.Errorf(kt.ClassLogic, "publish %s: the payload has %d bytes, more than the limit of %d; keep payloads small and pass references", msgID, len(payload), MaxJSONBytes)
	}
	// What a consumer is handed must be something it can pass on (the one
	// bound of JSON keep hands a handler, as the event API's).
	if d := kt.JSONDepth(payload); d > kt.MaxPayloadDepth {
		return nil, kt.Errorf(kt.ClassLogic, "publish %s: the payload nests %d levels deep, more than keep's bound of %d (a consumer returns values at most %d levels deep and could not pass it on); publish it flatter",
			msgID, d, kt.MaxPayloadDepth, kt.MaxJSONDepth)
	}
	// Publishes are buffered in the host until the run commits, outside the
	// sandbox's memory limit, and commit in one transaction: both are
	// bounded (3,000 × 1 MB events once took 7 GB and starved other workflows).
	if len(h.publishes)+len(topics) > MaxPublishesPerRun || h.publishedBytes+len(topics)*(len(payload)+len(msgID)) > MaxPublishBytesPerRun {
		return nil, kt.Errorf(kt.ClassLogic, "publish %s: one run may publish at most %d events and %d MiB in all (this run has %d events, %d bytes); publish fewer, smaller events per run — a producer can return a cursor in its state and go on in its next run",
			msgID, MaxPublishesPerRun, MaxPublishBytesPerRun>>20, len(h.publishes), h.publishedBytes)
	}
	for _, t := range topics {
		h.publishes = append(h.publishes, transition.Publish{Topic: t, MessageID: msgID, InputID: inputID, Payload: payload})
		h.publishedBytes += len(payload) + len(msgID)
	}
	h.tr.add(kt.TraceEntry{At: h.e.NowMs(), Phase: string(h.phase), Kind: "call", Method: "publish", Args: map[string]any{"topics": topics, "messageId": msgID}, Outcome: "buffered until commit"})
	return nil, nil
}

// publishCall is what ctx.publish sends the host.
type publishCall struct {
	Topics any `json:"topics"`
	Event  *struct {
		MessageID json.RawMessage `json:"messageId"`
		InputID   *string         `json:"inputId"`
		Payload   json.RawMessage `json:"payload"`
	} `json:"event"`
}

// decodePublish reads a publish call. Chapter 06 shows a flat event ({
// messageId, subject, from }); keep's events carry data under payload (ch
// 06a). Fields keep does not know would be dropped silently, so they are
// refused by name.
func decodePublish(raw json.RawMessage) (publishCall, error) {
	var req publishCall
	if err := json.Unmarshal(raw, &req); err != nil || req.Event == nil {
		return req, kt.Errorf(kt.ClassLogic, "publish(topic, { messageId, payload }) expects a topic and an event object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &struct {
		Event *map[string]json.RawMessage `json:"event"`
	}{&fields}); err != nil {
		return req, nil
	}
	var unknown []string
	for k := range fields {
		if k != "messageId" && k != "inputId" && k != "payload" {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return req, kt.Errorf(kt.ClassLogic, "publish: the event has unknown field(s) %s; an event is { messageId, inputId, payload } — put the data under payload, e.g. { messageId, inputId, payload: { %s } }",
			strings.Join(unknown, ", "), strings.Join(unknown, ", "))
	}
	return req, nil
}

// publishTopics reads publish's first argument: a topic or an array of them.
func publishTopics(v any) ([]string, error) {
	switch t := v.(type) {
	case string:
		return []string{t}, nil
	case []any:
		topics := make([]string, 0, len(t))
		for _, x := range t {
			s, ok := x.(string)
			if !ok {
				return nil, kt.Errorf(kt.ClassLogic, "publish: topics must be strings")
			}
			topics = append(topics, s)
		}
		return topics, nil
	}
	return nil, kt.Errorf(kt.ClassLogic, "publish: the first argument must be a topic name or an array of them")
}

// eventIDs checks an event's messageId and inputId by phase: a producer's
// event belongs to an input it registered (its id the default messageId);
// next's events get their inputs from the reserved events and need a
// stable messageId.
func (h *host) eventIDs(msgID string, input *string) (string, string, error) {
	if h.phase != phaseProducer && h.phase != phaseWebhook {
		if input != nil {
			return "", "", violation("publish in next may not pass inputId: keep links the event to the inputs of the reserved events itself")
		}
		if msgID == "" {
			return "", "", kt.Errorf(kt.ClassLogic, "publish in next needs a messageId that is stable across retries, e.g. `row:${prepared.data.id}`")
		}
		return msgID, "", nil
	}
	inputID := ""
	if input != nil {
		inputID = *input
	}
	if inputID == "" {
		return "", "", kt.Errorf(kt.ClassLogic, "publish from a producer or a webhook needs inputId: register the input first (const inputId = ctx.registerInput({...})) and pass it")
	}
	if !h.knownInputs[inputID] {
		return "", "", kt.Errorf(kt.ClassLogic, "publish: inputId %q was not returned by registerInput in this run", inputID)
	}
	if msgID == "" {
		msgID = inputID
	}
	return msgID, inputID, nil
}

// readIDs reads getByIds' ids: strings, each asked for once, at most
// kt.MaxReadIDs of them.
func readIDs(where string, raw []any) ([]string, error) {
	seen := make(map[string]bool, len(raw))
	ids := make([]string, 0, len(raw))
	for _, v := range raw {
		s, ok := v.(string)
		if !ok {
			return nil, kt.Errorf(kt.ClassLogic, "%s: ids must be strings", where)
		}
		s, _ = kt.BoundedID(s) // as publish named it
		if !seen[s] {
			seen[s] = true
			ids = append(ids, s)
		}
	}
	if len(ids) > kt.MaxReadIDs {
		return nil, kt.OverBound(where, "the call asks for", len(ids), kt.Bound{Max: kt.MaxReadIDs, Unit: "distinct ids"}, "ask for fewer events per call")
	}
	return ids, nil
}

// scriptID reads an id a script passed as a string or a number.
// scriptID is an id a script gave (a string, or a number as JavaScript
// writes it: JSON.stringify's text, which is String(n), so 1795879280201
// stays 1795879280201, never 1.795879280201e+12 — issue 42); "" for
// anything else.
func scriptID(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	case c == '-' || c >= '0' && c <= '9':
		var n json.Number
		if json.Unmarshal(raw, &n) == nil {
			return n.String()
		}
	}
	return ""
}

type eventView struct {
	MessageID string          `json:"messageId"`
	Topic     string          `json:"topic"`
	Payload   json.RawMessage `json:"payload"`
	Attempt   int             `json:"attempt"`
	CreatedAt int64           `json:"createdAt"`
}

func (h *host) queueRead(method string, raw json.RawMessage) (json.RawMessage, error) {
	if !kt.CtxAllows(h.ctxPhase(), kt.CallEvents) {
		return nil, violation("%s is only allowed in %s (called in %s)", method, kt.CtxAllowedIn(kt.CallEvents), h.phase)
	}
	var req struct {
		Topic string   `json:"topic"`
		Limit *float64 `json:"limit"`
		IDs   []any    `json:"ids"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, kt.Errorf(kt.ClassLogic, "%s: bad arguments: %v", method, err)
	}
	if !h.decl.subscribe[req.Topic] {
		return nil, violation("%s(%q): consumer %s does not subscribe to that topic", method, req.Topic, h.handler)
	}
	ids, err := readIDs(h.where(method), req.IDs)
	if err != nil {
		return nil, err
	}
	limit := 100
	if req.Limit != nil {
		limit = int(*req.Limit)
	}
	if method == "peek" && (limit < 1 || limit > kt.MaxReadIDs) {
		return nil, kt.Errorf(kt.ClassLogic, "peek: limit must be between 1 and %d, got %d", kt.MaxReadIDs, limit)
	}
	evs, ahead := h.readAheadFor(method, raw)
	if h.synth != nil {
		evs, ahead = synthEvents(h.synth, method, req.Topic, limit, ids), true
	}
	if !ahead {
		vctx := h.ctx
		if method == "peek" && h.released == "" {
			vctx = store.NoSnapshot(vctx) // one read
		}
		err = h.e.store.View(vctx, func(tx store.Tx) error {
			var err error
			evs, err = h.readEvents(tx, method, req.Topic, limit, ids)
			return err
		})
	}
	if err != nil {
		return nil, storeError(err, method)
	}
	for _, ev := range evs {
		if ev.Status == kt.EventPending {
			h.sawPending(ev)
		}
	}
	if method == "peek" {
		h.learnPeek(raw, req.Topic, limit)
	}
	page, err := peekPage(evs)
	h.tr.add(kt.TraceEntry{At: h.e.NowMs(), Phase: string(h.phase), Kind: "call", Method: method, Args: map[string]any{"topic": req.Topic}, Outcome: fmt.Sprintf("%d events", len(evs))})
	return page, err
}

// readEvents reads what ctx.peek or ctx.getByIds asks for.
func (h *host) readEvents(tx store.Tx, method, topic string, limit int, ids []string) (evs []kt.Event, err error) {
	if method == "peek" {
		// Large events: fewer than limit, read no further than the
		// bound of one answer (1,000 of 1 MiB would be 1 GiB here).
		if evs, _, err = tx.EventsPendingWithin(h.run.Workflow, topic, limit, kt.MaxHostCallBytes/2); err != nil || h.released == "" {
			return evs, err
		}
		// A dry run sees the failed run's pinned events as its retry
		// would: released.
		pinned, err := tx.EventsReservedBy(h.released)
		for _, ev := range pinned {
			if ev.Topic == topic && ev.Status == kt.EventPending && len(evs) < limit {
				evs = append(evs, ev)
			}
		}
		sort.Slice(evs, func(i, j int) bool { return evs[i].ID < evs[j].ID })
		return evs, err
	}
	// The answer is bounded as it is read, not after: 1,500 copies
	// of one 1 MiB event once took 5.7 GiB here.
	size := 0
	for _, id := range ids {
		ev, err := tx.EventGet(h.run.Workflow, topic, id)
		if errors.Is(err, kt.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if size += len(ev.Payload) + len(ev.MessageID); size > kt.MaxHostCallBytes {
			return nil, kt.OverBound(h.where(method), "the events asked for come to at least", size, kt.Bound{Max: kt.MaxHostCallBytes, Unit: "bytes"},
				"ask for fewer events per call")
		}
		evs = append(evs, ev)
	}
	return evs, nil
}
