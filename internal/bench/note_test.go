package bench

import (
	"strings"
	"testing"
)

func TestCPUBoundNote(t *testing.T) {
	// 5,000 fsyncs/s and 3 per run: 600 µs of fsync per event; with 2,400
	// µs of CPU the ratio is near 600 / 3,000 = 20 %.
	r := Result{FsyncRate: 5000, FsyncsPerRun: 3, W1CPUMicros: 2400, W1Ratio: 0.19}
	n := cpuBoundNote(r)
	for _, want := range []string{"2400 µs of CPU", "600 µs of fsync", "near 20%"} {
		if !strings.Contains(n, want) {
			t.Errorf("note %q lacks %q", n, want)
		}
	}
	if n := cpuBoundNote(Result{FsyncRate: 5000, FsyncsPerRun: 3, W1CPUMicros: 100, W1Ratio: 0.7}); n != "" {
		t.Errorf("a ratio above 50%% needs no explanation, got %q", n)
	}
	if n := cpuBoundNote(Result{FsyncsPerRun: 3, W1CPUMicros: 100}); n != "" {
		t.Errorf("without a measured fsync rate there is nothing to explain, got %q", n)
	}
}
