package ownfiles

import (
	"os"
	"syscall"
)

// procSuperMagic is procfs's f_type (linux/magic.h).
const procSuperMagic = 0x9fa0

// Process refuses a file of procfs: /proc/self/environ holds
// KEEP_SECRET_KEY and the model's API key, /proc/self/fd/N reopens keep's
// store; a files root of / (or one that holds /proc) reached them. f is
// the file as opened.
func Process(f *os.File) *Refusal {
	sc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var st syscall.Statfs_t
	var serr error
	if err := sc.Control(func(fd uintptr) { serr = syscall.Fstatfs(int(fd), &st) }); err != nil || serr != nil {
		return nil
	}
	if st.Type == procSuperMagic {
		return &Refusal{What: "a file of procfs, which holds keep's environment, memory and open files", Where: f.Name()}
	}
	return nil
}
