// Package files is the no-credentials connector: a local folder. Reads list
// and read files; write is a mutation whose identity is the path and whose
// reconcile compares the content hash on disk.
//
// Every path is opened beneath a directory handle of the root (os.Root, which
// uses openat2 with RESOLVE_BENEATH or walks the path itself), so there is no
// window between a check and its use in which a symlink could lead out of the
// root. Only regular files are read, and never more than MaxFileBytes.
//
// keep's own files — its data directory, the keep.toml it reads, its
// store — are refused whatever the root holds (package ownfiles judges
// what the opened file or folder is, so links of any kind lead nowhere):
// a script that names one fails as a logic error saying so (issue 38).
package files

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/keep-run/keep/internal/connector"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/ownfiles"
)

// MaxFileBytes bounds what read returns to a script.
const MaxFileBytes = 8 << 20

// New returns the files connector rooted at root. A relative root is made
// absolute now, so a later change of the working directory cannot move it.
func New(root string) *connector.Connector {
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	f := &folder{root: root}
	return &connector.Connector{
		Name: "files",
		Doc: "A local folder, no credentials: the script's folder (or `keep run`/`keep deploy --files-root DIR`), recorded when the workflow is deployed " +
			"and used by `keep run` and `keep serve` alike (`keep status` shows it; `keep serve --files-root DIR` roots every workflow at DIR instead). Paths are relative to it; absolute paths, `..` and symbolic links that lead out of it are refused. " +
			"keep's own files are refused whatever the root holds — its data directory (but its `files/` folder), every keep.toml keep reads, its store — " +
			"through any path, link or hard link: the run fails as a logic error saying so, and a listing leaves them out.",
		Sources: map[string][]string{
			"files": {"file"},
		},
		Methods: map[string]*connector.Method{
			"list": {Name: "list", Kind: connector.KindRead, Do: f.list, Doc: connector.MethodDoc{
				Summary: "Lists the regular files of a folder whose names match a glob, sorted by name (folders, devices and links out of the root are left out).",
				Params: []connector.Param{
					{Name: "dir", Type: "string", Doc: "the folder, relative to the root (default: the root)"},
					{Name: "glob", Type: "string", Doc: "a pattern for the file names, e.g. `*.json` (default `*`)"},
				},
				Result:   "an array of `{ path, name, size, modTime }` (`path` relative to the root, `modTime` an ISO time); `[]` when the folder does not exist.",
				ResultTS: "Array<{ path: string; name: string; size: number; modTime: string }>",
				Errors:   "a bad glob is a logic error; a folder keep may not read is a permission error; other I/O errors are transient (retried).",
			}},
			"read": {Name: "read", Kind: connector.KindReadByID, Do: f.read, Validate: needString("path"), Doc: connector.MethodDoc{
				Summary:  "Reads one file as text.",
				Params:   []connector.Param{{Name: "path", Type: "string", Required: true, Doc: "the file, relative to the root"}},
				Result:   "`{ path, content, sha256 }`.",
				ResultTS: "{ path: string; content: string; sha256: string }",
				Errors: fmt.Sprintf("a missing file is a precondition error (the run waits for a person); a file that is not a regular file, "+
					"or a path out of the root, a permission error; a file over %d MiB a logic error.", MaxFileBytes>>20),
			}},
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
				Doc: connector.MethodDoc{
					Summary: "Writes one file atomically (a temporary file, fsync, rename): a crash leaves the old content or the new, never half. Folders are created.",
					Params: []connector.Param{
						{Name: "path", Type: "string", Required: true, Doc: "the file, relative to the root"},
						{Name: "content", Type: "string", Required: true, Doc: "the whole new content (`JSON.stringify` objects)"},
					},
					Result:   "`{ path, sha256, bytes }`.",
					ResultTS: "{ path: string; sha256: string; bytes: number }",
					Reconcile: "reads the file: the same content (by SHA-256) means it happened; no file means it did not (believed only once a second check agrees after the settle time); " +
						"other content means keep cannot tell yet and checks again.",
					Errors: "a path out of the root is a permission error, a missing root folder a precondition error, other I/O errors transient; " +
						"a failed sync of the folder after the rename leaves the outcome unknown, which reconcile settles.",
				},
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

// clean turns a script path into a root-relative slash path; absolute paths
// and .. are refused here with a clear message (the root handle would refuse
// them too, less clearly).
func clean(p string) (string, *kt.Error) {
	if strings.ContainsRune(p, 0) {
		return "", kt.Errorf(kt.ClassLogic, "path %q contains a NUL byte", p)
	}
	rel := path.Clean(filepath.ToSlash(p))
	if filepath.IsAbs(p) || strings.HasPrefix(p, "/") || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", kt.Errorf(kt.ClassPermission, "path %q is outside the files root; use a path relative to the root, without ..", p)
	}
	return rel, nil
}

// open gives the root's directory handle; the caller closes it.
func (f *folder) open() (*os.Root, *kt.Error) {
	r, err := os.OpenRoot(f.root)
	if err != nil {
		return nil, kt.Errorf(kt.ClassPrecondition, "files root %s is not usable: %v", f.root, err)
	}
	return r, nil
}

// refused is the error for a path that is keep's own.
func refused(op, p string, r *ownfiles.Refusal) *kt.Error {
	return kt.Errorf(kt.ClassLogic, "files.%s %q refused: %v", op, p, r)
}

// escapes reports whether err is the root handle refusing a path that leads
// out of the root (through .. or a symbolic link).
func escapes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

func ioError(op, p string, err error) *kt.Error {
	switch {
	case escapes(err):
		return kt.Errorf(kt.ClassPermission, "%s %s: the path leads outside the files root (through a symbolic link)", op, p)
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
	rel, kerr := clean(dir)
	if kerr != nil {
		return connector.Result{Err: kerr}
	}
	root, kerr := f.open()
	if kerr != nil {
		return connector.Result{Err: kerr}
	}
	defer root.Close()
	d, err := root.Open(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return connector.Result{Value: []any{}}
		}
		return connector.Result{Err: ioError("list", dir, err)}
	}
	dinfo, err := d.Stat()
	if err != nil {
		d.Close()
		return connector.Result{Err: ioError("list", dir, err)}
	}
	if r := ownfiles.Dir(dinfo); r != nil {
		d.Close()
		return connector.Result{Err: refused("list", dir, r)}
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return connector.Result{Err: ioError("list", dir, err)}
	}
	out := []any{}
	names := []string{}
	for _, e := range entries {
		if ok, _ := path.Match(glob, e.Name()); ok && !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		p := path.Join(rel, n)
		// Stat through the root: a symlink that leads out of it, a device,
		// a FIFO or one of keep's own files is not listed (read would
		// refuse it).
		info, err := root.Stat(p)
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		if linfo, err := root.Lstat(p); err != nil || ownfiles.File(info, linfo) != nil || ownfiles.Entry(dinfo, n) != nil {
			continue
		}
		out = append(out, map[string]any{"path": p, "name": n, "size": info.Size(), "modTime": info.ModTime().UTC().Format("2006-01-02T15:04:05.000Z")})
	}
	return connector.Result{Value: out}
}

func hash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// readRegular reads a regular file beneath the root, at most MaxFileBytes.
// O_NONBLOCK keeps the open of a FIFO from hanging; the check of the opened
// file (not of the name) refuses devices, FIFOs and sockets.
func readRegular(root *os.Root, rel, shown string) ([]byte, *kt.Error) {
	fh, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, ioError("read", shown, err)
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil {
		return nil, ioError("read", shown, err)
	}
	if r := ownfiles.File(info); r != nil {
		return nil, refused("read", shown, r)
	}
	if r := ownfiles.Process(fh); r != nil {
		return nil, refused("read", shown, r)
	}
	if !info.Mode().IsRegular() {
		return nil, kt.Errorf(kt.ClassPermission, "read %s: it is not a regular file (%s); keep reads only regular files", shown, kind(info.Mode()))
	}
	if info.Size() > MaxFileBytes {
		return nil, kt.Errorf(kt.ClassLogic, "read %s: the file has %d bytes, more than the %d a script may read", shown, info.Size(), MaxFileBytes)
	}
	b, err := io.ReadAll(io.LimitReader(fh, MaxFileBytes+1))
	if err != nil {
		return nil, ioError("read", shown, err)
	}
	if len(b) > MaxFileBytes {
		return nil, kt.Errorf(kt.ClassLogic, "read %s: the file grew past the %d bytes a script may read", shown, MaxFileBytes)
	}
	return b, nil
}

func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

func (f *folder) read(_ context.Context, c connector.Call) connector.Result {
	p := str(c.Args["path"])
	rel, kerr := clean(p)
	if kerr != nil {
		return connector.Result{Err: kerr}
	}
	root, kerr := f.open()
	if kerr != nil {
		return connector.Result{Err: kerr}
	}
	defer root.Close()
	b, kerr := readRegular(root, rel, p)
	if kerr != nil {
		return connector.Result{Err: kerr}
	}
	return connector.Result{Value: map[string]any{"path": p, "content": string(b), "sha256": hash(b)}}
}

// write replaces the file atomically (temp file, fsync, rename), so a crash
// leaves either the old or the new content, never half of it. Every step goes
// through the root handle: a folder swapped for a symlink mid-way is refused.
func (f *folder) write(_ context.Context, c connector.Call) connector.Result {
	p := str(c.Args["path"])
	rel, kerr := clean(p)
	if kerr != nil {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: kerr}
	}
	if rel == "." {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: kt.Errorf(kt.ClassLogic, "write %q: name a file, not the root folder", p)}
	}
	root, kerr := f.open()
	if kerr != nil {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: kerr}
	}
	defer root.Close()
	content := []byte(str(c.Args["content"]))
	fail := func(err error) connector.Result {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: ioError("write", p, err)}
	}
	dir, base := path.Dir(rel), path.Base(rel)
	// keep's own folders are refused before anything is made in them: the
	// nearest folder of the path that exists is judged, and a folder made
	// beneath one that is not keep's is not keep's either.
	if r := ownAncestor(root, dir); r != nil {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: refused("write", p, r)}
	}
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	// Every later step is made in the folder as opened and judged here, by
	// names without a slash: a folder swapped for a link meanwhile changes
	// nothing of what was judged.
	folder, err := root.OpenRoot(dir)
	if err != nil {
		return fail(err)
	}
	defer folder.Close()
	if r := ownTarget(folder, base); r != nil {
		return connector.Result{Outcome: connector.OutcomeFailed, Err: refused("write", p, r)}
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmpName := ".keep-write-" + hex.EncodeToString(rnd[:])
	tmp, err := folder.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fail(err)
	}
	defer folder.Remove(tmpName)
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
	if err := folder.Rename(tmpName, base); err != nil {
		return fail(err)
	}
	// After the rename the write has happened; an error syncing the directory
	// leaves the outcome uncertain (the rename may not survive a power cut).
	if d, err := folder.Open("."); err == nil {
		serr := d.Sync()
		d.Close()
		if serr != nil {
			return connector.Result{Outcome: connector.OutcomeUncertain, Err: kt.Errorf(kt.ClassIndeterminate, "write %s: sync of the folder failed: %v", p, serr)}
		}
	}
	return connector.Result{Outcome: connector.OutcomeApplied, Value: map[string]any{"path": p, "sha256": hash(content), "bytes": len(content)}}
}

