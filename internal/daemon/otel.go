package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	otrace "go.opentelemetry.io/otel/trace"

	"github.com/keep-run/keep/internal/config"
	"github.com/keep-run/keep/internal/connector"
	"github.com/keep-run/keep/internal/redact"
)

// tracing is keep.toml's [otel]: the OpenTelemetry SDK's tracer provider
// with a batching OTLP/HTTP exporter. The batcher queues spans and sends
// them from its own goroutine: a run never waits for the collector, and a
// collector that is down or refuses them (its error logged, at most once a
// minute) costs the runs nothing but the spans it drops.
type tracing struct {
	provider *sdktrace.TracerProvider
	timeout  time.Duration
	log      *slog.Logger
}

// startTracing builds the exporter when [otel] names an endpoint; nil
// without one (the engine then makes no spans). open fills a header's
// {secret:NAME}.
func startTracing(cfg config.OTel, instance string, open connector.SecretFunc, logger *slog.Logger) (*tracing, error) {
	if !cfg.Set() {
		return nil, nil
	}
	headers, err := otelHeaders(cfg.Headers, open)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(cfg.TracesURL()), otlptracehttp.WithHeaders(headers),
		otlptracehttp.WithTimeout(cfg.Timeout),
		// Retries (of a 429, 502, 503, 504) stop when an export's time is up.
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: time.Second, MaxInterval: 5 * time.Second, MaxElapsedTime: cfg.Timeout}))
	if err != nil {
		return nil, fmt.Errorf("keep.toml [otel]: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", cfg.ServiceName), attribute.String("service.instance.id", instance)))
	if err != nil {
		return nil, fmt.Errorf("keep.toml [otel]: %w", err)
	}
	// The SDK reports a failed export to the process's one error handler.
	otel.SetErrorHandler(&exportErrors{log: logger, endpoint: cfg.TracesURL()})
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))))
	return &tracing{provider: tp, timeout: cfg.Timeout, log: logger}, nil
}

// tracer is what the engine makes its spans with; nil when keep does not trace.
func (t *tracing) tracer() otrace.Tracer {
	if t == nil {
		return nil
	}
	return t.provider.Tracer("github.com/keep-run/keep/internal/engine")
}

// stop sends the spans still queued (keep run's end, keep serve's stop),
// waiting no longer than one export's timeout.
func (t *tracing) stop() {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		t.log.Warn("the last traces could not be sent to the collector", "error", err)
	}
}

// otelHeaders fills in the headers' ${VAR}s and {secret:NAME}s, and tells
// package redact every value: a collector's token is masked wherever keep
// shows text. A variable keep's environment does not set is an error at
// start, not an export the collector refuses with a 401 that names nothing.
func otelHeaders(in map[string]string, open connector.SecretFunc) (map[string]string, error) {
	names := make([]string, 0, len(in))
	for k := range in {
		names = append(names, k)
	}
	sort.Strings(names)
	out := map[string]string{}
	for _, k := range names {
		var missing []string
		v := os.Expand(in[k], func(name string) string {
			val := os.Getenv(name)
			if val == "" {
				missing = append(missing, name)
			}
			return val
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("keep.toml [otel] headers: %s uses ${%s}, which keep's environment does not set: set it where keep runs, or remove the header", k, strings.Join(missing, "}, ${"))
		}
		v, err := connector.FillSecrets(v, "", open)
		if err != nil {
			return nil, fmt.Errorf("keep.toml [otel] headers: %s: %v", k, err)
		}
		redact.Learn(v)
		out[k] = v
	}
	return out, nil
}

// exportErrors logs the SDK's failed exports, at most once a minute: a
// collector that is down would otherwise fill the log every few seconds.
type exportErrors struct {
	log      *slog.Logger
	endpoint string
	mu       sync.Mutex
	last     time.Time
	dropped  int
}

func (h *exportErrors) Handle(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.last.IsZero() && time.Since(h.last) < time.Minute {
		h.dropped++
		return
	}
	h.log.Warn("traces could not be sent to the collector; runs go on, and their spans are dropped", "endpoint", h.endpoint, "error", err, "errors_not_logged", h.dropped)
	h.last, h.dropped = time.Now(), 0
}
