//go:build !linux

package ownfiles

import "os"

// Process refuses a file of procfs (Linux only: other systems have none
// that holds keep's environment as a file).
func Process(f *os.File) *Refusal { return nil }
