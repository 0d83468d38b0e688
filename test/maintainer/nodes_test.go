package maintainer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/fake/llmfake"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/report"
	"github.com/keep-run/keep/internal/store"
	"github.com/keep-run/keep/internal/store/backend"
	"github.com/keep-run/keep/internal/store/postgres/pgtest"
	"github.com/keep-run/keep/internal/testsink"
)

// Case 8 of issue 22: two keep serve nodes on one PostgreSQL database see
// the same failed run. The model's answer is held back until the other
// node has found the workflow taken: one node asks, one conversation, one
// activated version (1.1, never 1.2), every order written once.
func TestTwoNodesRepairAFailedRunOnce(t *testing.T) {
	pg := pgtest.FreshSchema(t)
	sink := testsink.New()
	t.Cleanup(sink.Close)
	src := strings.ReplaceAll(broken, "%SINK%", sink.URL)
	llm := llmfake.New(llmfake.Reply{Content: answer(fixed(src)), Tokens: 700}, llmfake.Reply{Content: answer(fixed(src)), Tokens: 700})
	release := llm.Hold()
	t.Cleanup(release)
	ep := httptest.NewServer(llm.Handler())
	t.Cleanup(ep.Close)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(sink.AllowTOML()+fmt.Sprintf("\n[llm]\nbase_url = %q\nmodel = \"fake-coder\"\n\n[policy]\ntransient_backoff = \"20ms\"\nlease_ttl = \"3s\"\n", ep.URL+"/v1")), 0o644)
	os.WriteFile(filepath.Join(dir, "orders.js"), []byte(src), 0o644)
	jobs, _ := json.Marshal([]map[string]string{{"id": "1", "customer": "ann"}, {"id": "2", "note": "bob"}, {"id": "3", "customer": "bob"}})
	os.WriteFile(filepath.Join(dir, "jobs.json"), jobs, 0o644)
	keep := func(args ...string) (string, error) {
		cmd := exec.Command(keepBin, append(args, "--data", filepath.Join(dir, "cli"), "--store", pg)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := keep("deploy", "--grant", "orders.js"); err != nil {
		t.Fatalf("deploy: %v %s", err, out)
	}
	logs, addrs := map[string]string{}, map[string]string{}
	for _, name := range []string{"a", "b"} {
		logs[name] = filepath.Join(dir, name+".log")
		logf, _ := os.Create(logs[name])
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		addrs[name] = l.Addr().String()
		l.Close()
		cmd := exec.Command(keepBin, "serve", "--addr", addrs[name], "--data", filepath.Join(dir, name), "--store", pg, "--config", filepath.Join(dir, "keep.toml"))
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); logf.Close() })
	}
	r := &rig{t: t, dir: dir, sink: sink, llm: llm, logs: &strings.Builder{}}
	t.Cleanup(func() {
		if t.Failed() {
			for n, f := range logs {
				b, _ := os.ReadFile(f)
				t.Logf("node %s said:\n%s", n, b)
			}
		}
	})
	r.keep = func(args ...string) (string, int) {
		out, err := keep(args...)
		if ee, ok := err.(*exec.ExitError); ok {
			return out, ee.ExitCode()
		}
		return out, 0
	}
	r.waitFor("one node to ask the model", func() bool { return len(llm.Requests()) == 1 })
	r.waitFor("the other node to find the workflow taken", func() bool {
		for _, a := range addrs {
			resp, err := http.Get("http://" + a + "/metrics")
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), "\nkeep_maintainer_waits_total ") && !strings.Contains(string(b), "\nkeep_maintainer_waits_total 0\n") {
				return true
			}
		}
		return false
	})
	if rs := r.repairs(); len(rs) != 1 || rs[0].Status != "asking" {
		t.Fatalf("the attempt is not recorded before the answer: %+v", rs)
	}
	release()
	r.waitFor("every order written", func() bool { return len(r.writes()) == 3 && r.idle() })
	if n := len(llm.Requests()); n != 1 {
		t.Fatalf("%d conversations with the model for one failed run", n)
	}
	rs := r.repairs()
	if len(rs) != 1 || rs[0].Status != "activated" || rs[0].Tokens != 700 {
		t.Fatalf("repairs %+v", rs)
	}
	out, _ := r.keep("status", "orders", "--json")
	if !strings.Contains(out, `"version": "1.1"`) {
		t.Fatalf("not version 1.1:\n%s", out)
	}
	for path, n := range r.writes() {
		if n != 1 {
			t.Fatalf("%s written %d times", path, n)
		}
	}
}

