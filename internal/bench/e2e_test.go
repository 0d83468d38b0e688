package bench

import (
	"context"
	"github.com/keep-run/keep/internal/script"
	"testing"
)

func BenchmarkEndToEndW1(b *testing.B) {
	n := b.N
	if n < 50 {
		n = 50
	}
	r, err := endToEnd(context.Background(), b.TempDir(), 1, n)
	if err != nil {
		b.Fatal(err)
	}
	created, _ := script.VMStats()
	b.ReportMetric(float64(created), "vms-created")
	b.ReportMetric(r.perSec, "events/s")
	b.ReportMetric(r.fsyncsPerRun, "fsyncs/run")
	b.ReportMetric(r.cpuMicrosPerEvent, "cpu-µs/event")
}

func BenchmarkEndToEndW100(b *testing.B) {
	n := b.N/100 + 1
	r, err := endToEnd(context.Background(), b.TempDir(), 100, n)
	if err != nil {
		b.Fatal(err)
	}
	created, _ := script.VMStats()
	b.ReportMetric(float64(created), "vms-created")
	b.ReportMetric(r.perSec, "events/s")
	b.ReportMetric(r.fsyncsPerRun, "fsyncs/run")
	b.ReportMetric(r.cpuMicrosPerEvent, "cpu-µs/event")
}
