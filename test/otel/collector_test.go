package otel

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP receiver as a collector is one: POST
// /v1/traces with a protobuf ExportTraceServiceRequest, answered with an
// ExportTraceServiceResponse — or with the status status says.
type collector struct {
	*httptest.Server
	mu       sync.Mutex
	status   int
	requests int
	auth     []string
	services []string
	spans    []span
}

// span is one received span, its attributes as strings.
type span struct {
	name, id, parent, trace string
	attrs                   map[string]string
	lists                   map[string][]string
	errorStatus             bool
	statusMessage           string
	kind                    tracepb.Span_SpanKind
}

func newCollector(t *testing.T, status int) *collector {
	c := &collector{status: status}
	c.Server = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.Close)
	return c
}

func (c *collector) serve(w http.ResponseWriter, r *http.Request) {
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
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.auth = append(c.auth, r.Header.Get("Authorization"))
	for _, rs := range req.ResourceSpans {
		c.services = append(c.services, value(attrOf(rs.GetResource().GetAttributes(), "service.name")))
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, decode(s))
			}
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func decode(s *tracepb.Span) span {
	sp := span{name: s.Name, id: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId), trace: hex.EncodeToString(s.TraceId),
		attrs: map[string]string{}, lists: map[string][]string{}, kind: s.Kind,
		errorStatus: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, statusMessage: s.GetStatus().GetMessage()}
	for _, kv := range s.Attributes {
		if arr := kv.Value.GetArrayValue(); arr != nil {
			for _, v := range arr.Values {
				sp.lists[kv.Key] = append(sp.lists[kv.Key], v.GetStringValue())
			}
			continue
		}
		sp.attrs[kv.Key] = value(kv)
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

// received returns what came in so far.
func (c *collector) received() (spans []span, requests int, auth, services []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]span(nil), c.spans...), c.requests, append([]string(nil), c.auth...), append([]string(nil), c.services...)
}

// children are the spans whose parent is p.
func children(spans []span, p span) []span {
	var out []span
	for _, s := range spans {
		if s.parent == p.id && s.trace == p.trace {
			out = append(out, s)
		}
	}
	return out
}

func named(spans []span, name string) []span {
	var out []span
	for _, s := range spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}
