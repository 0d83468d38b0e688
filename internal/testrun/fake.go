package testrun

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// fakes are one case's connectors: every method of the workflow's real
// connectors, as declared (kind, identity, targets, validation, payload
// comparison, reconcile or not), doing nothing outside. Reads answer from
// the case's table; writes are recorded, applied by key, and found by
// reconcile exactly when applied.
type fakes struct {
	c  *Case
	mu sync.Mutex
	// used counts the faults taken, per method and entry.
	used      map[string][]int
	applied   map[string]any // by idempotency key: the write's answer
	writes    []write        // applied, in order
	unmatched []string
}

// write is one write a fake applied.
type write struct {
	Tool    string         `json:"tool"`
	Target  string         `json:"target"`
	Payload map[string]any `json:"payload"`
	Key     string         `json:"-"`
}

func newFakes(c *Case) *fakes {
	return &fakes{c: c, used: map[string][]int{}, applied: map[string]any{}}
}

// registry is base's connectors with fakes in place of what they do.
func (f *fakes) registry(base *connector.Registry) *connector.Registry {
	var cs []*connector.Connector
	for _, c := range base.Connectors() {
		fc := &connector.Connector{Name: c.Name, Doc: c.Doc, Sources: c.Sources, Methods: map[string]*connector.Method{}}
		for name, m := range c.Methods {
			fm := *m
			full := c.Name + "." + name
			real := m
			fm.Do = func(ctx context.Context, call connector.Call) connector.Result { return f.do(full, real, call) }
			if m.Reconcile != nil {
				fm.Reconcile = func(ctx context.Context, call connector.Call) (connector.ReconcileStatus, any, error) {
					return f.reconcile(call)
				}
			}
			fc.Methods[name] = &fm
		}
		cs = append(cs, fc)
	}
	return connector.NewRegistry(cs...)
}

// fakeCall is one call a fake answers: the method ("tool.method"), its
// declaration, the call, what it targets and whether it writes.
type fakeCall struct {
	method string
	m      *connector.Method
	call   connector.Call
	target string
	writes bool
}

func (f *fakes) do(method string, m *connector.Method, call connector.Call) connector.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	fc := fakeCall{method: method, m: m, call: call, target: method, writes: m.KindFor(call.Args) == connector.KindMutate}
	if m.Target != nil {
		fc.target = m.Target(call.Args)
	}
	if ft := f.takeFault(method, call.Args); ft != nil {
		return f.failWith(fc, ft)
	}
	answer, found := f.answer(method, call.Args)
	if !fc.writes {
		if !found {
			f.unmatched = append(f.unmatched, f.noAnswer(method, call.Args))
			return connector.Result{Err: kt.Errorf(kt.ClassLogic, "keep test: the test declares no answer for %s(%s)", method, jsonText(call.Args))}
		}
		return connector.Result{Value: answer}
	}
	if !found {
		answer = map[string]any{}
	}
	f.apply(fc, answer)
	return connector.Result{Value: answer, Outcome: connector.OutcomeApplied}
}

func (f *fakes) apply(c fakeCall, answer any) {
	_, payload := c.m.Split(c.call.Args)
	f.writes = append(f.writes, write{Tool: c.method, Target: c.target, Payload: payload, Key: c.call.IdempotencyKey})
	f.applied[c.call.IdempotencyKey] = answer
}

// failWith answers a fault as connector.FaultClasses says a connector
// does (a read's lost answer or 5xx is transient: nothing changed).
func (f *fakes) failWith(c fakeCall, ft *Fault) connector.Result {
	fc := connector.FaultClasses[ft.Kind]
	why := faultText[ft.Kind]
	target := c.target
	if !c.writes {
		class := kt.ClassTransient
		if fc.Class == kt.ClassPermission {
			class = fc.Class
		}
		e := kt.Errorf(class, "%s failed: %s (the test's fault %q)", target, why, ft.Name)
		if ft.Kind == kt.FaultStatus429 {
			e.RetryAfter = time.Duration(ft.RetryAfter) * time.Second
		}
		return connector.Result{Err: e}
	}
	if fc.Applied {
		answer, found := f.answer(c.method, c.call.Args)
		if !found {
			answer = map[string]any{}
		}
		f.apply(c, answer)
	}
	e := kt.Errorf(fc.Class, "%s: %s (the test's fault %q)", target, why, ft.Name)
	if ft.Kind == kt.FaultStatus429 {
		e.RetryAfter = time.Duration(ft.RetryAfter) * time.Second
	}
	return connector.Result{Outcome: fc.Outcome, Err: e}
}

