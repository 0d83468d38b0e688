package engine

import (
	"encoding/json"
	"testing"
)

// TestAPrepareResultIsDecodedAgainWhenItsBytesChange: decodePrepared keeps
// the last decode of a run's PrepareResult, and must give it only for the
// same bytes — a run whose PrepareResult changed (a retry's new prepare)
// and bytes changed in place after the decode get a fresh decode.
func TestAPrepareResultIsDecodedAgainWhenItsBytesChange(t *testing.T) {
	x := &runExec{}
	topicOf := func(raw json.RawMessage) string {
		t.Helper()
		pr, err := x.decodePrepared(raw)
		if err != nil {
			t.Fatal(err)
		}
		if len(pr.Reservations) != 1 {
			t.Fatalf("%s decoded as %+v", raw, pr)
		}
		return pr.Reservations[0].Topic
	}
	a := json.RawMessage(`{"reservations":[{"topic":"a","ids":["1"]}]}`)
	if got := topicOf(a); got != "a" {
		t.Fatalf("first decode: topic %q, want a", got)
	}
	if got := topicOf(json.RawMessage(`{"reservations":[{"topic":"b","ids":["1"]}]}`)); got != "b" {
		t.Fatalf("other bytes: topic %q, want b (the earlier decode was given again)", got)
	}
	if got := topicOf(a); got != "a" {
		t.Fatalf("the first bytes again: topic %q, want a", got)
	}
	copy(a[len(`{"reservations":[{"topic":"`):], "c") // the same slice, changed in place
	if got := topicOf(a); got != "c" {
		t.Fatalf("bytes changed in place: topic %q, want c", got)
	}
	if _, err := x.decodePrepared(json.RawMessage(`[]`)); err == nil {
		t.Fatal("a PrepareResult that is not an object decoded without an error")
	}
	if got := topicOf(a); got != "c" {
		t.Fatalf("after a refused decode: topic %q, want c", got)
	}
}
