package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/keep-run/keep/internal/bench"
)

func (a *app) benchCmd() *cobra.Command {
	var quick bool
	var dir string
	c := &cobra.Command{
		Use:   "bench",
		Short: "measure what durability costs here: fsync rate, events/s, latency, sandbox, scale (docs/performance.md)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := bench.Options{Quick: quick, Dir: dir}
			if !a.jsonOut {
				opts.Progress = a.errOut
			}
			r, err := bench.Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(r)
			}
			w := a.table()
			row := func(k, v string) { fmt.Fprintf(w, "%s\t%s\n", k, v) }
			row("disk fsync rate", fmt.Sprintf("%.0f /s", r.FsyncRate))
			row("durable commits per consumer run", fmt.Sprintf("%.2f", r.FsyncsPerRun))
			row("serial bound (fsync rate ÷ commits per run)", fmt.Sprintf("%.0f events/s", r.SerialBound))
			row(fmt.Sprintf("W=1: %d inputs → 1 write each", r.W1Events), fmt.Sprintf("%.0f events/s = %.0f%% of the serial bound (CPU %.0f µs/event, %.0f of it in sandbox workers)", r.W1EventsPerSec, 100*r.W1Ratio, r.W1CPUMicros, r.W1WorkerCPUMicros))
			row(fmt.Sprintf("W=100: %d inputs", r.W100Events), fmt.Sprintf("%.0f events/s = %.2f× W=1 (%.2f commits/run, CPU %.0f µs/event, %.0f of it in sandbox workers)", r.W100EventsPerSec, r.W100OverW1, r.W100FsyncsPerRun, r.W100CPUMicros, r.W100WorkerCPUMicros))
			if r.W100RSSBytes > 0 {
				row("resident memory after W=100", fmt.Sprintf("%.0f MiB", float64(r.W100RSSBytes)/(1<<20)))
			}
			row("publish → commit latency", fmt.Sprintf("p50 %.1f ms, p99 %.1f ms", r.LatencyP50Millis, r.LatencyP99Millis))
			row("handler call (compiled script, VM from the pool)", fmt.Sprintf("p50 %.0f µs, p99 %.0f µs (sandbox: %s)", r.HandlerCallP50Micro, r.HandlerCallP99Micro, r.Sandbox))
			row("one ctx call inside a handler", fmt.Sprintf("p50 %.1f µs", r.HostCallP50Micros))
			row("first call of a version (loaded into a pooled VM)", fmt.Sprintf("p50 %.0f µs", r.HandlerFirstP50))
			row("new VM (prelude + lockdown), when none is idle", fmt.Sprintf("p50 %.0f µs", r.NewVMP50Micros))
			row(fmt.Sprintf("peek(limit 100) on %d events", r.PeekEvents), fmt.Sprintf("p50 %.2f ms", r.PeekP50Millis))
			row(fmt.Sprintf("start-up: %d workflows, %d pending events", r.StartupWorkflows, r.StartupEvents), fmt.Sprintf("%.2f s", r.StartupSeconds))
			row(fmt.Sprintf("memory: %d idle workflows", r.IdleWorkflows), fmt.Sprintf("%.0f bytes each", r.IdleWorkflowBytes))
			w.Flush()
			for _, n := range r.Notes {
				fmt.Fprintln(a.out, "note:", n)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&quick, "quick", false, "smaller runs (under a minute)")
	c.Flags().StringVar(&dir, "dir", "", "where the temporary data directories go (default: the system temp dir; use a folder on the disk you care about)")
	a.addJSON(c)
	return c
}
