//go:build linux

package http_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testsink"
)

// post sends one write (a POST with a JSON body) under key through m.
func post(ctx context.Context, m *connector.Method, sink *testsink.Sink, key string, extra map[string]any) connector.Result {
	args := map[string]any{"method": "POST", "url": sink.URL + "/write/" + key, "json": map[string]any{"key": key}}
	for k, v := range extra {
		args[k] = v
	}
	return m.Do(ctx, connector.Call{Args: args, IdempotencyKey: key})
}

// arrivals counts the write requests that reached the sink under each key,
// applied or not.
func arrivals(sink *testsink.Sink) map[string]int {
	n := map[string]int{}
	for _, h := range sink.Seen() {
		n[h.Get("Idempotency-Key")]++
	}
	return n
}

func TestWritesReuseConnections(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	m := allowing(sink).Methods["request"]
	for i := 0; i < 20; i++ {
		if r := post(context.Background(), m, sink, fmt.Sprintf("keep-%d", i), nil); r.Outcome != connector.OutcomeApplied {
			t.Fatalf("write %d: %d %v", i, r.Outcome, r.Err)
		}
	}
	if n, w := sink.Conns(), len(sink.Writes()); n != 1 || w != 20 {
		t.Fatalf("20 writes one after another opened %d connections (want 1) and applied %d", n, w)
	}
	// A write without a body opens a connection of its own: Go's transport
	// would re-send it by itself after a failure on a reused connection.
	for i := 0; i < 3; i++ {
		r := m.Do(context.Background(), connector.Call{Args: map[string]any{"method": "DELETE", "url": sink.URL + "/write/d"}, IdempotencyKey: fmt.Sprintf("keep-d%d", i)})
		if r.Outcome != connector.OutcomeApplied {
			t.Fatalf("delete %d: %d %v", i, r.Outcome, r.Err)
		}
	}
	if n := sink.Conns(); n != 4 {
		t.Fatalf("3 deletes after them: %d connections in all, want 4", n)
	}
}

// TestWriteOnAStaleConnectionGoesOnceMore: the sink's keep-alive ends
// (it resets the idle connection) after keep took that connection for the
// next write and before keep sent a byte of it. The write goes once more,
// on a new connection, and the sink counts it once.
func TestWriteOnAStaleConnectionGoesOnceMore(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	m := allowing(sink).Methods["request"]
	if r := post(context.Background(), m, sink, "keep-1", nil); r.Outcome != connector.OutcomeApplied {
		t.Fatal(r.Err)
	}
	var staled atomic.Int32
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			return
		}
		// The sink marks the connection idle once it has sent its answer,
		// which may be a moment after keep read it.
		for sink.CloseIdle(true) == 0 {
			time.Sleep(time.Millisecond)
		}
		waitReset(info.Conn)
		staled.Add(1)
	}})
	r := post(ctx, m, sink, "keep-2", nil)
	if r.Outcome != connector.OutcomeApplied {
		t.Fatalf("the write on a dead reused connection: outcome %d (%v), want applied on a new connection", r.Outcome, r.Err)
	}
	if staled.Load() != 1 {
		t.Fatalf("the second write took a reused connection %d times, want 1", staled.Load())
	}
	if a := arrivals(sink); a["keep-2"] != 1 || len(sink.Writes()) != 2 {
		t.Fatalf("the sink saw keep-2 %d times and applied %d writes; want 1 and 2", a["keep-2"], len(sink.Writes()))
	}
	if n := sink.Conns(); n != 2 {
		t.Fatalf("%d connections, want 2 (the second write went again on a new one)", n)
	}
}

