// Package connector defines what a connector declares about its methods
// (kind, identity params, reconcile, comparePayload, error classes) and the
// registry the engine looks them up in. Connectors declare their methods as
// data so that validation, the engine's phase rules and the ledger all read
// the same spec.
package connector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/redact"
)

// UserAgent is the User-Agent of every HTTP request keep's connectors send
// (set after the script's headers, so a script cannot change it). keep
// serve refuses a state change that carries it: a workflow never acts on
// keep through keep's own API.
const UserAgent = "keep"

// Kind is what a method does to the outside world; the phase rules of SPEC §3 are written in kinds.
type Kind string

const (
	KindRead     Kind = "read"     // list/search
	KindReadByID Kind = "readById" // get one thing by its identifier
	KindMutate   Kind = "mutate"   // a side effect
)

// Call is one invocation of a method.
type Call struct {
	Args map[string]any
	// IdempotencyKey is stable for one mutation identity; connectors pass it to
	// the external system where it allows (a header, a message id, a marker).
	IdempotencyKey string
	// Secret opens the secrets a call names as {secret:NAME} (FillSecrets);
	// nil where none may be named.
	Secret SecretFunc
}

// SecretFunc opens a named secret at the moment of a call, for a request
// to host (as a grant names it: "api.crm.example", "127.0.0.1:8090"; ""
// when the request's host cannot be read, which no secret may go to). A
// name keep does not have is an error wrapping kt.ErrNotFound; a *kt.Error
// (a secret not granted, or not scoped to host) is the call's error as it
// is.
type SecretFunc func(name, host string) (string, error)

const secretOpen, secretClose = "{secret:", "}"

// FillSecrets returns s with every {secret:NAME} replaced by the secret's
// value. Only the request that goes out carries the value: the arguments
// keep records, hashes, traces and shows keep the placeholder. A name keep
// does not have is a permission error whose card says `keep secret set
// NAME`.
// host is where the text goes (SecretFunc).
func FillSecrets(s, host string, open SecretFunc) (string, error) {
	return FillSecretsEscaped(s, host, open, nil)
}

// FillSecretsEscaped is FillSecrets writing each value through escape (a
// secret in a URL's query goes url.QueryEscape'd); nil writes it as it is.
func FillSecretsEscaped(s, host string, open SecretFunc, escape func(string) string) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(s, secretOpen)
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		j := strings.Index(s[i+len(secretOpen):], secretClose)
		if j < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		name := s[i+len(secretOpen) : i+len(secretOpen)+j]
		if err := kt.CheckSecretName(name); err != nil {
			return "", kt.Errorf(kt.ClassLogic, "{secret:%s}: %v", name, err)
		}
		if open == nil {
			return "", kt.Errorf(kt.ClassLogic, "{secret:%s}: secrets cannot be named here", name)
		}
		v, err := open(name, host)
		if errors.Is(err, kt.ErrNotFound) {
			return "", kt.Errorf(kt.ClassPermission, "the call names {secret:%s}, and keep has no secret of that name%s", name, kt.SecretSuffix(name))
		}
		var ke *kt.Error
		if errors.As(err, &ke) {
			return "", ke
		}
		if err != nil {
			return "", kt.Errorf(kt.ClassInternal, "open the secret %s: %v", name, err)
		}
		if escape != nil {
			v = escape(v)
		}
		b.WriteString(s[:i])
		b.WriteString(v)
		s = s[i+len(secretOpen)+j+len(secretClose):]
	}
}

// NamesSecret reports whether s holds a {secret:NAME}.
func NamesSecret(s string) bool {
	i := strings.Index(s, secretOpen)
	return i >= 0 && strings.Contains(s[i:], secretClose)
}

// FillHeaders returns a copy of a header object ({name: value}) with the
// secrets its values name filled in (FillSecrets), for a request to host.
func FillHeaders(h any, host string, open SecretFunc) (map[string]any, error) {
	hm, _ := h.(map[string]any)
	if hm == nil {
		return nil, nil
	}
	out := make(map[string]any, len(hm))
	for k, v := range hm {
		sv, ok := v.(string)
		if !ok {
			out[k] = v
			continue
		}
		filled, err := FillSecrets(sv, host, open)
		if err != nil {
			var ke *kt.Error
			if errors.As(err, &ke) {
				ke.Message = "header " + k + ": " + ke.Message
			}
			return nil, err
		}
		out[k] = filled
	}
	return out, nil
}

