package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkQuickstartOrders runs the quick-start workflow over b.N order
// files on a real SQLite file and reports events/s and durable commits
// (fsyncs) per consumer run, counted by the store.
func BenchmarkQuickstartOrders(b *testing.B) {
	src, err := os.ReadFile("../../examples/quickstart/workflow.js")
	if err != nil {
		b.Fatal(err)
	}
	e := newEnv(b)
	in := filepath.Join(e.dir, "files", "incoming")
	os.MkdirAll(in, 0o755)
	for i := 0; i < b.N; i++ {
		os.WriteFile(filepath.Join(in, fmt.Sprintf("order-%d.json", i)), []byte(fmt.Sprintf(`{"id":%d,"customer":"c%d@example.com","items":[{"qty":1,"price":2}]}`, i, i)), 0o644)
	}
	res, err := e.k.Engine.Deploy(context.Background(), "wf.js", string(src), "", "")
	if err != nil {
		b.Fatal(err)
	}
	before := e.k.Store.Stats().Commits
	b.ResetTimer()
	start := time.Now()
	if err := e.k.Scheduler.RunUntilIdle(context.Background()); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
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
}
