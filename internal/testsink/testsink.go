// Package testsink is a real local HTTP server for tests: it applies writes
// (records them), answers reconcile probes, and injects faults per request:
// slow answers, timeouts after or before applying, 5xx after or before,
// connection resets, truncated bodies, and 4xx statuses. Tests assert on
// what a user would see at the sink: how many writes were applied.
package testsink

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Fault names what the sink does with one write request.
type Fault string

const (
	OK            Fault = "ok"
	TimeoutAfter  Fault = "timeout-after"  // apply, then never answer in time
	TimeoutBefore Fault = "timeout-before" // never answer in time, never apply
	Status500     Fault = "500-after"      // apply, then answer 500
	Status503     Fault = "503-before"     // answer 503 without applying
	ResetAfter    Fault = "reset-after"    // apply, then drop the connection
	DropBefore    Fault = "drop-before"    // read the request, drop the connection without applying
	TruncAfter    Fault = "truncated-after"
	Slow          Fault = "slow" // apply and answer 200 after 200ms
	// EchoHeaders answers 400 without applying, the request's headers
	// in the error body: a server that quotes a credential back.
	EchoHeaders Fault = "echo-headers"
	// ApplyLate applies the write 700ms after the client gave up waiting,
	// as a slow server does: a probe right after the timeout finds nothing.
	ApplyLate Fault = "apply-late"
)

// RetryAfter returns a fault that answers 429 with Retry-After: seconds,
// without applying.
func RetryAfter(seconds int) Fault { return Fault("retry-after|" + itoa(seconds)) }

// ApplyAfter returns a fault that applies the write d after it came in,
// whether or not the client still waits, and answers only when the client
// gives up: a slow service whose reconcile probe says "not found" until d.
func ApplyAfter(d time.Duration) Fault { return Fault("apply-after|" + itoa(int(d.Milliseconds()))) }

// Status returns a fault that answers the HTTP status without applying.
func Status(code int) Fault { return Fault("status-" + http.StatusText(code) + "|" + itoa(code)) }

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// Write is one applied write.
type Write struct {
	Key    string          `json:"key"`
	Method string          `json:"method"`
	Path   string          `json:"path"`
	Body   json.RawMessage `json:"body"`
	At     time.Time       `json:"at"`
}

// Sink is the server.
type Sink struct {
	*httptest.Server
	// OnRead, when set (before the first request), is called with the
	// path of every read (GET) before it is answered: a test's way to make
	// something happen while a handler waits on a read.
	OnRead func(path string)
	// Feed, when set (before the first request), is the body a GET /feed
	// answers: a feed a producer polls (issue 44's history benchmark).
	Feed []byte
	// OnWrite, when set (before the first request), is called when a
	// write request comes in, before it is applied or answered: a test's
	// way to make something happen right after keep sent a write.
	OnWrite     func()
	mu          sync.Mutex
	faults      []Fault
	probeFaults []int
	writes      []Write
	requests    int
	probes      int
	hang        time.Duration
	Headers     []http.Header // every write request's headers, applied or not
	// holdAt is the probe (1-based) held until hold is closed (HoldProbe).
	holdAt int
	hold   chan struct{}
	// holdWrite holds the next write's answer (HoldWrite).
	holdWrite *heldWrite
	opened    int               // connections accepted
	idle      map[net.Conn]bool // connections idle between requests (keep-alive)
}

// HoldProbe holds the n-th reconcile probe (counting from 1, from now on)
// until release is called, so that a test can act while keep waits for the
// answer; the probe then answers as it would have.
func (s *Sink) HoldProbe(n int) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdAt, s.hold = s.probes+n, make(chan struct{})
	ch := s.hold
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// heldWrite is a write whose answer waits for release (HoldWrite).
type heldWrite struct {
	held, release chan struct{}
}

