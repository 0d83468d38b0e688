package daemon

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/keep-run/keep/internal/config"
)

// ConfigFile is the data directory's copy of the config (keep.toml) its
// workflows run under: [policy], the hosts [connectors.http] allows, the
// databases, the mailbox, the custom connectors. keep deploy, keep run and
// keep serve record the config they are given; a decision carried out by
// the CLI (keep resolve, retry, run-now… with no keep serve running) runs
// under it, wherever the command was typed. It once ran under the
// keep.toml of the caller's folder: `keep resolve` from another folder
// re-sent a write with a 30 s tool timeout where the workflow runs with
// 1 s (issue 24 #5). 0600: it may name passwords (a database's URL).
const ConfigFile = "keep.toml"

// ConfigPath is the recorded config's file in dataDir.
func ConfigPath(dataDir string) string { return filepath.Join(dataDir, ConfigFile) }

// RecordedConfig returns the data directory's recorded config file, or ""
// when none was recorded (the workflows run under the built-in defaults).
func RecordedConfig(dataDir string) string {
	path := ConfigPath(dataDir)
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}

// RecordConfig makes the config file at path the data directory's: it is
// read first (a file with a mistake is refused, and the recorded one stays),
// then copied in. path "" records nothing.
func RecordConfig(dataDir, path string) error {
	if path == "" {
		return nil
	}
	dst := ConfigPath(dataDir)
	if same(path, dst) {
		return nil
	}
	if _, err := config.Load(path); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory %s: %w", dataDir, err)
	}
	if err := writeWhole(dst, b, 0o600); err != nil {
		return fmt.Errorf("record the config in %s: %w", dst, err)
	}
	return nil
}

func same(a, b string) bool {
	ia, err := os.Stat(a)
	if err != nil {
		return false
	}
	ib, err := os.Stat(b)
	if err != nil {
		return false
	}
	return os.SameFile(ia, ib)
}
