package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func keepIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := RunWithInput(args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// keep secret set reads the value from standard input and never prints
// it; list shows names and times, never values; the store holds it only
// sealed; rm forgets it.
func TestSecretSetListRemove(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	const value = "xoxb-secret-value-4242"
	if r := keepIn(t, "", "secret", "set", "--data", data, "slack_token"); r.code == 0 || !strings.Contains(r.err, "no value on standard input") {
		t.Fatalf("an empty value: %d %s %s", r.code, r.out, r.err)
	}
	if r := keepIn(t, value, "secret", "set", "--data", data, "bad name"); r.code == 0 || !strings.Contains(r.err, "only letters, digits") {
		t.Fatalf("a bad name: %d %s", r.code, r.err)
	}
	r := keepIn(t, value+"\n", "secret", "set", "--data", data, "slack_token")
	if r.code != 0 || !strings.Contains(r.out, "{secret:slack_token}") || strings.Contains(r.out+r.err, value) {
		t.Fatalf("set: %d %s %s", r.code, r.out, r.err)
	}
	for _, args := range [][]string{{"secret", "list", "--data", data}, {"secret", "list", "--data", data, "--json"}} {
		r := keep(t, args...)
		if r.code != 0 || !strings.Contains(r.out, "slack_token") || strings.Contains(r.out, value) {
			t.Fatalf("%v: %d %s %s", args, r.code, r.out, r.err)
		}
	}
	db, err := os.ReadFile(filepath.Join(data, "keep.db"))
	wal, _ := os.ReadFile(filepath.Join(data, "keep.db-wal"))
	if err != nil || bytes.Contains(append(db, wal...), []byte(value)) {
		t.Fatalf("keep.db holds the value in clear (%v)", err)
	}
	if r := keep(t, "secret", "rm", "--data", data, "slack_token"); r.code != 0 {
		t.Fatalf("rm: %d %s", r.code, r.err)
	}
	if r := keep(t, "secret", "rm", "--data", data, "slack_token"); r.code == 0 || !strings.Contains(r.err, "no secret named slack_token") {
		t.Fatalf("rm twice: %d %s", r.code, r.err)
	}
	if r := keep(t, "secret", "list", "--data", data); !strings.Contains(r.out, "no secrets") {
		t.Fatalf("list after rm: %s", r.out)
	}
}
