package daemon

import "os"

// writeWhole writes data to path so that a reader sees either the old file
// or the whole new one, never an empty or half-written file: keep serve
// writes serve.addr while CLIs and tests beside it poll for it, and a
// reader that found it empty took the address for missing or malformed.
func writeWhole(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