// ownAncestor judges the nearest folder of dir that exists (dir itself
// when it does): keep's is refused.
func ownAncestor(root *os.Root, dir string) *ownfiles.Refusal {
	for d := dir; ; d = path.Dir(d) {
		if fi, err := root.Stat(d); err == nil {
			if !fi.IsDir() {
				return nil // MkdirAll says what is wrong
			}
			return ownfiles.Dir(fi)
		}
		if d == "." {
			return nil
		}
	}
}

// ownTarget judges the file a write would replace in folder: the folder
// itself, the name there (a keep.toml keep reads, even one not made yet),
// and what the name is now (a link to one of keep's files, or a hard link:
// the same inode).
func ownTarget(folder *os.Root, base string) *ownfiles.Refusal {
	fi, err := folder.Stat(".")
	if err != nil {
		return nil // the rename fails and says why
	}
	if r := ownfiles.Written(fi, base); r != nil {
		return r
	}
	var now []fs.FileInfo
	if l, err := folder.Lstat(base); err == nil {
		now = append(now, l)
	}
	if s, err := folder.Stat(base); err == nil {
		now = append(now, s)
	}
	return ownfiles.File(now...)
}

func (f *folder) reconcileWrite(_ context.Context, c connector.Call) (connector.ReconcileStatus, any, error) {
	p := str(c.Args["path"])
	rel, kerr := clean(p)
	if kerr != nil {
		return connector.ReconcileFailed, nil, nil
	}
	root, kerr := f.open()
	if kerr != nil {
		return connector.ReconcileRetry, nil, kerr
	}
	defer root.Close()
	want := []byte(str(c.Args["content"]))
	b, rerr := readRegular(root, rel, p)
	switch {
	case rerr != nil && rerr.Class == kt.ClassPrecondition:
		return connector.ReconcileFailed, nil, nil
	case rerr != nil:
		return connector.ReconcileRetry, nil, rerr
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
