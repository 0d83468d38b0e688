// Package files is the no-credentials connector: a local folder. Reads list
// and read files; write is a mutation whose identity is the path and whose
// reconcile compares the content hash on disk.
//
// It may import keeptype and connector.
package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// MaxFileBytes bounds what read returns to a script.
const MaxFileBytes = 8 << 20

// New returns the files connector rooted at root.
func New(root string) *connector.Connector {
	f := &folder{root: root}
	return &connector.Connector{
		Name: "files",
		Sources: map[string][]string{
			"files": {"file"},
		},
		Methods: map[string]*connector.Method{
			"list": {Name: "list", Kind: connector.KindRead, Do: f.list},
			"read": {Name: "read", Kind: connector.KindReadByID, Do: f.read, Validate: needString("path")},
			"write": {Name: "write", Kind: connector.KindMutate, Identity: []string{"path"}, Do: f.write,
				Validate: func(a map[string]any) error {
					if err := needString("path")(a); err != nil {
						return err
					}
					if _, ok := a["content"].(string); !ok {
						return fmt.Errorf("files.write needs content as a string (use JSON.stringify for objects)")
					}
					return nil
				},
				Reconcile:      f.reconcileWrite,
				ComparePayload: compareContent,
				Target:         func(a map[string]any) string { return "file " + str(a["path"]) },
			},
		},
	}
}

type folder struct{ root string }

func str(v any) string { s, _ := v.(string); return s }

func needString(name string) func(map[string]any) error {
	return func(a map[string]any) error {
		if s, ok := a[name].(string); !ok || s == "" {
			return fmt.Errorf("missing %s: pass { %s: \"...\" }", name, name)
		}
		return nil
	}
}

// resolve maps a script path to a real path under the root; escaping the
// root (.., absolute paths, symlinks pointing out) is a permission error.
func (f *folder) resolve(p string) (string, *kt.Error) {
	if strings.ContainsRune(p, 0) {
		return "", kt.Errorf(kt.ClassLogic, "path %q contains a NUL byte", p)
	}
	rel := path.Clean(filepath.ToSlash(p))
	if filepath.IsAbs(p) || strings.HasPrefix(p, "/") || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", kt.Errorf(kt.ClassPermission, "path %q is outside the files root; use a path relative to the root, without ..", p)
	}
	clean := rel
	full := filepath.Join(f.root, filepath.FromSlash(clean))
	rootReal, err := filepath.EvalSymlinks(f.root)
	if err != nil {
		return "", kt.Errorf(kt.ClassPrecondition, "files root %s is not usable: %v", f.root, err)
	}
	// Follow symlinks of the longest existing prefix and check it stays inside.
	probe := full
	for {
		real, err := filepath.EvalSymlinks(probe)
		if err == nil {
			rel, _ := filepath.Rel(rootReal, real)
			if rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				return "", kt.Errorf(kt.ClassPermission, "path %q leads outside the files root (through a symbolic link)", p)
			}
			break
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			break
		}
		probe = parent
	}
	return full, nil
}

func ioError(op, p string, err error) *kt.Error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return kt.Errorf(kt.ClassPrecondition, "%s %s: no such file", op, p)
	case errors.Is(err, fs.ErrPermission):
		return kt.Errorf(kt.ClassPermission, "%s %s: permission denied", op, p)
	}
	return kt.Errorf(kt.ClassTransient, "%s %s: %v", op, p, err)
}

