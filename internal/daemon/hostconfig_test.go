package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestARecordedConfigIsReplacedOnlyByAGoodOne: the data directory keeps
// the config its workflows run under; a file with a mistake is refused,
// naming it, and the recorded one stays.
func TestARecordedConfigIsReplacedOnlyByAGoodOne(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if got := RecordedConfig(data); got != "" {
		t.Fatalf("recorded before any: %q", got)
	}
	good := filepath.Join(dir, "good.toml")
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(good, []byte("[policy]\ntool_timeout = \"1s\"\n"), 0o644)
	os.WriteFile(bad, []byte("[policy]\ntool_timeout = \"soon\"\n"), 0o644)
	if err := RecordConfig(data, good); err != nil {
		t.Fatal(err)
	}
	path := RecordedConfig(data)
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("recorded %q: %v %v", path, info, err)
	}
	err := RecordConfig(data, bad)
	if err == nil || !strings.Contains(err.Error(), "bad.toml") || !strings.Contains(err.Error(), "tool_timeout") {
		t.Fatalf("a bad config: %v", err)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), `"1s"`) {
		t.Fatalf("the recorded config changed: %s", b)
	}
	// Recording the recorded file itself is a no-op.
	if err := RecordConfig(data, path); err != nil {
		t.Fatal(err)
	}
}