// Outcome of a mutation as the connector saw it.
type Outcome int

const (
	OutcomeApplied   Outcome = iota // the write happened; Result holds its result
	OutcomeFailed                   // the write definitely did not happen; Err says why
	OutcomeUncertain                // the write may or may not have happened
)

func (o Outcome) String() string {
	switch o {
	case OutcomeApplied:
		return "applied"
	case OutcomeFailed:
		return "failed"
	case OutcomeUncertain:
		return "uncertain"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Result is what a connector method returns.
type Result struct {
	Value   any
	Outcome Outcome
	Err     *kt.Error
	// More, for a read, says it stopped at its bound while more matched
	// (email.search's max): the next call, from the cursor it returned,
	// reads on. A producer that made such a read and moved its state runs
	// again at once, not at its next scheduled time.
	More bool
}

// ReconcileStatus is the answer of a reconcile method (ch 13 §13.6.2).
type ReconcileStatus string

const (
	ReconcileApplied ReconcileStatus = "applied"
	ReconcileFailed  ReconcileStatus = "failed"
	ReconcileRetry   ReconcileStatus = "retry"
)

// Comparison is the answer of comparePayload (ch 14 §14.5).
type Comparison string

const (
	Equivalent  Comparison = "equivalent"
	Minor       Comparison = "minor"
	Significant Comparison = "significant"
)

// Method is one method's declaration and implementation.
type Method struct {
	Name string
	// Kind is the method's kind; KindOf, when set, decides it per call
	// (http.request is a read for GET and a mutation for POST).
	Kind   Kind
	KindOf func(args map[string]any) Kind
	// ReadsBy, beside a KindOf that uses it, says which calls write
	// plainly enough for the sandbox to tell them before keep is asked
	// (Registry.WriteRules). A KindOf without it: the sandbox asks.
	ReadsBy *kt.ReadsBy
	// Identity lists the params that name the target of a mutation; the others are payload.
	Identity []string
	// Secret lists params whose values are never written to traces or the ledger's previews.
	Secret []string
	// Validate checks arguments before anything is recorded; its error is a logic error.
	Validate func(args map[string]any) error
	// Do performs the call. For reads, a non-nil Err aborts the run with its class.
	Do func(ctx context.Context, c Call) Result
	// Reconcile, when set, finds out whether an uncertain mutation happened.
	Reconcile func(ctx context.Context, c Call) (ReconcileStatus, any, error)
	// ReconcileWhen, when set, says per call whether Reconcile can be used
	// (http can reconcile only when the script gave a probe).
	ReconcileWhen func(args map[string]any) bool
	// Evidence, when set, names what a person looks for at the target to
	// tell whether a write whose outcome keep could not establish happened
	// (email.send: its Message-ID, in the recipient's mailbox or in Sent),
	// and where: every card of such a write says it (engine's
	// unknownOutcome), whatever the last answer of a check was.
	Evidence func(c Call) (mark, where string)
	// ComparePayload compares the payload of an applied mutation with a new one.
	ComparePayload func(old, new map[string]any) Comparison
	// Target renders the target of a call for people, e.g. "POST http://x/orders".
	Target func(args map[string]any) string
	// Scopes are the OAuth scopes any one of which lets a call through; the
	// first is what `keep connect` asks for when a workflow uses the method.
	Scopes []string
	// ReconcileScopes, when the write's scope cannot read what reconcile
	// looks at (gmail.send cannot read Sent), are the scopes reconcile needs
	// (any one); `keep connect` asks for the first too.
	ReconcileScopes []string
	// RequiresApproval makes every call of this method wait for a person.
	RequiresApproval bool
	// Doc says what a script author needs: docs/scripts.md is generated
	// from it (`keep connectors --markdown`), and a test fails when a method
	// has none or the document is stale.
	Doc MethodDoc
}

// MethodDoc describes a method for script authors.
type MethodDoc struct {
	// Summary says what the method does, in a sentence.
	Summary string
	// Kind says which calls are reads and which writes, when KindOf decides.
	Kind string
	// Params are its arguments (one object: ctx.tool.method({ ... })).
	Params []Param
	// Result is the shape of what it returns.
	Result string
	// ResultTS is what it returns as a TypeScript type expression (keep
	// types writes it into keep.d.ts; a test fails on a method without one).
	ResultTS string
	// KindArgs, for a method whose kind KindOf decides per call, is for
	// each kind a TypeScript type that the arguments of such a call have
	// (http.request: a write has a method other than GET or HEAD), so
	// keep.d.ts offers a phase only the calls it may make.
	KindArgs map[Kind]string
	// Reconcile says how keep finds out whether an uncertain write happened.
	Reconcile string
	// Errors says what failures a script sees and how keep treats them.
	Errors string
	// Limits says what the service limits (rates, quotas, page sizes) and
	// what keep does at them (pacing, paging, retrying).
	Limits string
	// Needs names what the service must grant beside Scopes (Slack's bot
	// scopes), for the call and for its reconcile.
	Needs string
}

// Param is one argument of a method.
type Param struct {
	Name string `json:"name"`
	// Type is the value's type in words, for people.
	Type string `json:"type"`
	// TS is its TypeScript type expression, when Type is not one of the
	// words TSType reads itself (string, number, boolean).
	TS       string `json:"ts,omitempty"`
	Required bool   `json:"required"`
	Doc      string `json:"doc"`
}

// TSType is the parameter's TypeScript type, or "" when the declaration
// does not say it.
func (p Param) TSType() string {
	if p.TS != "" {
		return p.TS
	}
	switch p.Type {
	case "string", "number", "boolean":
		return p.Type
	case "array of strings":
		return "string[]"
	case "string or array of strings":
		return "string | string[]"
	case "array of strings, numbers or booleans":
		return "Array<string | number | boolean>"
	}
	return ""
}

// KindFor returns the kind of one call.
func (m *Method) KindFor(args map[string]any) Kind {
	if m.KindOf != nil {
		return m.KindOf(args)
	}
	return m.Kind
}

// CanReconcile reports whether an uncertain outcome of this call can be reconciled.
func (m *Method) CanReconcile(args map[string]any) bool {
	if m.Reconcile == nil {
		return false
	}
	if m.ReconcileWhen != nil {
		return m.ReconcileWhen(args)
	}
	return true
}

// Connector is a named set of methods.
type Connector struct {
	Name string
	// Doc says what the connector reaches and how it is set up.
	Doc     string
	Methods map[string]*Method
	// Sources lists the input sources and types registerInput accepts from this connector.
	Sources map[string][]string
}

// Registry holds the connectors available to scripts.
type Registry struct {
	byName map[string]*Connector
	tools  map[string][]string    // Tools, made once
	writes map[string]*kt.ReadsBy // WriteRules, made once
}

// NewRegistry builds a registry from connectors.
func NewRegistry(cs ...*Connector) *Registry {
	r := &Registry{byName: map[string]*Connector{}}
	for _, c := range cs {
		r.byName[c.Name] = c
	}
	r.tools, r.writes = r.makeTools(), r.makeWriteRules()
	return r
}

// Method finds tool.method.
func (r *Registry) Method(tool, method string) (*Method, error) {
	c, ok := r.byName[tool]
	if !ok {
		return nil, fmt.Errorf("there is no connector named %q", tool)
	}
	m, ok := c.Methods[method]
	if !ok {
		return nil, fmt.Errorf("connector %q has no method %q", tool, method)
	}
	return m, nil
}

// Writes reports whether a call of tool.method with these arguments
// writes; an unknown method writes nothing.
func (r *Registry) Writes(tool, method string, args map[string]any) bool {
	m, err := r.Method(tool, method)
	return err == nil && m.KindFor(args) == KindMutate
}

// Tools lists each connector's method names, for ctx and for validation:
// made once (every handler call sends it), shared by its callers, who only
// read it.
func (r *Registry) Tools() map[string][]string { return r.tools }

// WriteRules are the methods ("tool.method") whose calls the sandbox can
// tell are writes before keep is asked: nil, every call (Kind is KindMutate);
// else those its ReadsBy does not call reads. A consumer's mutate hands
// them to the sandbox (script.Invocation.Writes).
func (r *Registry) WriteRules() map[string]*kt.ReadsBy { return r.writes }

func (r *Registry) makeWriteRules() map[string]*kt.ReadsBy {
	out := map[string]*kt.ReadsBy{}
	for name, c := range r.byName {
		for _, m := range c.Methods {
			switch {
			case m.KindOf == nil && m.Kind == KindMutate:
				out[name+"."+m.Name] = nil
			case m.KindOf != nil && m.ReadsBy != nil:
				out[name+"."+m.Name] = m.ReadsBy
			}
		}
	}
	return out
}

func (r *Registry) makeTools() map[string][]string {
	out := map[string][]string{}
	for name, c := range r.byName {
		ms := []string{}
		for m := range c.Methods {
			ms = append(ms, m)
		}
		sort.Strings(ms)
		out[name] = ms
	}
	return out
}

// SourceAllowed reports whether registerInput may use source/type.
func (r *Registry) SourceAllowed(source, typ string) ([]string, bool) {
	for _, c := range r.byName {
		if types, ok := c.Sources[source]; ok {
			for _, t := range types {
				if t == typ {
					return types, true
				}
			}
			return types, false
		}
	}
	return nil, false
}

// SourceTypes maps every known source to its types, for validation.
func (r *Registry) SourceTypes() map[string][]string {
	out := map[string][]string{}
	for _, c := range r.byName {
		for s, types := range c.Sources {
			out[s] = append([]string(nil), types...)
		}
	}
	return out
}

// Sources lists every known source.
func (r *Registry) Sources() []string {
	var out []string
	for _, c := range r.byName {
		for s := range c.Sources {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// DecodeArgs reads a script's JSON arguments as an object.
func DecodeArgs(raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("arguments must be one object, like { path: \"a.txt\" }")
	}
	return m, nil
}

// Split separates identity params from payload params.
func (m *Method) Split(args map[string]any) (identity, payload map[string]any) {
	identity, payload = map[string]any{}, map[string]any{}
	for k, v := range args {
		if k == "subkey" {
			continue
		}
		isID := false
		for _, id := range m.Identity {
			if id == k {
				isID = true
			}
		}
		if isID {
			identity[k] = v
		} else {
			payload[k] = v
		}
	}
	return identity, payload
}

// Redact returns args with secret params and every credential masked
// (package redact), for traces, previews and cards.
func (m *Method) Redact(args map[string]any) map[string]any {
	out := redact.Map(args)
	for _, s := range m.Secret {
		if _, ok := out[s]; ok {
			out[s] = redact.Mask
		}
	}
	return out
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

// ListWith is a list that carries properties beside its items (gmail.search's
// lastCursor): scripts receive an array with those properties set.
func ListWith(items []any, props map[string]any) map[string]any {
	out := map[string]any{"$array": items}
	for k, v := range props {
		out[k] = v
	}
	return out
}

// IsTimeout reports whether err is a deadline or a network timeout: for a
// write, a timeout after the request went out leaves its outcome unknown.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// CleanErr says a transport error for people: without the URL wrapper
// (the target is said elsewhere, redacted), "timed out" for a timeout.
func CleanErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if IsTimeout(err) {
		return "timed out"
	}
	return err.Error()
}

// ComparePayloadOf compares the named payload params of two calls of a
// write: all the same is equivalent, anything else significant (a person
// looks before a changed write is sent for work already done).
func ComparePayloadOf(names ...string) func(old, new map[string]any) Comparison {
	return func(old, new map[string]any) Comparison {
		for _, n := range names {
			if fmt.Sprint(old[n]) != fmt.Sprint(new[n]) {
				return Significant
			}
		}
		return Equivalent
	}
}
