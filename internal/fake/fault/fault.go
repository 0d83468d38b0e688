// Package fault is the fault injection every fake of internal/fake shares:
// the faults a test (or a person trying keep) arms through a fake's
// POST /_admin/faults, and how a fake answers under one — the write
// applied and its answer lost, or nothing applied and an error answered in
// the service's own format. The connectors' shared suite (connectortest)
// arms the same kinds on every fake.
//
// It imports keeptype (the kinds' names) and the standard library only.
package fault

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// The kinds every fake knows (keeptype's, which production code uses). A
// fake may know more of its own (Google's "revoke", a Slack error string);
// Set.Arm takes those when the fake's Extra says so.
const (
	TimeoutAfterApply = kt.FaultTimeoutAfterApply
	DropAfterApply    = kt.FaultDropAfterApply
	Status500After    = kt.FaultStatus500After
	Timeout           = kt.FaultTimeout
	Drop              = kt.FaultDrop
	Status429         = kt.FaultStatus429
	Status500         = kt.FaultStatus500
	Status503         = kt.FaultStatus503
	Status401         = kt.FaultStatus401
	Status403         = kt.FaultStatus403
)

// Kinds says what each common kind does.
var Kinds = kt.FaultKinds

// Fault is one armed fault: the next Count calls of Method fail so.
type Fault struct {
	Method     string `json:"method"`
	Fault      string `json:"fault"`
	Count      int    `json:"count"`
	RetryAfter int    `json:"retryAfter,omitempty"`
}

// AfterApply reports whether the write is applied before the fault.
func (f *Fault) AfterApply() bool { return strings.HasSuffix(f.Fault, "_after_apply") }

// Service is how one fake answers an error in its own format.
type Service interface {
	// Error answers status code (429, 5xx, 401, 403) as the service does.
	Error(w http.ResponseWriter, r *http.Request, code int)
}

// Set holds the armed faults of one fake.
type Set struct {
	mu    sync.Mutex
	armed map[string][]*Fault
	// Extra, when set, accepts kinds of the fake's own beside Kinds.
	Extra func(kind string) bool
	// Example is the body shown when an arm request is malformed.
	Example string
}

// Arm adds f (Count 0 is 1).
func (s *Set) Arm(f Fault) error {
	if f.Method == "" || f.Fault == "" {
		return fmt.Errorf("give %s", s.Example)
	}
	if _, ok := Kinds[f.Fault]; !ok && (s.Extra == nil || !s.Extra(f.Fault)) {
		return fmt.Errorf("unknown fault %s; known: %s", f.Fault, strings.Join(KindNames(), ", "))
	}
	if f.Count <= 0 {
		f.Count = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.armed == nil {
		s.armed = map[string][]*Fault{}
	}
	s.armed[f.Method] = append(s.armed[f.Method], &f)
	return nil
}

// KindNames lists the common kinds, sorted.
func KindNames() []string {
	out := make([]string, 0, len(Kinds))
	for k := range Kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Take uses up one armed fault of method; nil when none is armed.
func (s *Set) Take(method string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs := s.armed[method]
	if method == "" || len(fs) == 0 {
		return nil
	}
	f := *fs[0]
	if fs[0].Count--; fs[0].Count <= 0 {
		s.armed[method] = fs[1:]
	}
	return &f
}

// Armed lists the faults still armed.
func (s *Set) Armed() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Fault{}
	for _, fs := range s.armed {
		for _, f := range fs {
			out = append(out, *f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Method < out[j].Method })
	return out
}

// AdminArm serves POST /_admin/faults: it arms the fault in the body and
// answers it as armed.
func (s *Set) AdminArm(w http.ResponseWriter, r *http.Request) {
	var f Fault
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&f); err != nil {
		http.Error(w, "give "+s.Example, http.StatusBadRequest)
		return
	}
	if err := s.Arm(f); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if f.Count <= 0 {
		f.Count = 1
	}
	answer(w, f)
}

// AdminList serves GET /_admin/faults: {"faults": [...]} still armed.
func (s *Set) AdminList(w http.ResponseWriter, r *http.Request) {
	answer(w, map[string]any{"faults": s.Armed()})
}

func answer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	json.NewEncoder(w).Encode(v)
}

// Serve runs one request of a fake under f (nil: none). The caller holds
// mu; Serve releases it. apply performs the request under mu: with a fault
// after the write its answer is discarded and the fault answers instead
// (without mu, so that a hanging answer holds nothing up); a fault before
// the write answers without calling apply (Before), or through own, the
// fake's answer to a kind of its own (own may be nil).
func Serve(w http.ResponseWriter, r *http.Request, mu sync.Locker, f *Fault, svc Service, apply func(http.ResponseWriter), own func(http.ResponseWriter, *http.Request, *Fault)) {
	switch {
	case f == nil:
		defer mu.Unlock()
		apply(w)
	case f.AfterApply():
		apply(Discard{})
		mu.Unlock()
		After(w, r, f, svc)
	default:
		mu.Unlock()
		if _, common := Kinds[f.Fault]; common || own == nil {
			Before(w, r, f, svc)
			return
		}
		own(w, r, f)
	}
}

// Before answers a fault that applies nothing.
func Before(w http.ResponseWriter, r *http.Request, f *Fault, svc Service) {
	switch f.Fault {
	case Timeout:
		Hang(r)
	case Drop:
		Cut(w)
	case Status429:
		ra := f.RetryAfter
		if ra <= 0 {
			ra = 1
		}
		w.Header().Set("Retry-After", strconv.Itoa(ra))
		svc.Error(w, r, http.StatusTooManyRequests)
	default:
		code, err := strconv.Atoi(f.Fault)
		if err != nil || code < 400 || code > 599 {
			code = http.StatusInternalServerError
		}
		svc.Error(w, r, code)
	}
}

// After answers a fault once the write was applied.
func After(w http.ResponseWriter, r *http.Request, f *Fault, svc Service) {
	switch f.Fault {
	case TimeoutAfterApply:
		Hang(r)
	case DropAfterApply:
		Cut(w)
	default:
		svc.Error(w, r, http.StatusInternalServerError)
	}
}

// Hang answers nothing until the client gives up (at most two minutes).
// The body is read first: the server notices a client that went away only
// once the request's body is consumed.
func Hang(r *http.Request) {
	io.Copy(io.Discard, io.LimitReader(r.Body, 64<<20))
	select {
	case <-r.Context().Done():
	case <-time.After(2 * time.Minute):
	}
}

// Cut closes the connection without an answer.
func Cut(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// Discard swallows the answer of a write whose answer a fault loses.
type Discard struct{}

func (Discard) Header() http.Header         { return http.Header{} }
func (Discard) Write(b []byte) (int, error) { return len(b), nil }
func (Discard) WriteHeader(int)             {}
