// Package ownfiles knows keep's own files — its data directory (the store,
// secret.key, api.secret, the recorded keep.toml, the locks), every
// keep.toml keep reads, its store's files wherever --store puts them — and
// is the one rule that refuses them to scripts, whatever a files root
// holds or links to (issue 38: with the README's layout the data directory
// and keep.toml lay inside the files root, and a workflow granted
// files.read read secret.key and api.secret, one granted files.write
// rewrote keep.toml).
//
// The rule judges what a path resolves to, never where it lies: a file is
// keep's when its identity (device and inode) is one of keep's files' —
// so a symbolic link, a hard link, a bind mount or a folder linked into the
// data directory are all the same file — and a directory entry is keep's
// when it lies in the data directory or names one of keep's files in the
// directory that holds it (a keep.toml that does not exist yet is keep's
// too: keep reads it at its next start). The identities are read again at
// each check, so a file keep made since (keep.db-wal) is known at once.
//
// The data directory's files/ folder is not keep's: it is the files root
// of the workflows deployed without one (keep serve's default).
//
// daemon registers keep's files when it opens a data directory (Register);
// the files connector asks Dir, Entry and File, the sql connector Path.
//
// It imports nothing of keep.
package ownfiles

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// ScriptsFolder is the data directory's folder that belongs to scripts:
// the files root of workflows deployed without one.
const ScriptsFolder = "files"

// House is what one keep process owns.
type House struct {
	// DataDir is the data directory: all of it is keep's but ScriptsFolder.
	DataDir string
	// Store is the SQLite store's file when --store puts it elsewhere
	// ("" on PostgreSQL): it, its -wal, -shm, -journal and .seq are keep's.
	Store string
	// Configs are the keep.toml files keep reads (--config, the data
	// directory's recorded one, ./keep.toml), whether or not they exist.
	Configs []string
	// Named are the files keep.toml names that keep reads while it runs
	// ([connectors.email] ca_file: the CA keep trusts for mail). A script
	// that rewrote one would change what keep trusts (issue 38, attack).
	Named []string
	// Program is keep's own executable: keep starts its sandbox workers
	// from it by path, so a script that replaced it (the quick start puts
	// ./keep in the script's folder) broke every run, and a person starts
	// keep from it again.
	Program string
}

// id is a file's identity: its device and inode.
type id struct{ dev, ino uint64 }

func identity(fi fs.FileInfo) (id, bool) {
	if fi == nil {
		return id{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return id{}, false
	}
	return id{dev: uint64(st.Dev), ino: uint64(st.Ino)}, true
}

// house is a registered House: the data directory held open, so a data
// directory renamed while keep runs stays keep's.
type house struct {
	dataDir string
	dir     *os.Root
	files   []ownPath // keep's files by path, outside the data directory too
}

type ownPath struct {
	path string // absolute
	what string // "a config keep reads", …
}

var (
	mu     sync.Mutex
	houses = map[*house]bool{}
)

// Register makes h's files keep's for every check in this process until
// release is called. A data directory that cannot be opened is an error.
func Register(h House) (release func(), err error) {
	reg := &house{}
	if h.DataDir != "" {
		abs, err := filepath.Abs(h.DataDir)
		if err != nil {
			return nil, err
		}
		reg.dataDir = abs
		if reg.dir, err = os.OpenRoot(abs); err != nil {
			return nil, fmt.Errorf("open the data directory %s: %w", abs, err)
		}
	}
	for _, c := range h.Configs {
		if c == "" {
			continue
		}
		if abs, err := filepath.Abs(c); err == nil {
			reg.files = append(reg.files, ownPath{abs, "a config keep reads"})
		}
	}
	for _, f := range h.Named {
		if f == "" {
			continue
		}
		if abs, err := filepath.Abs(f); err == nil {
			reg.files = append(reg.files, ownPath{abs, "a file keep's config names, which keep reads"})
		}
	}
	if h.Program != "" {
		if abs, err := filepath.Abs(h.Program); err == nil {
			reg.files = append(reg.files, ownPath{abs, "keep's own program"})
		}
	}
	if h.Store != "" {
		if abs, err := filepath.Abs(h.Store); err == nil {
			for _, suffix := range []string{"", "-wal", "-shm", "-journal", ".seq"} {
				reg.files = append(reg.files, ownPath{abs + suffix, "a file of keep's store"})
			}
		}
	}
	mu.Lock()
	houses[reg] = true
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			delete(houses, reg)
			mu.Unlock()
			if reg.dir != nil {
				reg.dir.Close()
			}
		})
	}, nil
}

