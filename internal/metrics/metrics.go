// Package metrics exposes keep's Prometheus metrics at /metrics: runs by
// workflow and status, mutations by workflow and state and pending events
// (read at scrape time from the tallies the store keeps, a few rows
// whatever the history: issue 44), reconcile questions by workflow and
// answer, and histograms of run latency and sandbox time (observed by the
// engine).
package metrics

import (
	"context"
	"net/http"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is the engine observer and the /metrics handler.
type Metrics struct {
	registry   *prometheus.Registry
	runs       *prometheus.HistogramVec
	reconciled *prometheus.CounterVec
	sandbox    *prometheus.HistogramVec
	deliveries *prometheus.CounterVec
}

// New registers keep's metrics over a store.
func New(st store.Store) *Metrics {
	m := &Metrics{registry: prometheus.NewRegistry()}
	m.runs = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "keep_run_duration_seconds", Help: "Time from a run's start to its commit or block, by handler type and resulting status.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"workflow", "handler_type", "status"})
	m.reconciled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keep_reconcile_attempts_total", Help: "Questions keep asked a connector's reconcile about a write whose outcome it did not know (inline and in the background), by workflow and answer (applied, failed, retry, error); counted by this process since it started.",
	}, []string{"workflow", "answer"})
	m.sandbox = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "keep_sandbox_call_seconds", Help: "Time of one handler phase in the JavaScript sandbox, host calls included.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	}, []string{"phase"})
	m.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keep_webhook_deliveries_total", Help: "Requests to declared webhooks by what keep made of them: accepted, duplicate, refused (verification failed, no secret, too large), failed (the handler).",
	}, []string{"workflow", "webhook", "status"})
	m.registry.MustRegister(m.runs, m.reconciled, m.sandbox, m.deliveries, &ledgerCollector{st: st}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Group commit at a glance: transactions ÷ commits is how many
	// transitions one fsync carried.
	m.CounterFunc("keep_store_commits_total", "Durable commits (fsyncs) of the store.", func() float64 { return float64(st.Stats().Commits) })
	m.CounterFunc("keep_store_transactions_total", "Transactions committed; with group commit one commit carries several.", func() float64 { return float64(st.Stats().Transactions) })
	return m
}

// CounterFunc exports a counter read at scrape time (for figures other
// packages keep, wired by the daemon).
func (m *Metrics) CounterFunc(name, help string, f func() float64) {
	m.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
}

// RunFinished implements engine.Observer.
func (m *Metrics) RunFinished(workflow string, t kt.HandlerType, s kt.Status, d time.Duration) {
	m.runs.WithLabelValues(workflow, string(t), string(s)).Observe(d.Seconds())
}

// Reconciled implements engine.Observer.
func (m *Metrics) Reconciled(workflow, answer string) {
	m.reconciled.WithLabelValues(workflow, answer).Inc()
}

// SandboxCall implements engine.Observer.
func (m *Metrics) SandboxCall(phase string, d time.Duration) {
	m.sandbox.WithLabelValues(phase).Observe(d.Seconds())
}

// Delivered implements engine.Observer.
func (m *Metrics) Delivered(workflow, webhook string, status kt.DeliveryStatus) {
	m.deliveries.WithLabelValues(workflow, webhook, string(status)).Inc()
}

// Handler serves the metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

var (
	runsDesc      = prometheus.NewDesc("keep_runs", "Runs in the ledger by workflow and status.", []string{"workflow", "status"}, nil)
	mutationsDesc = prometheus.NewDesc("keep_mutations", "Mutations (writes) in the ledger by workflow and state.", []string{"workflow", "state"}, nil)
	pendingDesc   = prometheus.NewDesc("keep_pending_events", "Events waiting to be consumed.", nil, nil)
)

type ledgerCollector struct{ st store.Store }

func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- runsDesc
	ch <- mutationsDesc
	ch <- pendingDesc
}

func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var counts store.Counts
	if err := c.st.View(ctx, func(tx store.Tx) error {
		var err error
		counts, err = tx.Counts()
		return err
	}); err != nil {
		ch <- prometheus.NewInvalidMetric(runsDesc, err)
		return
	}
	for _, t := range counts.Runs {
		ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(t.N), t.Workflow, t.Status)
	}
	for _, t := range counts.Mutations {
		ch <- prometheus.MustNewConstMetric(mutationsDesc, prometheus.GaugeValue, float64(t.N), t.Workflow, t.Status)
	}
	ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(counts.PendingEvents))
}
