package testsink

import "github.com/keep-run/keep/internal/fake/fault"

// kinds are package fault's kinds as the sink injects them.
var kinds = map[string]func(retryAfter int) Fault{
	fault.TimeoutAfterApply: func(int) Fault { return TimeoutAfter },
	fault.DropAfterApply:    func(int) Fault { return ResetAfter },
	fault.Status500After:    func(int) Fault { return Status500 },
	fault.Timeout:           func(int) Fault { return TimeoutBefore },
	fault.Drop:              func(int) Fault { return DropBefore },
	fault.Status429:         RetryAfter,
	fault.Status500:         func(int) Fault { return Status(500) },
	fault.Status503:         func(int) Fault { return Status503 },
	fault.Status401:         func(int) Fault { return Status(401) },
	fault.Status403:         func(int) Fault { return Status(403) },
}

// QueueKind queues the sink's fault for a kind of package fault (the
// connectors' shared suite arms these); false when the sink has none.
func (s *Sink) QueueKind(kind string, retryAfter int) bool {
	f, ok := kinds[kind]
	if ok {
		s.Queue(f(retryAfter))
	}
	return ok
}
