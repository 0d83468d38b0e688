package files

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/ownfiles"
)

// TestKeepsOwnFilesAreRefusedWhateverLeadsToThem: with the data directory
// and keep.toml inside the files root (the README's layout), no path —
// direct, through a link to a file, a hard link, a link to the folder —
// reads, lists or writes keep's files; the data directory's files/ folder
// (the scripts') stays usable, and a listing leaves keep's files out.
func TestKeepsOwnFilesAreRefusedWhateverLeadsToThem(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "keep-data")
	must(t, os.MkdirAll(filepath.Join(data, ownfiles.ScriptsFolder), 0o700))
	for name, content := range map[string]string{"secret.key": "KEY", "api.secret": "API", "keep.db": "DB", "keep.toml": "[policy]\n"} {
		must(t, os.WriteFile(filepath.Join(data, name), []byte(content), 0o600))
	}
	must(t, os.WriteFile(filepath.Join(root, "keep.toml"), []byte("[policy]\n"), 0o644))
	must(t, os.Symlink("keep-data/secret.key", filepath.Join(root, "key-link")))
	must(t, os.Link(filepath.Join(data, "secret.key"), filepath.Join(root, "key-hard")))
	must(t, os.Link(filepath.Join(root, "keep.toml"), filepath.Join(root, "config-hard")))
	must(t, os.Symlink("keep-data", filepath.Join(root, "data-link")))
	must(t, os.Symlink("..", filepath.Join(data, ownfiles.ScriptsFolder, "up")))
	release, err := ownfiles.Register(ownfiles.House{DataDir: data, Configs: []string{filepath.Join(root, "keep.toml"), filepath.Join(data, "keep.toml"), filepath.Join(root, "sub", "keep.toml")}})
	must(t, err)
	defer release()
	c := New(root)
	own := func(what string, r connector.Result) {
		t.Helper()
		if r.Err == nil || r.Err.Class != kt.ClassLogic || !strings.Contains(r.Err.Message, "keep's own") {
			t.Errorf("%s: %+v (%v), want a logic error saying it is keep's own", what, r.Err, r.Value)
		}
	}
	for _, p := range []string{"keep-data/secret.key", "keep-data/api.secret", "keep-data/keep.db", "keep-data/keep.toml", "keep.toml",
		"key-link", "key-hard", "config-hard", "data-link/secret.key", "keep-data/files/up/secret.key"} {
		own("read "+p, call(t, c, "read", map[string]any{"path": p}))
	}
	for _, d := range []string{"keep-data", "data-link", "keep-data/files/up"} {
		own("list "+d, call(t, c, "list", map[string]any{"dir": d}))
	}
	for _, p := range []string{"keep.toml", "keep-data/keep.toml", "data-link/keep.toml", "keep-data/new.txt", "keep-data/sub/new.txt",
		"key-hard", "config-hard", "sub/keep.toml", "keep-data/keep.db-journal", "elsewhere/deeper/keep.toml"} {
		r := call(t, c, "write", map[string]any{"path": p, "content": "[notify]\n"})
		own("write "+p, r)
		if r.Outcome != connector.OutcomeFailed {
			t.Errorf("write %s: outcome %v", p, r.Outcome)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "keep.toml")); string(b) != "[policy]\n" {
		t.Fatalf("keep.toml was changed: %q", b)
	}
	for _, gone := range []string{"keep-data/new.txt", "keep-data/sub", "sub/keep.toml", "keep-data/keep.db-journal"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); err == nil {
			t.Errorf("%s was made", gone)
		}
	}
	// The root's listing leaves keep's files out; the scripts' folder is theirs.
	l := call(t, c, "list", map[string]any{})
	if l.Err != nil {
		t.Fatal(l.Err)
	}
	for _, it := range l.Value.([]any) {
		if n := it.(map[string]any)["name"]; n == "keep.toml" || n == "key-hard" || n == "key-link" || n == "config-hard" {
			t.Errorf("the listing shows %s", n)
		}
	}
	// Another folder's keep.toml may be read and listed (keep does not
	// read it now), not written (keep would, started there).
	must(t, os.MkdirAll(filepath.Join(root, "other"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "other", "keep.toml"), []byte("x"), 0o644))
	if r := call(t, c, "read", map[string]any{"path": "other/keep.toml"}); r.Err != nil {
		t.Errorf("read another folder's keep.toml: %v", r.Err)
	}
	if l := call(t, c, "list", map[string]any{"dir": "other"}); l.Err != nil || len(l.Value.([]any)) != 1 {
		t.Errorf("list another folder: %+v", l)
	}
	own("write another folder's keep.toml", call(t, c, "write", map[string]any{"path": "other/keep.toml", "content": "[notify]"}))
	if w := call(t, c, "write", map[string]any{"path": "keep-data/files/out.txt", "content": "ok"}); w.Err != nil {
		t.Fatalf("write into the scripts' folder: %v", w.Err)
	}
	if r := call(t, c, "read", map[string]any{"path": "keep-data/files/out.txt"}); r.Err != nil {
		t.Fatalf("read from the scripts' folder: %v", r.Err)
	}
	// The data directory moved while keep runs: it is still keep's (held
	// open), under its new name and through the old hard link.
	must(t, os.Rename(data, filepath.Join(root, "moved")))
	own("read after a move", call(t, c, "read", map[string]any{"path": "moved/secret.key"}))
	own("read a hard link after a move", call(t, c, "read", map[string]any{"path": "key-hard"}))
	own("list after a move", call(t, c, "list", map[string]any{"dir": "moved"}))
	// Released (keep closed the data directory): the same files are
	// ordinary files again.
	release()
	if r := call(t, c, "read", map[string]any{"path": "key-hard"}); r.Err != nil {
		t.Fatalf("after release: %v", r.Err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestProcfsIsKeepsOwn: with / as the files root, /proc/self/environ
// (KEEP_SECRET_KEY, the model's API key) and /proc/self/fd/N (keep's
// store, reopened) are keep's own.
func TestProcfsIsKeepsOwn(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("no procfs here: ", err)
	}
	f, err := os.CreateTemp(t.TempDir(), "held")
	must(t, err)
	defer f.Close()
	c := New("/")
	for _, p := range []string{"proc/self/environ", "proc/self/cmdline", "proc/thread-self/environ"} {
		r := call(t, c, "read", map[string]any{"path": p})
		if r.Err == nil || r.Err.Class != kt.ClassLogic || !strings.Contains(r.Err.Message, "procfs") {
			t.Errorf("read %s: %+v", p, r.Err)
		}
	}
	// The root's own handle refuses the magic link before keep looks.
	if r := call(t, c, "read", map[string]any{"path": "proc/self/fd/" + strconv.Itoa(int(f.Fd()))}); r.Err == nil {
		t.Errorf("read of an open file through /proc/self/fd: %v", r.Value)
	}
}
