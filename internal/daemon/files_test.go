package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// A CLI polls serve.addr while keep serve writes it: it must read either
// nothing (no file yet) or a whole address, never an empty or cut file.
func TestTheAddressFileIsNeverSeenHalfWritten(t *testing.T) {
	dir := t.TempDir()
	k := &Keep{DataDir: dir, Instance: strings.Repeat("ab", 16)}
	var done atomic.Bool
	seen := make(chan string, 1)
	go func() {
		defer close(seen)
		for !done.Load() {
			_, _, err := ReadAddr(dir)
			if err != nil && !os.IsNotExist(err) {
				seen <- err.Error()
				return
			}
		}
	}()
	for i := 0; i < 2000; i++ {
		if err := k.WriteAddr("127.0.0.1:" + strings.Repeat("9", 1+i%5)); err != nil {
			t.Fatal(err)
		}
	}
	done.Store(true)
	if bad, ok := <-seen; ok {
		t.Fatalf("a reader saw the address file while it was written: %s", bad)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.new")); len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}