// waitReset waits until the kernel has the client's side of c closed by
// the server's reset (or keep has closed c itself).
func waitReset(c net.Conn) {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = u.NetConn()
	}
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return
	}
	for {
		state := uint8(0)
		if raw.Control(func(fd uintptr) {
			if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				state = info.State
			}
		}) != nil || state == 7 { // closed by keep, or Linux's TCP_CLOSE
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWriteFailingAfterItWentOutIsNotSentAgain: on a reused connection,
// the sink reads a write and drops the connection without answering
// (applied or not). The write is not sent again: its outcome is unknown,
// and the reconcile probe settles it as before.
func TestWriteFailingAfterItWentOutIsNotSentAgain(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	m := allowing(sink).Methods["request"]
	probe := map[string]any{"reconcile": map[string]any{"url": sink.URL + "/writes/{idempotencyKey}"}}
	cases := []struct {
		fault   testsink.Fault
		applied bool
		settled connector.ReconcileStatus
	}{
		{testsink.DropBefore, false, connector.ReconcileFailed},
		{testsink.ResetAfter, true, connector.ReconcileApplied},
	}
	for i, c := range cases {
		conns := sink.Conns()
		first := fmt.Sprintf("keep-ok-%d", i)
		if r := post(context.Background(), m, sink, first, nil); r.Outcome != connector.OutcomeApplied {
			t.Fatal(r.Err)
		}
		sink.Queue(c.fault)
		key := fmt.Sprintf("keep-%s", c.fault)
		r := post(context.Background(), m, sink, key, probe)
		if r.Outcome != connector.OutcomeUncertain || r.Err == nil || r.Err.Class != kt.ClassIndeterminate {
			t.Fatalf("%s on a reused connection: outcome %d %+v, want an unknown outcome", c.fault, r.Outcome, r.Err)
		}
		if got := sink.Conns() - conns; got != 1 {
			t.Fatalf("%s: the two writes opened %d connections, want 1 (the second reused the first's, and nothing went again)", c.fault, got)
		}
		if a := arrivals(sink); a[key] != 1 {
			t.Fatalf("%s: the sink saw the write %d times, want once", c.fault, a[key])
		}
		found := false
		for _, w := range sink.Writes() {
			found = found || w.Key == key
		}
		if found != c.applied {
			t.Fatalf("%s: applied %v, want %v", c.fault, found, c.applied)
		}
		st, _, err := m.Reconcile(context.Background(), connector.Call{Args: map[string]any{"method": "POST", "url": sink.URL + "/write/" + key, "reconcile": probe["reconcile"]}, IdempotencyKey: key})
		if st != c.settled {
			t.Fatalf("%s: reconcile %s (%v), want %s", c.fault, st, err, c.settled)
		}
	}
}

// TestWritesNeverTwiceWhileTheServerClosesIdleConnections tries to break
// the rule: writers send while the sink keeps closing its idle
// connections, with FINs and resets, at any moment. Whatever each write's
// outcome, the sink never sees one twice, an applied write was applied,
// and a write keep says was not sent never arrived.
func TestWritesNeverTwiceWhileTheServerClosesIdleConnections(t *testing.T) {
	t.Parallel()
	sink := testsink.New()
	defer sink.Close()
	m := allowing(sink).Methods["request"]
	stop := make(chan struct{})
	var closer sync.WaitGroup
	closer.Add(1)
	go func() {
		defer closer.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			sink.CloseIdle(i%2 == 0)
			time.Sleep(time.Duration(i%3) * time.Millisecond)
		}
	}()
	const writers, each = 6, 40
	results := make([][]connector.Result, writers)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				results[w] = append(results[w], post(context.Background(), m, sink, fmt.Sprintf("keep-%d-%d", w, i), map[string]any{"timeoutMs": float64(60000)}))
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	closer.Wait()
	arrived := arrivals(sink)
	applied := map[string]bool{}
	for _, w := range sink.Writes() {
		applied[w.Key] = true
	}
	tally := map[string]int{}
	for w := range results {
		for i, r := range results[w] {
			key := fmt.Sprintf("keep-%d-%d", w, i)
			if arrived[key] > 1 {
				t.Errorf("%s reached the sink %d times", key, arrived[key])
			}
			switch {
			case r.Outcome == connector.OutcomeApplied:
				tally["applied"]++
				if !applied[key] {
					t.Errorf("%s: applied, but the sink has no such write", key)
				}
			case r.Outcome == connector.OutcomeFailed && r.Err != nil && r.Err.Class == kt.ClassTransient:
				tally["not sent"]++
				if arrived[key] != 0 {
					t.Errorf("%s: said not sent, but the sink saw it", key)
				}
			case r.Outcome == connector.OutcomeUncertain:
				tally["unknown"]++
			default:
				t.Errorf("%s: outcome %d %+v", key, r.Outcome, r.Err)
			}
		}
	}
	t.Logf("%d writes on %d connections: %v", writers*each, sink.Conns(), tally)
}

// BenchmarkWriteConnections reports the connections opened per 1,000
// writes, one writer and 32 at once (before connections were reused: 1,000).
func BenchmarkWriteConnections(b *testing.B) {
	for _, par := range []int{1, 32} {
		b.Run(fmt.Sprintf("writers=%d", par), func(b *testing.B) {
			sink := testsink.New()
			defer sink.Close()
			m := allowing(sink).Methods["request"]
			var n atomic.Int64
			b.SetParallelism((par + 1) / 2) // × GOMAXPROCS goroutines; 2 cores here
			if par == 1 {
				b.SetParallelism(1)
			}
			b.ResetTimer()
			run := func(next func() bool) {
				for next() {
					key := fmt.Sprintf("keep-%d", n.Add(1))
					if r := post(context.Background(), m, sink, key, nil); r.Outcome != connector.OutcomeApplied {
						b.Fatalf("%s: %d %v", key, r.Outcome, r.Err)
					}
				}
			}
			if par == 1 {
				run(func() bool { return n.Load() < int64(b.N) })
			} else {
				b.RunParallel(func(pb *testing.PB) { run(pb.Next) })
			}
			b.ReportMetric(float64(sink.Conns())*1000/float64(n.Load()), "conns/1000writes")
		})
	}
}
