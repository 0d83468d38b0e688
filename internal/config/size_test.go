package config

import (
	"encoding/json"
	"testing"
)

// TestSizeRoundTripsThroughJSON: a workflow's policy is recorded as JSON
// (json.Marshal writes a Size as a number) and read back by the CLI when it
// carries a decision out; a number, a size string and junk are each read
// as they should be.
func TestSizeRoundTripsThroughJSON(t *testing.T) {
	b, err := json.Marshal(struct{ M Size }{64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var back struct{ M Size }
	if err := json.Unmarshal(b, &back); err != nil || back.M != 64<<20 {
		t.Fatalf("%s read back as %d, %v", b, back.M, err)
	}
	if err := json.Unmarshal([]byte(`{"M": "2MiB"}`), &back); err != nil || back.M != 2<<20 {
		t.Fatalf("\"2MiB\" read as %d, %v", back.M, err)
	}
	if err := json.Unmarshal([]byte(`{"M": true}`), &back); err == nil {
		t.Fatal("true read as a size")
	}
}
