package files

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

func call(t *testing.T, c *connector.Connector, method string, args map[string]any) connector.Result {
	t.Helper()
	m := c.Methods[method]
	if m.Validate != nil {
		if err := m.Validate(args); err != nil {
			return connector.Result{Err: kt.Errorf(kt.ClassLogic, "%v", err)}
		}
	}
	return m.Do(context.Background(), connector.Call{Args: args})
}

func TestWriteReadList(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	c := New(root)
	w := call(t, c, "write", map[string]any{"path": "out/a.txt", "content": "hello"})
	if w.Err != nil || w.Outcome != connector.OutcomeApplied {
		t.Fatalf("write %+v", w)
	}
	r := call(t, c, "read", map[string]any{"path": "out/a.txt"})
	if r.Err != nil || r.Value.(map[string]any)["content"] != "hello" || r.Value.(map[string]any)["sha256"] != w.Value.(map[string]any)["sha256"] {
		t.Fatalf("read %+v", r)
	}
	l := call(t, c, "list", map[string]any{"dir": "out", "glob": "*.txt"})
	items := l.Value.([]any)
	if l.Err != nil || len(items) != 1 || items[0].(map[string]any)["path"] != "out/a.txt" {
		t.Fatalf("list %+v", l)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(root, "out", ".keep-write-*")); len(leftovers) != 0 {
		t.Fatalf("temp files left: %v", leftovers)
	}
}

