package keeptype

import "testing"

// A node that stopped beating is shown dead by the time its workflows are
// taken over (lease_ttl's default, 15 s), not long after (issue 27: a dead
// node stayed "alive" ≈ 11 s after the takeover).
func TestANodeIsAliveForThreeHeartbeats(t *testing.T) {
	n := Node{SeenAt: 100_000}
	for _, c := range []struct {
		after int64
		alive bool
	}{{0, true}, {5_000, true}, {14_999, true}, {15_000, false}, {30_000, false}} {
		if got := n.AliveAt(n.SeenAt + c.after); got != c.alive {
			t.Errorf("%d ms after its last heartbeat: alive %v, want %v", c.after, got, c.alive)
		}
	}
	if Count(1, "run") != "1 run" || Count(0, "run") != "0 runs" || Count(2, "producer") != "2 producers" {
		t.Error("Count")
	}
}