// faultText is what a connector's error says of each fault, as a real
// service's answer would read.
var faultText = map[string]string{
	kt.FaultTimeoutAfterApply: "timed out: no answer came back",
	kt.FaultTimeout:           "timed out: no answer came back",
	kt.FaultDropAfterApply:    "the connection closed without an answer",
	kt.FaultDrop:              "the connection closed without an answer",
	kt.FaultStatus500After:    "answered 500 Internal Server Error",
	kt.FaultStatus500:         "answered 500 Internal Server Error",
	kt.FaultStatus503:         "answered 503 Service Unavailable",
	kt.FaultStatus429:         "answered 429 Too Many Requests",
	kt.FaultStatus401:         "answered 401 Unauthorized: the credential is not accepted",
	kt.FaultStatus403:         "answered 403 Forbidden: the credential may not do this",
}

// reconcile finds a write by its key, as a real connector finds its
// marker: applied exactly when a fake applied it.
func (f *fakes) reconcile(call connector.Call) (connector.ReconcileStatus, any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.applied[call.IdempotencyKey]; ok {
		return connector.ReconcileApplied, v, nil
	}
	return connector.ReconcileFailed, nil, nil
}

// takeFault uses up one armed fault of method whose arguments match.
func (f *fakes) takeFault(method string, args map[string]any) *Fault {
	fs := f.c.Faults[method]
	if f.used[method] == nil {
		f.used[method] = make([]int, len(fs))
	}
	for i := range fs {
		if f.used[method][i] < fs[i].Times && matches(fs[i].Args, args) {
			f.used[method][i]++
			return &fs[i]
		}
	}
	return nil
}

func (f *fakes) answer(method string, args map[string]any) (any, bool) {
	for _, a := range f.c.Answers[method] {
		if matches(a.Args, args) {
			return a.Answer, true
		}
	}
	return nil, false
}

// noAnswer says a read the test did not declare, and what it declares.
func (f *fakes) noAnswer(method string, args map[string]any) string {
	msg := fmt.Sprintf("the workflow called %s(%s), and the test declares no answer for it", method, jsonText(args))
	as := f.c.Answers[method]
	if len(as) == 0 {
		var have []string
		for m := range f.c.Answers {
			have = append(have, m)
		}
		sort.Strings(have)
		if len(have) == 0 {
			return msg + "; its answers declare nothing: write answers: { \"" + method + "\": [{ args: {...}, answer: ... }] }"
		}
		return msg + "; its answers declare " + strings.Join(have, ", ") + ": add \"" + method + "\": [{ args: {...}, answer: ... }]"
	}
	var decl []string
	for _, a := range as {
		if a.Args == nil {
			decl = append(decl, "any arguments")
			continue
		}
		decl = append(decl, jsonText(a.Args))
	}
	return msg + "; it declares " + method + " for " + strings.Join(decl, ", ")
}

// matches says whether every argument want gives equals the call's (as
// JSON: 1 and 1.0 are equal); nil matches any call.
func matches(want, got map[string]any) bool {
	for k, v := range want {
		g, ok := got[k]
		if !ok || !sameJSON(v, g) {
			return false
		}
	}
	return true
}

func sameJSON(a, b any) bool {
	return reflect.DeepEqual(normal(a), normal(b))
}

// normal is v as JSON decodes it (numbers float64, objects map[string]any).
func normal(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