// HoldWrite applies the next write and holds its answer until release is
// called or the client goes away, as a service that took a write and
// stalls: no timer decides when it answers. held is closed once the write
// is applied and its answer held.
func (s *Sink) HoldWrite() (held <-chan struct{}, release func()) {
	h := &heldWrite{held: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.holdWrite = h
	s.mu.Unlock()
	var once sync.Once
	return h.held, func() { once.Do(func() { close(h.release) }) }
}

// New starts a sink. Hang is how long timeout faults hold the request.
func New() *Sink {
	s := &Sink{hang: 3 * time.Second, idle: map[net.Conn]bool{}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Server.Config.ConnState = s.connState
	s.Server.Start()
	return s
}

func (s *Sink) connState(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.opened++
	case http.StateIdle:
		s.idle[c] = true
	default:
		delete(s.idle, c)
	}
}

// Conns is the number of connections clients opened to the sink.
func (s *Sink) Conns() int { s.mu.Lock(); defer s.mu.Unlock(); return s.opened }

// CloseIdle closes every connection that waits, idle, for a client's next
// request — as a server whose keep-alive timeout ran out does: with a FIN,
// or with a reset (abort) — and returns how many it closed. A client that
// sends on one of them afterwards finds it dead.
func (s *Sink) CloseIdle(abort bool) int {
	s.mu.Lock()
	var conns []net.Conn
	for c := range s.idle {
		conns = append(conns, c)
		delete(s.idle, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok && abort {
			_ = tc.SetLinger(0) // RST, not FIN
		}
		c.Close()
	}
	return len(conns)
}

// Host is the sink's "127.0.0.1:port": what a test puts in keep.toml's
// [connectors.http] allow (keep refuses loopback addresses otherwise).
func (s *Sink) Host() string { return s.Listener.Addr().String() }

// AllowTOML is the keep.toml section that lets keep reach the sink.
func (s *Sink) AllowTOML() string { return "[connectors.http]\nallow = [\"" + s.Host() + "\"]\n" }

// Queue adds faults for the next write requests (then OK).
func (s *Sink) Queue(f ...Fault) {
	s.mu.Lock()
	s.faults = append(s.faults, f...)
	s.mu.Unlock()
}

// QueueProbe makes the next probes answer these statuses instead of the truth.
func (s *Sink) QueueProbe(status ...int) {
	s.mu.Lock()
	s.probeFaults = append(s.probeFaults, status...)
	s.mu.Unlock()
}

// Writes returns the applied writes.
func (s *Sink) Writes() []Write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Write(nil), s.writes...)
}

// Seen returns the headers of every write request received, applied or not.
func (s *Sink) Seen() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.Headers...)
}

// Requests is the number of write requests received (applied or not).
func (s *Sink) Requests() int { s.mu.Lock(); defer s.mu.Unlock(); return s.requests }

// Probes is the number of reconcile probes received.
func (s *Sink) Probes() int { s.mu.Lock(); defer s.mu.Unlock(); return s.probes }

func (s *Sink) next() Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	if len(s.faults) == 0 {
		return OK
	}
	f := s.faults[0]
	s.faults = s.faults[1:]
	return f
}

