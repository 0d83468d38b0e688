package bench

import (
	"context"
	"os"
	"testing"

	"github.com/keep-run/keep/internal/script"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
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
	b.ReportMetric(r.workerMicrosPerEvent, "worker-cpu-µs/event")
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
	b.ReportMetric(r.workerMicrosPerEvent, "worker-cpu-µs/event")
}

// The same on PostgreSQL (a schema of its own), to compare: PostgreSQL
// commits every transaction itself (no group commit in keep), and its
// fsyncs are its own WAL's. "commits/run" counts keep's transactions.
func BenchmarkEndToEndPostgresW1(b *testing.B) {
	n := b.N
	if n < 50 {
		n = 50
	}
	benchPostgres(b, 1, n)
}

func BenchmarkEndToEndPostgresW100(b *testing.B) {
	benchPostgres(b, 100, b.N/100+1)
}

func benchPostgres(b *testing.B, w, n int) {
	u := pgtest.FreshSchema(b)
	if extra := os.Getenv("KEEP_BENCH_PG_PARAMS"); extra != "" {
		u += "&" + extra // e.g. synchronous_commit=off, to see what commits cost
	}
	r, err := endToEndOn(context.Background(), b.TempDir(), u, w, n)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.perSec, "events/s")
	b.ReportMetric(r.fsyncsPerRun, "commits/run")
	b.ReportMetric(r.roundTripsPerRun, "round-trips/run")
	b.ReportMetric(r.cpuMicrosPerEvent, "cpu-µs/event")
	b.ReportMetric(r.workerMicrosPerEvent, "worker-cpu-µs/event")
}