// Refusal says which of keep's files a path is.
type Refusal struct {
	What  string // "keep's data directory", "a config keep reads", …
	Where string // the file of keep's it is, absolute
}

// Error is why a script may not have it.
func (r *Refusal) Error() string {
	return fmt.Sprintf("%s is keep's own (%s): no grant lets a workflow read, list or write keep's data directory, the keep.toml it reads or its store, "+
		"whatever the files root holds and through whatever link; use another path", r.Where, r.What)
}

// known is keep's files as they are now: the identities of every file and
// folder of the data directories (their scripts' folders left out) and of
// the other files that exist, and where those lie.
type known struct {
	files map[id]*Refusal
	dirs  map[id]*Refusal
	// entries are keep's files by (folder, name), existing or not.
	entries map[entry]*Refusal
}

type entry struct {
	dir  id
	name string
}

func current() *known {
	k := &known{files: map[id]*Refusal{}, dirs: map[id]*Refusal{}, entries: map[entry]*Refusal{}}
	// The walk is made outside the lock: checks run side by side.
	mu.Lock()
	hs := make([]*house, 0, len(houses))
	for h := range houses {
		hs = append(hs, h)
	}
	mu.Unlock()
	for _, h := range hs {
		if h.dir != nil {
			k.walk(h.dir, ".", h.dataDir, 0)
		}
		for _, f := range h.files {
			r := &Refusal{What: f.what, Where: f.path}
			if fi, err := os.Stat(f.path); err == nil {
				if i, ok := identity(fi); ok {
					k.files[i] = r
				}
			}
			if fi, err := os.Lstat(f.path); err == nil {
				if i, ok := identity(fi); ok {
					k.files[i] = r
				}
			}
			if fi, err := os.Stat(filepath.Dir(f.path)); err == nil {
				if i, ok := identity(fi); ok {
					k.entries[entry{i, filepath.Base(f.path)}] = r
				}
			}
		}
	}
	return k
}

// maxDepth bounds the walk of a data directory: keep makes no folders in
// it but files/, which is not walked.
const maxDepth = 8

func (k *known) walk(root *os.Root, rel, shown string, depth int) {
	fi, err := root.Stat(rel)
	if err != nil {
		return
	}
	if i, ok := identity(fi); ok {
		k.dirs[i] = &Refusal{What: "keep's data directory", Where: shown}
	}
	d, err := root.Open(rel)
	if err != nil {
		return
	}
	entries, _ := d.ReadDir(-1)
	d.Close()
	for _, e := range entries {
		name := filepath.Join(rel, e.Name())
		where := filepath.Join(shown, e.Name())
		info, err := root.Lstat(name)
		if err != nil {
			continue
		}
		if info.IsDir() {
			if depth == 0 && e.Name() == ScriptsFolder {
				continue // the scripts' folder
			}
			if depth < maxDepth {
				k.walk(root, name, where, depth+1)
			}
			continue
		}
		r := &Refusal{What: "a file of keep's data directory", Where: where}
		if i, ok := identity(info); ok {
			k.files[i] = r
		}
		// A link in the data directory is keep's, and so is what it
		// points to (a keep.db kept on another disk).
		if info.Mode()&fs.ModeSymlink != 0 {
			if target, err := root.Stat(name); err == nil {
				if i, ok := identity(target); ok {
					k.files[i] = r
				}
			}
		}
	}
}

