package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/sqlite"
)

// BenchmarkUpdate measures durable transitions (one small row each) by
// 1 and by 16 concurrent callers: with group commit, the 16 share fsyncs,
// reported as transactions per commit.
func BenchmarkUpdate(b *testing.B) {
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s, err := sqlite.Open(filepath.Join(b.TempDir(), "keep.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			before := s.Stats()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for c := 0; c < callers; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if err := s.Update(ctx, func(tx store.Tx) error {
							return tx.HandlerPut(kt.Handler{Workflow: "bench", Name: fmt.Sprint(i), Type: kt.HandlerProducer, State: json.RawMessage(`{"n":1}`)})
						}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			st := s.Stats()
			b.ReportMetric(float64(st.Transactions-before.Transactions)/float64(st.Commits-before.Commits), "tx/commit")
		})
	}
}