// keep serve stopped (SIGTERM) while its Maintainer waits for the model
// with the workflow's lease: the repair is cancelled and releases the
// lease before keep serve closes its store, so another node can take the
// workflow at once instead of after lease_ttl; then the node is shown
// stopped. (Before, the store was closed first: the lease stayed a full
// lease_ttl with a node that was gone.)
func TestAStoppedNodeLeavesNoRepairsLeaseBehind(t *testing.T) {
	pg := pgtest.FreshSchema(t)
	sink := testsink.New()
	t.Cleanup(sink.Close)
	src := strings.ReplaceAll(broken, "%SINK%", sink.URL)
	llm := llmfake.New(llmfake.Reply{Content: answer(fixed(src)), Tokens: 700})
	release := llm.Hold()
	t.Cleanup(release)
	ep := httptest.NewServer(llm.Handler())
	t.Cleanup(ep.Close)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep.toml"), []byte(sink.AllowTOML()+fmt.Sprintf("\n[llm]\nbase_url = %q\nmodel = \"fake-coder\"\n\n[policy]\ntransient_backoff = \"20ms\"\nlease_ttl = \"10m\"\n", ep.URL+"/v1")), 0o644)
	os.WriteFile(filepath.Join(dir, "orders.js"), []byte(src), 0o644)
	jobs, _ := json.Marshal([]map[string]string{{"id": "1", "customer": "ann"}, {"id": "2", "note": "bob"}})
	os.WriteFile(filepath.Join(dir, "jobs.json"), jobs, 0o644)
	deploy := exec.Command(keepBin, "deploy", "--grant", "orders.js", "--data", filepath.Join(dir, "cli"), "--store", pg)
	deploy.Dir = dir
	if out, err := deploy.CombinedOutput(); err != nil {
		t.Fatalf("deploy: %v %s", err, out)
	}
	logf, _ := os.Create(filepath.Join(dir, "serve.log"))
	cmd := exec.Command(keepBin, "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "a"), "--store", pg, "--config", filepath.Join(dir, "keep.toml"))
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); logf.Close() })
	r := &rig{t: t, dir: dir, sink: sink, llm: llm, logs: &strings.Builder{}}
	r.waitFor("the Maintainer to ask the model", func() bool { return len(llm.Requests()) == 1 })
	loc, err := backend.Parse(pg, "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := loc.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	held := func() []kt.Lease {
		var out []kt.Lease
		now := time.Now().UnixMilli()
		if err := st.View(context.Background(), func(tx store.Tx) error {
			ls, err := tx.LeaseList()
			for _, l := range ls {
				if l.ExpiresAt > now {
					out = append(out, l)
				}
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if ls := held(); len(ls) != 1 || ls[0].Workflow != "orders" {
		t.Fatalf("leases while the repair waits for the model: %+v", ls)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
		t.Fatalf("keep serve after SIGTERM: %v\n%s", err, b)
	}
	if ls := held(); len(ls) != 0 {
		b, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
		t.Fatalf("leases left by the stopped node (another node waits for them until they expire): %+v\n%s", ls, b)
	}
	ns, err := report.Nodes(context.Background(), st, time.Now().UnixMilli())
	if err != nil || len(ns) != 1 || ns[0].StoppedAt == "" || ns[0].Alive {
		t.Fatalf("the node after it stopped: %+v %v; want it shown stopped", ns, err)
	}
}
