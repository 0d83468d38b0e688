package script

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// exitedCPU is the CPU time (user + system) of the workers that ended.
	exitedCPU atomic.Int64
	// liveWorkers are the worker processes not yet waited for.
	liveWorkers sync.Map // *worker → struct{}
)

// WorkerCPU reports the CPU time (user + system) every sandbox worker of
// this process used so far: those that ended, from their exit status, and
// those alive, from the scheduler's own count of each of their threads
// (/proc/PID/task/*/schedstat, in nanoseconds: the clock ticks of
// /proc/PID/stat are too coarse for many small processes). keep bench adds
// it to keep's own CPU, so that a run's cost includes its handlers'.
func WorkerCPU() time.Duration {
	total := exitedCPU.Load()
	liveWorkers.Range(func(k, _ any) bool {
		total += int64(processCPU(k.(*worker).cmd.Process.Pid))
		return true
	})
	return time.Duration(total)
}

// processCPU sums the time each thread of a process spent on a CPU; 0 when
// the process is gone or /proc is not there.
func processCPU(pid int) time.Duration {
	dirs, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var total int64
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var ns int64
		if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &ns); err == nil {
			total += ns
		}
	}
	return time.Duration(total)
}
