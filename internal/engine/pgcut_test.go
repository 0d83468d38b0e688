package engine_test

import (
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/keep-run/keep/internal/engine"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
)

// PostgreSQL cuts the connection of a step's transaction (an operator's
// pg_terminate_backend, a failover) inside the run's first commit (the
// write's in_flight record) or its last (the write's answer, the
// consumption), while that transaction's writes are held back to go with
// its COMMIT in one pipeline. The first commit has sent nothing yet (it
// is one round trip, its BEGIN with its COMMIT), so its connection is idle
// then, and the cut takes the pool's idle ones with it. Nothing of the transaction is committed, no
// success is reported for it, the write goes to the sink once all the
// same, and the in_flight record is what the next step finds: the run
// ends committed, its input done.
func TestAConnectionCutInsideACommitOnPostgresWritesOnce(t *testing.T) {
	t.Parallel()
	for _, point := range []string{engine.CrashInsideInFlight, engine.CrashInsideCommit} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			url := pgtest.FreshSchema(t)
			// The store's connections carry a name of their own, so the cut
			// reaches this test's backends only.
			app := fmt.Sprintf("keep_cut_%s_%p", point, t)
			admin, err := sql.Open("pgx", pgtest.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { admin.Close() })
			var once sync.Once
			cut := make(chan int, 1)
			e := newEnvOn(t, testPolicy, func(step string) {
				if step != point {
					return
				}
				once.Do(func() {
					var n int
					err := admin.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND state IN ('idle', 'idle in transaction')`, app).Scan(&n)
					if err != nil {
						t.Errorf("cut: %v", err)
					}
					cut <- n
				})
			}, url+"&application_name="+app)
			wf := e.deploy(hookScript("", withProbe))
			var stepErrs []error
			for i := 0; ; i++ {
				if i == 50 {
					t.Fatalf("the workflow still steps after 50 steps (errors %v)", stepErrs)
				}
				did, err := e.k.Engine.Step(e.ctx(), wf)
				if err != nil {
					stepErrs = append(stepErrs, err)
					continue
				}
				if !did {
					break
				}
			}
			select {
			case n := <-cut:
				if n == 0 {
					t.Fatalf("no connection cut at %s, want the step's", point)
				}
			default:
				t.Fatalf("the run never reached %s", point)
			}
			if len(stepErrs) == 0 {
				t.Fatal("no step failed: the commit whose connection was cut reported success")
			}
			if point == engine.CrashInsideInFlight && !strings.Contains(stepErrs[0].Error(), "in_flight") {
				t.Fatalf("the first step error is not the in_flight commit's: %v", stepErrs[0])
			}
			e.noOpenRun(wf)
			if n := len(e.sink.Writes()); n != 1 {
				t.Fatalf("writes at the sink: %d, want 1 (step errors %v)", n, stepErrs)
			}
			if m := e.mutation(wf); m.Status != kt.MutationApplied {
				t.Fatalf("the write's ledger row is %s, want applied", m.Status)
			}
			if in := e.inputs(wf); len(in) != 1 || in[0].Status != kt.ItemDone {
				t.Fatalf("inputs %+v", in)
			}
		})
	}
}
