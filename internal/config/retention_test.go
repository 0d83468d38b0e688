package config

import (
	"strings"
	"testing"
)

// TestHostileRetentionIsRefusedNamingTheKey (issue 44, attack): every
// hostile [retention] value is refused with the file, the key and what
// is expected. interval = "1ns" was taken: keep serve then pruned without
// pause, each pass taking the writer and giving the disk back.
func TestHostileRetentionIsRefusedNamingTheKey(t *testing.T) {
	for text, says := range map[string]string{
		"days = -1":              "[retention] days: must be at least 0",
		"days = 99999999999":     "[retention] days: must be at most 36500",
		`days = "14"`:            "[retention] days: must be a number, not a string",
		"days = 1.5":             "[retention] days: must be a number, not a decimal number",
		`interval = "-5s"`:       "[retention] interval: must be a positive duration",
		`interval = "0s"`:        "[retention] interval: must be a positive duration",
		"interval = 5":           "[retention] interval: must be a positive duration",
		`interval = "1ns"`:       "[retention] interval: must be at least 1m",
		`interval = "59s"`:       "[retention] interval: must be at least 1m",
		"batch = 0":              "[retention] batch: must be at least 1",
		"batch = 100000":         "[retention] batch: must be at most 10000",
		"keep_done_runs = -1":    "[retention] keep_done_runs: must be at least 0",
		"keep_done_runs = 1e400": "keep.toml",
		"foo = 1":                "unknown key [retention] foo (known: days, keep_done_runs, interval, batch)",
	} {
		_, err := Parse("keep.toml", "[retention]\n"+text+"\n")
		if err == nil || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), "keep.toml") {
			t.Errorf("%s: %v, want an error saying %q", text, err, says)
		}
	}
	c, err := Parse("keep.toml", "[retention]\ninterval = \"1m\"\ndays = 0\n")
	if err != nil || c.Retention.Interval.Minutes() != 1 || c.Retention.Horizon() != 0 {
		t.Fatalf("the least interval and days = 0 (keep everything): %+v %v", c.Retention, err)
	}
}
