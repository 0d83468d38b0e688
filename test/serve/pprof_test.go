// Package serve tests keep serve as a person runs it: the real binary.
package serve

import (
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/testbin"
)

var keepBin string

func TestMain(m *testing.M) { testbin.Main(m, &keepBin) }

// serve starts keep serve with args on a new data directory and returns
// its address and the data directory's instance secret.
func serve(t *testing.T, args ...string) (addr, secret string) {
	t.Helper()
	return testbin.Serve(t, keepBin, filepath.Join(t.TempDir(), "data"), args...)
}

// get fetches url with bearer (none when "") and returns the status and body.
func get(t *testing.T, url, bearer string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestProfilesAreOffByDefault(t *testing.T) {
	t.Parallel()
	addr, secret := serve(t)
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline"} {
		if st, body := get(t, addr+p, secret); st != http.StatusNotFound || strings.Contains(body, "goroutine") {
			t.Fatalf("%s on a keep serve without --pprof, with the instance secret: %d, want 404\n%s", p, st, body)
		}
	}
}

func TestProfilesNeedProofOfWhoAsks(t *testing.T) {
	t.Parallel()
	addr, secret := serve(t, "--pprof")
	// A tokenless keep serve shows its page to anyone on this machine, but
	// not its profiles.
	if st, _ := get(t, addr+"/api/v1/workflows", ""); st != http.StatusOK {
		t.Fatalf("the API's reads without a token: %d", st)
	}
	for _, bearer := range []string{"", "not-the-secret"} {
		st, body := get(t, addr+"/debug/pprof/goroutine?debug=1", bearer)
		if st != http.StatusUnauthorized || !strings.Contains(body, "api.secret") || strings.Contains(body, "goroutine profile") {
			t.Fatalf("profiles with bearer %q: %d, want 401 saying how to authenticate\n%s", bearer, st, body)
		}
	}
	if st, body := get(t, addr+"/debug/pprof/goroutine?debug=1", secret); st != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Fatalf("profiles with the instance secret: %d\n%.300s", st, body)
	}
	if st, body := get(t, addr+"/debug/pprof/heap", secret); st != http.StatusOK || len(body) == 0 {
		t.Fatalf("heap profile: %d, %d bytes", st, len(body))
	}

	addr, _ = serve(t, "--pprof", "--token", "t0ken")
	if st, body := get(t, addr+"/debug/pprof/cmdline", ""); st == http.StatusOK || strings.Contains(body, "t0ken") {
		t.Fatalf("profiles of a keep serve with a token, without it: %d\n%s", st, body)
	}
	if st, body := get(t, addr+"/debug/pprof/", "t0ken"); st != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("profiles with the token: %d\n%.300s", st, body)
	}
}

func TestPprofNeedsAnAddress(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(keepBin, "serve", "--pprof", "--addr", "", "--data", t.TempDir()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--pprof serves the profiles on keep serve's address") {
		t.Fatalf("keep serve --pprof --addr \"\": %v\n%s", err, out)
	}
}
