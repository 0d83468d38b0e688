package testbin

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Serve starts keep serve (the binary bin) with args on the data
// directory data, stopped when the test ends, and returns its address
// ("http://…") and the data directory's instance secret once it serves.
func Serve(t testing.TB, bin, data string, args ...string) (addr, secret string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--data", data}, args...)...)
	cmd.Env = append(os.Environ(), "KEEP_TOKEN=")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	for {
		if b, err := os.ReadFile(filepath.Join(data, "serve.addr")); err == nil {
			s, err := os.ReadFile(filepath.Join(data, "api.secret"))
			if err != nil {
				t.Fatal(err)
			}
			f := strings.Fields(string(b))
			if len(f) != 2 {
				t.Fatalf("serve.addr is not an address and an instance id: %q", b)
			}
			return "http://" + f[0], strings.TrimSpace(string(s))
		}
		select {
		case err := <-exited:
			t.Fatalf("keep serve exited: %v\n%s", err, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// StartFake starts keep-fake (built beside keepBin, Fake) with args — the
// fake's name first ("google", "slack", "llm --reply FILE") — stopped when
// the test ends, and returns the base URL it prints first.
func StartFake(t testing.TB, keepBin string, args ...string) string {
	t.Helper()
	bin, err := Fake(keepBin)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "http://") {
		t.Fatalf("keep-fake %s's first line: %q %v", strings.Join(args, " "), line, err)
	}
	return strings.TrimSpace(line)
}
