package engine

import (
	"sync"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// The settle window (issue 11 #5) on the monotonic clock (issue 44). A
// "did not happen" is proof only once the settle time has passed since
// the call went out. Measured by the row's stored send time (SentAt)
// against the clock, a step of the wall clock an hour forward right after
// the call made the settle time "pass" at once: keep believed a second
// "not found" 1 s later and sent the write again, though the service
// applied the first 4 s after it. So the window is measured inside this
// process, on its monotonic clock: from the send, when this process sent
// it; else (keep restarted meanwhile, or another node sent it) from the
// first "not found" this process saw of it. That is later than the send,
// so the window is never shorter than the settle time, whatever any clock
// did; the cost is one more settle time for a write whose sender is gone.

// sendMarks notes this process's monotonic readings of the ledger rows
// whose outcome is not known yet. Forgetting one is safe (the row is then
// measured as if another process had sent it: a longer wait), so it is
// bounded by dropping any mark when full.
type sendMarks struct {
	mu sync.Mutex
	m  map[string]sendMark
}

// sendMark is about one send of a row (its SentAt).
type sendMark struct {
	sentAt int64
	// sent is the monotonic reading at the send, or -1: another process
	// sent it.
	sent time.Duration
	// notFound is the reading at the first "not found" seen, or -1.
	notFound time.Duration
}

// maxSendMarks bounds the marks kept (a mark dropped only lengthens a wait).
const maxSendMarks = 4096

func (s *sendMarks) putLocked(id string, m sendMark) {
	if s.m == nil {
		s.m = map[string]sendMark{}
	}
	if _, ok := s.m[id]; !ok && len(s.m) >= maxSendMarks {
		for k := range s.m {
			delete(s.m, k)
			break
		}
	}
	s.m[id] = m
}

// sent notes that this process sent mut at the monotonic reading at.
func (s *sendMarks) sent(mut kt.Mutation, at time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked(mut.ID, sendMark{sentAt: mut.SentAt, sent: at, notFound: -1})
}

// notFound notes a "not found" answer about mut's send at now and says
// how long the settle window has run (since the send, or since the first
// "not found" this process saw) and whether an earlier answer agreed.
func (s *sendMarks) notFound(mut kt.Mutation, now time.Duration) (waited time.Duration, earlier bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.m[mut.ID]
	if !ok || m.sentAt != mut.SentAt {
		m = sendMark{sentAt: mut.SentAt, sent: -1, notFound: -1}
	}
	earlier = m.notFound >= 0
	if !earlier {
		m.notFound = now
	}
	s.putLocked(mut.ID, m)
	from := m.sent
	if from < 0 {
		from = m.notFound
	}
	return now - from, earlier
}

// forget drops mut's mark: its outcome is known.
func (s *sendMarks) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}
