// Package testotlp is a real OTLP/HTTP trace receiver for tests, as a
// collector is one: POST /v1/traces with a protobuf
// ExportTraceServiceRequest (go.opentelemetry.io/proto/otlp), answered
// with an ExportTraceServiceResponse — or with the status it is told to
// answer, as a collector that is unwell does. Tests point keep.toml's
// [otel] endpoint at it and read the spans keep sent.
package testotlp

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Collector is the receiver; URL is its endpoint (keep.toml's [otel] endpoint).
type Collector struct {
	*httptest.Server
	// Discard counts the requests and drops their spans undecoded (a
	// benchmark's collector, which must not cost keep's process much).
	discard  bool
	mu       sync.Mutex
	status   int
	requests int
	auth     []string
	services []string
	spans    []Span
}

// Span is one received span, its attributes as strings (Lists: the
// attributes that are lists of strings).
type Span struct {
	Name, ID, Parent, Trace string
	Kind                    tracepb.Span_SpanKind
	Attrs                   map[string]string
	Lists                   map[string][]string
	Events                  []string
	// Error: the span's status is an error, with Message.
	Error   bool
	Message string
	// Start and End are when the span began and ended, as sent.
	Start, End time.Time
}

// New starts a receiver that answers status (http.StatusOK: it takes the
// spans); Close stops it.
func New(status int) *Collector {
	c := &Collector{status: status}
	c.Server = httptest.NewServer(http.HandlerFunc(c.serve))
	return c
}

// NewDiscarding starts a receiver that answers 200 and keeps nothing.
func NewDiscarding() *Collector {
	c := New(http.StatusOK)
	c.discard = true
	return c
}

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces with application/x-protobuf, got "+r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"), http.StatusNotFound)
		return
	}
	if c.status != http.StatusOK {
		http.Error(w, "the collector is unwell", c.status)
		return
	}
	if !c.discard {
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.take(r, &req)
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *Collector) take(r *http.Request, req *coltracepb.ExportTraceServiceRequest) {
	c.auth = append(c.auth, r.Header.Get("Authorization"))
	for _, rs := range req.ResourceSpans {
		c.services = append(c.services, value(attrOf(rs.GetResource().GetAttributes(), "service.name")))
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, decode(s))
			}
		}
	}
}

func decode(s *tracepb.Span) Span {
	sp := Span{Name: s.Name, ID: hex.EncodeToString(s.SpanId), Parent: hex.EncodeToString(s.ParentSpanId), Trace: hex.EncodeToString(s.TraceId),
		Attrs: map[string]string{}, Lists: map[string][]string{}, Kind: s.Kind,
		Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, Message: s.GetStatus().GetMessage(),
		Start: time.Unix(0, int64(s.StartTimeUnixNano)), End: time.Unix(0, int64(s.EndTimeUnixNano))}
	for _, kv := range s.Attributes {
		if arr := kv.Value.GetArrayValue(); arr != nil {
			for _, v := range arr.Values {
				sp.Lists[kv.Key] = append(sp.Lists[kv.Key], v.GetStringValue())
			}
			continue
		}
		sp.Attrs[kv.Key] = value(kv)
	}
	for _, ev := range s.Events {
		text := ev.Name
		for _, kv := range ev.Attributes {
			text += " " + kv.Key + "=" + value(kv)
		}
		sp.Events = append(sp.Events, text)
	}
	return sp
}

func attrOf(kvs []*commonpb.KeyValue, key string) *commonpb.KeyValue {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv
		}
	}
	return nil
}

func value(kv *commonpb.KeyValue) string {
	if kv == nil {
		return ""
	}
	switch v := kv.Value.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		return v.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(v.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(v.BoolValue)
	}
	return kv.Value.String()
}

// Spans are the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Requests counts the exports received (taken or refused).
func (c *Collector) Requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests
}

// Auth lists each taken export's Authorization header, Services its
// resources' service.name.
func (c *Collector) Auth() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.auth...)
}

func (c *Collector) Services() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.services...)
}

// Children are the spans whose parent is p.
func Children(spans []Span, p Span) []Span {
	var out []Span
	for _, s := range spans {
		if s.Parent == p.ID && s.Trace == p.Trace {
			out = append(out, s)
		}
	}
	return out
}

// Named are the spans called name.
func Named(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
