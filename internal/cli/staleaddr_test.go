package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/daemon"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/store"
)

// After a kill -9, serve.addr stays behind; the port may now belong to
// another data directory's keep serve. A decision taken on the first data
// directory must not reach the second (issue 11 #10), nor must KEEP_TOKEN.
func TestStaleServeAddrDoesNotSendDecisionsElsewhere(t *testing.T) {
	dir, d1 := quickstart(t)
	d2 := filepath.Join(t.TempDir(), "data2")
	script := filepath.Join(dir, "workflow.js")
	for _, d := range []string{d1, d2} {
		if r := keep(t, "deploy", "--grant", "--data", d, script); r.code != 0 {
			t.Fatalf("deploy %s: %d %s %s", d, r.code, r.out, r.err)
		}
	}
	k2, err := daemon.Open(daemon.Options{DataDir: d2, FilesRoot: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(k2.HTTPHandler(""))
	t.Cleanup(func() { srv.Close(); k2.Close() })
	addr := strings.TrimPrefix(srv.URL, "http://")
	// d1's keep serve died long ago; its file names the port d2's serve has now.
	if err := os.WriteFile(daemon.AddrFile(d1), []byte(addr+" 0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := keep(t, "pause", "--data", d1, "quickstart-orders"); r.code != 0 {
		t.Fatalf("pause: %d %s %s", r.code, r.out, r.err)
	}
	paused := func(st store.Store) bool {
		var p bool
		if err := st.View(context.Background(), func(tx store.Tx) error {
			w, err := tx.WorkflowGet("quickstart-orders")
			p = w.Paused
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if paused(k2.Store) {
		t.Fatal("pausing the workflow of the first data directory paused the second's, through a stale serve.addr")
	}
	st1, err := daemon.OpenStore(d1, "")
	if err != nil {
		t.Fatal(err)
	}
	defer st1.Close()
	if !paused(st1) {
		t.Fatal("the first data directory's workflow was not paused")
	}
	// The live serve's own file is used: d2's CLI goes through its API.
	if err := k2.WriteAddr(addr); err != nil {
		t.Fatal(err)
	}
	if r := keep(t, "pause", "--data", d2, "quickstart-orders"); r.code != 0 {
		t.Fatalf("pause d2: %d %s %s", r.code, r.out, r.err)
	}
	if !paused(k2.Store) {
		t.Fatal("d2's workflow was not paused through its API")
	}
}

// Beside a running keep serve, keep deploy goes through its API (issue 13:
// the CLI is a client), with the same output and exit codes.
func TestDeployBesideServeGoesThroughTheAPI(t *testing.T) {
	dir, data := quickstart(t)
	script := filepath.Join(dir, "workflow.js")
	k, err := daemon.Open(daemon.Options{DataDir: data, FilesRoot: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(k.HTTPHandler(""))
	t.Cleanup(func() { srv.Close(); k.Close() })
	if err := k.WriteAddr(strings.TrimPrefix(srv.URL, "http://")); err != nil {
		t.Fatal(err)
	}
	r := keep(t, "deploy", "--grant", "--data", data, script)
	if r.code != 0 || !strings.Contains(r.out, "deployed quickstart-orders version 1.0 (through keep serve)") {
		t.Fatalf("deploy: %d %s %s", r.code, r.out, r.err)
	}
	bad := filepath.Join(dir, "bad.js")
	if err := os.WriteFile(bad, []byte(`export default Keep.workflow({ name: "bad", topics: {}, producers: { p: { publishes: ["nope"], schedule: { interval: "5m" }, handler: async () => {} } } })`), 0o644); err != nil {
		t.Fatal(err)
	}
	r = keep(t, "deploy", "--grant", "--data", data, bad)
	if r.code != ExitInvalid || !strings.Contains(r.err, "bad.js:") || !strings.Contains(r.err, "nope") || !strings.Contains(r.err, "nothing was deployed") {
		t.Fatalf("invalid deploy: %d %s %s", r.code, r.out, r.err)
	}
	r = keep(t, "deploy", "--grant", "--data", data, "--major", "--reprocess=none", script)
	if r.code != 0 || !strings.Contains(r.out, "version 2.0 (through keep serve)") {
		t.Fatalf("major deploy: %d %s %s", r.code, r.out, r.err)
	}
	// A decision goes through the API with the data directory's instance
	// secret, so keep serve believes --by: the log names alice.
	if r := keep(t, "pause", "--data", data, "--by", "alice", "quickstart-orders"); r.code != 0 {
		t.Fatalf("pause: %d %s %s", r.code, r.out, r.err)
	}
	var ds []kt.Decision
	if err := k.Store.View(context.Background(), func(tx store.Tx) error {
		var err error
		ds, err = tx.DecisionList("quickstart-orders", "")
		return err
	}); err != nil || len(ds) == 0 || ds[len(ds)-1].Action != "pause" || ds[len(ds)-1].By != "alice" {
		t.Fatalf("decision log: %v %+v", err, ds)
	}
	// An api.secret others may read is not used: the CLI says what to do.
	if err := os.Chmod(daemon.APISecretPath(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := keep(t, "resume", "--data", data, "quickstart-orders"); r.code == 0 || !strings.Contains(r.err, "chmod 600") {
		t.Fatalf("resume with a readable api.secret: %d %s %s", r.code, r.out, r.err)
	}
}
