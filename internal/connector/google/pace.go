package google

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// SheetsPerMinute is the Sheets API's quota per user: 60 read requests
// and 60 write requests a minute (per Cloud project). keep sends at most
// that many in any minute, waiting for its turn, rather than learning the
// limit from 429s; an append costs three requests (two reads, a write).
const SheetsPerMinute = 60

// pacer keeps requests under a per-minute quota, reads and writes apart:
// at most n in any sliding minute (so in any minute Google counts too).
type pacer struct {
	mu    sync.Mutex
	n     int
	used  map[bool][]time.Time // write? → the last minute's requests
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

func newPacer(n int) *pacer {
	return &pacer{n: n, used: map[bool][]time.Time{}, now: time.Now, sleep: sleepCtx}
}

// errPaced is a request that would wait for its turn past its time limit.
type errPaced struct{ wait time.Duration }

func (e errPaced) Error() string {
	return fmt.Sprintf("keep paces Sheets requests at %d a minute (Google's quota per user), and this one's turn comes in %v, after its time limit", SheetsPerMinute, e.wait.Round(time.Second))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return errPaced{d}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait returns when a request may go.
func (p *pacer) wait(ctx context.Context, write bool) error {
	for {
		p.mu.Lock()
		now := p.now()
		use := p.used[write]
		for len(use) > 0 && !now.Before(use[0].Add(time.Minute)) {
			use = use[1:]
		}
		if len(use) < p.n {
			p.used[write] = append(use, now)
			p.mu.Unlock()
			return nil
		}
		p.used[write] = use
		d := use[0].Add(time.Minute).Sub(now)
		p.mu.Unlock()
		if err := p.sleep(ctx, d); err != nil {
			return err
		}
	}
}

// paced is a transport whose requests wait for the pacer.
type paced struct {
	base http.RoundTripper
	p    *pacer
}

func (t paced) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := t.p.wait(r.Context(), r.Method != http.MethodGet); err != nil {
		return nil, err
	}
	return t.base.RoundTrip(r)
}