func TestPathsOutsideTheRootArePermissionErrors(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	c := New(root)
	for _, p := range []string{"../x", "/etc/passwd", "a/../../x", "link/secret"} {
		r := call(t, c, "write", map[string]any{"path": p, "content": "x"})
		if r.Err == nil || r.Err.Class != kt.ClassPermission || r.Outcome != connector.OutcomeFailed {
			t.Errorf("write %q: %+v", p, r.Err)
		}
		if r := call(t, c, "read", map[string]any{"path": p}); r.Err == nil || r.Err.Class != kt.ClassPermission {
			t.Errorf("read %q: %+v", p, r.Err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("a write escaped the root: %v", entries)
	}
}

func TestReadErrorsAreClassified(t *testing.T) {
	t.Parallel()
	c := New(t.TempDir())
	if r := call(t, c, "read", map[string]any{"path": "missing"}); r.Err == nil || r.Err.Class != kt.ClassPrecondition {
		t.Fatalf("missing file: %+v", r.Err)
	}
	if r := call(t, c, "read", map[string]any{}); r.Err == nil || r.Err.Class != kt.ClassLogic {
		t.Fatalf("no path: %+v", r.Err)
	}
	if r := call(t, c, "write", map[string]any{"path": "a", "content": 5}); r.Err == nil || r.Err.Class != kt.ClassLogic {
		t.Fatalf("non-string content: %+v", r.Err)
	}
}

func TestReadOnlyRootIsADefiniteFailure(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		// root ignores permission bits; make the target a directory instead,
		// which no write can replace.
		root := t.TempDir()
		os.MkdirAll(filepath.Join(root, "a", "b"), 0o755)
		r := call(t, New(root), "write", map[string]any{"path": "a", "content": "x"})
		if r.Err == nil || r.Outcome != connector.OutcomeFailed {
			t.Fatalf("%+v", r)
		}
		return
	}
	root := t.TempDir()
	os.Chmod(root, 0o500)
	defer os.Chmod(root, 0o700)
	r := call(t, New(root), "write", map[string]any{"path": "a", "content": "x"})
	if r.Err == nil || r.Err.Class != kt.ClassPermission || r.Outcome != connector.OutcomeFailed {
		t.Fatalf("%+v", r)
	}
}

func TestReconcileWrite(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	c := New(root)
	m := c.Methods["write"]
	args := map[string]any{"path": "x.txt", "content": "v1"}
	st, _, _ := m.Reconcile(context.Background(), connector.Call{Args: args})
	if st != connector.ReconcileFailed {
		t.Fatalf("absent → %s", st)
	}
	os.WriteFile(filepath.Join(root, "x.txt"), []byte("v1"), 0o644)
	st, v, _ := m.Reconcile(context.Background(), connector.Call{Args: args})
	if st != connector.ReconcileApplied || v.(map[string]any)["bytes"] != 2 {
		t.Fatalf("same content → %s %v", st, v)
	}
	os.WriteFile(filepath.Join(root, "x.txt"), []byte("other"), 0o644)
	if st, _, _ := m.Reconcile(context.Background(), connector.Call{Args: args}); st != connector.ReconcileRetry {
		t.Fatalf("other content → %s", st)
	}
}

func TestComparePayload(t *testing.T) {
	t.Parallel()
	cmp := New(t.TempDir()).Methods["write"].ComparePayload
	if cmp(map[string]any{"content": "a b"}, map[string]any{"content": "a b"}) != connector.Equivalent ||
		cmp(map[string]any{"content": "a  b\n"}, map[string]any{"content": "a b"}) != connector.Minor ||
		cmp(map[string]any{"content": "a"}, map[string]any{"content": "b"}) != connector.Significant {
		t.Fatal("comparePayload")
	}
}

// TestWriteThatFailsHalfwayLeavesTheOldContent fills the disk during a
// write: the write fails definitely, and the file keeps its old content.
func TestWriteThatFailsHalfwayLeavesTheOldContent(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", root).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v %s", err, out)
	}
	defer exec.Command("umount", "-l", root).Run()
	c := New(root)
	if r := call(t, c, "write", map[string]any{"path": "a.txt", "content": "old"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	big := strings.Repeat("x", 400<<10) // more than the disk holds
	r := call(t, c, "write", map[string]any{"path": "a.txt", "content": big})
	if r.Err == nil || r.Outcome != connector.OutcomeFailed {
		t.Fatalf("a write larger than the disk: %+v", r)
	}
	b, err := os.ReadFile(filepath.Join(root, "a.txt"))
	if err != nil || string(b) != "old" {
		t.Fatalf("after the failed write the file holds %d bytes (%v), want the old content", len(b), err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(root, ".keep-write-*")); len(leftovers) != 0 {
		t.Fatalf("temp files left: %v", leftovers)
	}
	// And reconcile says it did not happen.
	st, _, _ := c.Methods["write"].Reconcile(context.Background(), connector.Call{Args: map[string]any{"path": "a.txt", "content": big}})
	if st != connector.ReconcileRetry {
		t.Fatalf("reconcile of the failed write: %s (the old content is there, not ours)", st)
	}
}

// A relative root (the default of `keep run wf.js` and `keep serve`) must
// hold as well as an absolute one: a symlink out of it is refused for read
// and write, and nothing is created outside.
func TestRelativeRootDoesNotLetSymlinksOut(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	rootDir := filepath.Join(base, "root")
	for _, d := range []string{outside, rootDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../outside", filepath.Join(rootDir, "link")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(base)
	c := New("root")
	if r := call(t, c, "read", map[string]any{"path": "link/secret.txt"}); r.Err == nil || r.Err.Class != kt.ClassPermission {
		t.Fatalf("read through a symlink out of a relative root: %+v", r)
	}
	if r := call(t, c, "write", map[string]any{"path": "link/pwned.txt", "content": "x"}); r.Err == nil || r.Err.Class != kt.ClassPermission {
		t.Fatalf("write through a symlink out of a relative root: %+v", r)
	}
	if r := call(t, c, "list", map[string]any{"dir": "link"}); r.Err == nil || r.Err.Class != kt.ClassPermission {
		t.Fatalf("list through a symlink out of a relative root: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(outside, "pwned.txt")); !os.IsNotExist(err) {
		t.Fatalf("a file was created outside the root: %v", err)
	}
	// The root stays where it was when the connector was made.
	t.Chdir(outside)
	if r := call(t, c, "write", map[string]any{"path": "in.txt", "content": "x"}); r.Err != nil {
		t.Fatalf("write after a chdir: %+v", r.Err)
	}
	if _, err := os.Stat(filepath.Join(rootDir, "in.txt")); err != nil {
		t.Fatalf("the write did not land in the root: %v", err)
	}
}

// Devices, FIFOs and links to them are refused at once, and no read is unbounded.
func TestNonRegularFilesAreRefused(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(root, "zero")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := New(root)
	for _, p := range []string{"fifo", "zero", "dir"} {
		done := make(chan connector.Result, 1)
		go func() { done <- call(t, c, "read", map[string]any{"path": p}) }()
		r := <-done // a FIFO open without O_NONBLOCK would hang here for ever
		if r.Err == nil || r.Err.Class != kt.ClassPermission {
			t.Errorf("read %s: want a permission error, got %+v", p, r)
		}
	}
	l := call(t, c, "list", map[string]any{})
	if l.Err != nil || len(l.Value.([]any)) != 0 {
		t.Fatalf("list shows non-regular files: %+v", l)
	}
	big := strings.Repeat("x", MaxFileBytes+1)
	if err := os.WriteFile(filepath.Join(root, "big"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := call(t, c, "read", map[string]any{"path": "big"}); r.Err == nil || !strings.Contains(r.Err.Message, "more than") {
		t.Fatalf("read of a file over the cap: %+v", r.Err)
	}
}

// Swapping a folder for a symlink while writes go on never lets a write out:
// the root handle resolves every component beneath the root, so there is no
// check-then-use window.
func TestSwappingAFolderForASymlinkNeverEscapes(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	outside := t.TempDir()
	c := New(root)
	stop := make(chan struct{})
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		d := filepath.Join(root, "d")
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = os.RemoveAll(d)
			_ = os.Mkdir(d, 0o755)
			_ = os.RemoveAll(d)
			_ = os.Symlink(outside, d)
		}
	}()
	for i := 0; i < 300; i++ {
		call(t, c, "write", map[string]any{"path": "d/x.txt", "content": "x"})
		call(t, c, "read", map[string]any{"path": "d/x.txt"})
	}
	close(stop)
	<-swapped
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("a write escaped the root during the swap: %v", entries)
	}
}