func (s *Sink) apply(r *http.Request, body []byte) Write {
	w := Write{Key: r.Header.Get("Idempotency-Key"), Method: r.Method, Path: r.URL.Path, Body: json.RawMessage(body), At: time.Now()}
	if !json.Valid(body) {
		w.Body, _ = json.Marshal(string(body))
	}
	s.mu.Lock()
	s.writes = append(s.writes, w)
	s.mu.Unlock()
	return w
}

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/writes/") {
		s.probe(w, r, strings.TrimPrefix(r.URL.Path, "/writes/"))
		return
	}
	if r.Method == http.MethodGet {
		if s.OnRead != nil {
			s.OnRead(r.URL.Path)
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/feed" && s.Feed != nil {
			_, _ = w.Write(s.Feed)
			return
		}
		out := map[string]any{"ok": true, "path": r.URL.Path}
		if r.URL.Path == "/echo" {
			// A read that echoes what it was sent.
			out["headers"], out["query"] = r.Header, r.URL.RawQuery
		}
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.Headers = append(s.Headers, r.Header.Clone())
	s.mu.Unlock()
	if s.OnWrite != nil {
		s.OnWrite()
	}
	answer := func(wr Write) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": wr.Key, "stored": true})
	}
	if s.serveHeld(r, body, answer) {
		return
	}
	f := s.next()
	switch {
	case f == OK:
		answer(s.apply(r, body))
	case f == Slow:
		wr := s.apply(r, body)
		time.Sleep(200 * time.Millisecond)
		answer(wr)
	case f == TimeoutAfter:
		s.apply(r, body)
		s.wait(r)
	case f == TimeoutBefore:
		s.wait(r)
	case f == ApplyLate:
		s.wait(r)
		time.Sleep(700 * time.Millisecond)
		s.apply(r, body)
	case f == Status500:
		s.apply(r, body)
		http.Error(w, "internal error", http.StatusInternalServerError)
	case f == EchoHeaders:
		b, _ := json.Marshal(r.Header)
		http.Error(w, "bad signature "+r.Header.Get("X-Custom-Sig")+"; you sent "+string(b), http.StatusBadRequest)
	case f == Status503:
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	case f == ResetAfter:
		s.apply(r, body)
		hijackClose(w, "")
	case f == DropBefore:
		hijackClose(w, "")
	case f == TruncAfter:
		s.apply(r, body)
		hijackClose(w, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":")
	case strings.HasPrefix(string(f), "apply-after|"):
		ms := 0
		_ = json.Unmarshal([]byte(strings.TrimPrefix(string(f), "apply-after|")), &ms)
		later := r.Clone(context.Background())
		time.AfterFunc(time.Duration(ms)*time.Millisecond, func() { s.apply(later, body) })
		<-r.Context().Done() // no answer: the client gives up
	case strings.HasPrefix(string(f), "retry-after|"):
		w.Header().Set("Retry-After", strings.TrimPrefix(string(f), "retry-after|"))
		http.Error(w, "slow down", http.StatusTooManyRequests)
	case strings.HasPrefix(string(f), "status-"):
		code := 0
		_ = json.Unmarshal([]byte(string(f)[strings.LastIndexByte(string(f), '|')+1:]), &code)
		http.Error(w, http.StatusText(code), code)
	}
}

// serveHeld applies a write HoldWrite asked to hold and answers it once
// released, nothing when the client went away first; false when no write
// is to be held.
func (s *Sink) serveHeld(r *http.Request, body []byte, answer func(Write)) bool {
	s.mu.Lock()
	h := s.holdWrite
	s.holdWrite = nil
	s.mu.Unlock()
	if h == nil {
		return false
	}
	wr := s.apply(r, body)
	close(h.held)
	select {
	case <-h.release:
		answer(wr)
	case <-r.Context().Done():
	}
	return true
}

func (s *Sink) wait(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(s.hang):
	}
}

func hijackClose(w http.ResponseWriter, partial string) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	if partial != "" {
		_, _ = buf.WriteString(partial)
		_ = buf.Flush()
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST, not FIN
	}
	conn.Close()
}

func (s *Sink) probe(w http.ResponseWriter, r *http.Request, key string) {
	s.mu.Lock()
	s.probes++
	if s.probes == s.holdAt {
		hold := s.hold
		s.mu.Unlock()
		select {
		case <-hold:
		case <-r.Context().Done():
		}
		s.mu.Lock()
	}
	var forced int
	if len(s.probeFaults) > 0 {
		forced = s.probeFaults[0]
		s.probeFaults = s.probeFaults[1:]
	}
	var found *Write
	for i := range s.writes {
		if s.writes[i].Key == key {
			found = &s.writes[i]
		}
	}
	s.mu.Unlock()
	if forced != 0 {
		http.Error(w, http.StatusText(forced), forced)
		return
	}
	if found == nil {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": found.Key, "stored": true})
}