// Dir refuses a folder that is keep's: the data directory or one of its
// folders (its scripts' folder is not). fi is the folder as opened.
func Dir(fi fs.FileInfo) *Refusal {
	i, ok := identity(fi)
	if !ok {
		return nil
	}
	return current().dirs[i]
}

// File refuses a file that is keep's, by its identity: each fi is the
// file as opened (Stat) or as named (Lstat).
func File(fis ...fs.FileInfo) *Refusal {
	k := current()
	for _, fi := range fis {
		if i, ok := identity(fi); ok {
			if r := k.files[i]; r != nil {
				return r
			}
			if r := k.dirs[i]; r != nil {
				return r
			}
		}
	}
	return nil
}

// ConfigName is the config file keep reads in the folder it starts in.
const ConfigName = "keep.toml"

// Entry refuses the name in folder dir when it is, or would be, keep's:
// dir is keep's, or the name is one of keep's files there (a keep.toml
// keep reads that does not exist yet).
func Entry(dir fs.FileInfo, name string) *Refusal {
	i, ok := identity(dir)
	if !ok {
		return nil
	}
	k := current()
	if r := k.dirs[i]; r != nil {
		return r
	}
	return k.entries[entry{i, name}]
}

// Written is Entry for a file about to be written, and refuses keep.toml
// in any folder too: keep reads the keep.toml of whatever folder it is
// started in (the README's way: the script's folder), so one planted
// anywhere is a config keep may read at its next start. Reading or
// listing another folder's keep.toml is not refused: keep does not read
// it now.
func Written(dir fs.FileInfo, name string) *Refusal {
	if r := Entry(dir, name); r != nil {
		return r
	}
	if name == ConfigName {
		return &Refusal{What: "the config keep reads when it is started in that folder", Where: name}
	}
	return nil
}

// Path refuses a path that is keep's: the file it resolves to, or its
// name in the folder that holds it.
func Path(p string) *Refusal {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil
	}
	var fis []fs.FileInfo
	if fi, err := os.Stat(abs); err == nil {
		fis = append(fis, fi)
	}
	if fi, err := os.Lstat(abs); err == nil {
		fis = append(fis, fi)
	}
	if r := File(fis...); r != nil {
		return r
	}
	if dir, err := os.Stat(filepath.Dir(abs)); err == nil {
		return Entry(dir, filepath.Base(abs))
	}
	return nil
}

// Tighten makes the data directory keep's alone: the directory 0700 and
// the files keep keeps directly in it 0600 (made so, and tightened when an
// older keep or a person left them looser), and returns what it changed,
// for a warning. A folder with the sticky bit (a shared folder such as
// /tmp given as --data by mistake) is not changed: it is named instead.
func Tighten(dataDir string) (changed []string, err error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory %s: %w", dataDir, err)
	}
	fi, err := os.Stat(dataDir)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		return nil, err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if fi.Mode()&fs.ModeSticky != 0 {
			return []string{fmt.Sprintf("%s is a shared folder (mode %04o, sticky): others on this machine may see what keep keeps there; use a data directory of its own (--data)", dataDir, fi.Mode().Perm())}, nil
		}
		if err := os.Chmod(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("make the data directory %s private (chmod 700): %w", dataDir, err)
		}
		if len(entries) > 0 { // an empty folder made for keep held nothing to see
			changed = append(changed, fmt.Sprintf("%s %04o -> 0700", dataDir, perm))
		}
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue // folders (files/ is the scripts') and links are left as they are
		}
		p := filepath.Join(dataDir, e.Name())
		info, err := e.Info()
		if err != nil {
			continue
		}
		if perm := info.Mode().Perm(); perm&0o077 != 0 {
			if err := os.Chmod(p, perm&0o700); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return changed, fmt.Errorf("make %s private (chmod 600): %w", p, err)
			}
			changed = append(changed, fmt.Sprintf("%s %04o -> %04o", p, perm, perm&0o700))
		}
	}
	return changed, nil
}
