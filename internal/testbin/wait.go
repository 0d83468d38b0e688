package testbin

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"
)

// Patience is how long a test waits for something keep will do, however
// busy the machine: long enough that only a real hang reaches it (a test
// must never race a timer against work). KEEP_TEST_PATIENCE (a Go
// duration) changes it.
func Patience() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("KEEP_TEST_PATIENCE")); err == nil && d > 0 {
		return d
	}
	return 5 * time.Minute
}

// WaitFor polls cond until it holds, and fails the test naming what it
// waited for (and, if given, what keep said: its logs) after Patience.
func WaitFor(t testing.TB, what string, cond func() bool, said ...fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(Patience())
	for !cond() {
		if time.Now().After(deadline) {
			if len(said) > 0 {
				t.Fatalf("timed out after %s waiting for %s; keep said:\n%s", Patience(), what, said[0])
			}
			t.Fatalf("timed out after %s waiting for %s", Patience(), what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// FreePort returns a 127.0.0.1 address no one listens on right now.
func FreePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