func (f *folder) list(_ context.Context, c connector.Call) connector.Result {
	dir := str(c.Args["dir"])
	if dir == "" {
		dir = "."
	}
	glob := str(c.Args["glob"])
	if glob == "" {
		glob = "*"
	}
	if _, err := path.Match(glob, "x"); err != nil {
		return connector.Result{Err: kt.Errorf(kt.ClassLogic, "files.list: bad glob %q: %v", glob, err)}
	}
	full, kerr := f.resolve(dir)
	if kerr != nil {
		return connector.Result{Err: kerr}
	}
	entries, err := os.ReadDir(full)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return connector.Result{Value: []any{}}
		}
		return connector.Result{Err: ioError("list", dir, err)}
	}
	out := []any{}
	names := []string{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if ok, _ := path.Match(glob, e.Name()); ok {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		info, err := os.Stat(filepath.Join(full, n))
		if err != nil {
			continue
		}
		rel := path.Join(path.Clean(filepath.ToSlash(dir)), n)
		out = append(out, map[string]any{"path": rel, "name": n, "size": info.Size(), "modTime": info.ModTime().UTC().Format("2006-01-02T15:04:05.000Z")})
	}
	return connector.Result{Value: out}
}

func hash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (f *folder) read(_ context.Context, c connector.Call) connector.Result {
	p := str(c.Args["path"])
	full, kerr := f.resolve(p)
	if kerr != nil {
		return connector.Result{Err: kerr}
	}
	info, err := os.Stat(full)
	if err != nil {
		return connector.Result{Err: ioError("read", p, err)}
	}
	if info.Size() > MaxFileBytes {
		return connector.Result{Err: kt.Errorf(kt.ClassLogic, "read %s: the file has %d bytes, more than the %d a script may read", p, info.Size(), MaxFileBytes)}
	}
	b, err := os.ReadFile(full)
	if err != nil {
		return connector.Result{Err: ioError("read", p, err)}
	}
	return connector.Result{Value: map[string]any{"path": p, "content": string(b), "sha256": hash(b)}}
}

// write replaces the file atomically (temp file, fsync, rename), so a crash
// leaves either the old or the new content, never half of it.
func (f *folder) write(_ context.Context, c connector.Call) connector.Result {
	p := str(c.Args["path"])
	full, kerr := f.resolve(p)
	if kerr != nil {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: kerr}
	}
	content := []byte(str(c.Args["content"]))
	fail := func(err error) connector.Result {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: ioError("write", p, err)}
	}
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return fail(err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(full), ".keep-write-*")
	if err != nil {
		return fail(err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), full); err != nil {
		return fail(err)
	}
	// After the rename the write has happened; an error syncing the directory
	// leaves the outcome uncertain (the rename may not survive a power cut).
	if d, err := os.Open(filepath.Dir(full)); err == nil {
		serr := d.Sync()
		d.Close()
		if serr != nil {
			return connector.Result{Outcome: connector.OutcomeUncertain, Err: kt.Errorf(kt.ClassIndeterminate, "write %s: sync of the folder failed: %v", p, serr)}
		}
	}
	return connector.Result{Outcome: connector.OutcomeApplied, Value: map[string]any{"path": p, "sha256": hash(content), "bytes": len(content)}}
}

func (f *folder) reconcileWrite(_ context.Context, c connector.Call) (connector.ReconcileStatus, any, error) {
	p := str(c.Args["path"])
	full, kerr := f.resolve(p)
	if kerr != nil {
		return connector.ReconcileFailed, nil, nil
	}
	want := []byte(str(c.Args["content"]))
	b, err := os.ReadFile(full)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return connector.ReconcileFailed, nil, nil
	case err != nil:
		return connector.ReconcileRetry, nil, err
	case hash(b) == hash(want):
		return connector.ReconcileApplied, map[string]any{"path": p, "sha256": hash(b), "bytes": len(b)}, nil
	}
	// Other content is there: someone else wrote it, or our write did not land yet.
	return connector.ReconcileRetry, nil, fmt.Errorf("%s holds other content than this write", p)
}

func compareContent(old, new map[string]any) connector.Comparison {
	a, b := str(old["content"]), str(new["content"])
	switch {
	case a == b:
		return connector.Equivalent
	case strings.Join(strings.Fields(a), " ") == strings.Join(strings.Fields(b), " "):
		return connector.Minor
	}
	return connector.Significant
}
