package bench

import (
	"syscall"
	"time"

	"github.com/keep-run/keep/internal/script"
)

// cpu is the CPU time (user + system) keep has used so far: its own
// process, and the sandbox worker processes that run its handlers
// (script.WorkerCPU), reported apart too.
type cpu struct{ self, workers time.Duration }

func (c cpu) total() time.Duration { return c.self + c.workers }

func (c cpu) sub(d cpu) cpu { return cpu{c.self - d.self, c.workers - d.workers} }

func cpuNow() cpu {
	c := cpu{workers: script.WorkerCPU()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return c
}
