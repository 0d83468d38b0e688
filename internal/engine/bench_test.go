package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/control"
	"github.com/keep-run/keep/internal/testotlp"
)

// BenchmarkQuickstartOrders runs the quick-start workflow over b.N order
// files on a real SQLite file and reports events/s and durable commits
// (fsyncs) per consumer run, counted by the store.
func BenchmarkQuickstartOrders(b *testing.B) { benchQuickstart(b, testPolicy) }

// BenchmarkQuickstartOrdersTraced is BenchmarkQuickstartOrders with
// keep.toml's [otel] set, every run sampled, the spans exported to a
// receiver that takes them without decoding: what tracing costs a run
// (docs/performance.md). Its cpu-µs/run against the untraced one's is the
// price.
func BenchmarkQuickstartOrdersTraced(b *testing.B) {
	col := testotlp.NewDiscarding()
	defer col.Close()
	benchQuickstart(b, testPolicy+fmt.Sprintf("\n[otel]\nendpoint = %q\n", col.URL))
	if col.Requests() == 0 && b.N > 600 {
		// 512 spans fill a batch: a run this long exported some already.
		b.Fatalf("no export reached the receiver")
	}
}

func benchQuickstart(b *testing.B, policy string) {
	src, err := os.ReadFile("../../examples/quickstart/workflow.js")
	if err != nil {
		b.Fatal(err)
	}
	e := newEnvWith(b, policy)
	in := filepath.Join(e.dir, "files", "incoming")
	os.MkdirAll(in, 0o755)
	for i := 0; i < b.N; i++ {
		os.WriteFile(filepath.Join(in, fmt.Sprintf("order-%d.json", i)), []byte(fmt.Sprintf(`{"id":%d,"customer":"c%d@example.com","items":[{"qty":1,"price":2}]}`, i, i)), 0o644)
	}
	res, err := control.DeployAndGrant(context.Background(), e.k.Engine, "wf.js", string(src), control.DeployOptions{})
	if err != nil {
		b.Fatal(err)
	}
	before := e.k.Store.Stats().Commits
	cpu := cpuTime(b)
	b.ResetTimer()
	start := time.Now()
	if err := e.k.Scheduler.RunUntilIdle(context.Background()); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cpu = cpuTime(b) - cpu
	commits := e.k.Store.Stats().Commits - before
	outs := 0
	_ = e.k.Store.View(context.Background(), func(tx storeTx) error {
		ms, err := tx.MutationList(res.Workflow)
		outs = len(ms)
		return err
	})
	if outs != b.N {
		b.Fatalf("outputs %d, want %d", outs, b.N)
	}
	// One producer run commits once; consumer runs account for the rest.
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(commits-1)/float64(b.N), "commits/run")
	// keep's own process (the sandbox workers are processes of their own):
	// where tracing's cost lands.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/run")
}

// cpuTime is the CPU time keep's process has used (user and system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
