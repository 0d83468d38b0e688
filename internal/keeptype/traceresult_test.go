package keeptype

import (
	"encoding/json"
	"strings"
	"testing"
)

// A read's answer stored once is given back byte for byte, and an answer
// the rule does not fit is stored whole (issue 44).
func TestAReadsAnswerIsStoredOnceAndReadWhole(t *testing.T) {
	marshal := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	cases := []struct {
		name   string
		result json.RawMessage
		once   bool
	}{
		{"a JSON body", marshal(map[string]any{"status": 200, "body": "{\"a\": [1, 2.5, \"x<y\"]}\n", "json": map[string]any{"a": []any{1, 2.5, "x<y"}}}), true},
		{"a body that is not JSON", marshal(map[string]any{"status": 200, "body": "<html>", "json": nil}), true},
		{"an empty body", marshal(map[string]any{"status": 204, "body": "", "json": nil}), true},
		{"json that is not the body parsed (a redacted key)", marshal(map[string]any{"body": `{"token":"s3cret"}`, "json": map[string]any{"token": "[redacted]"}}), false},
		{"no body", marshal(map[string]any{"json": map[string]any{"a": 1}}), false},
		{"not an object", json.RawMessage(`[1,2]`), false},
	}
	for _, c := range cases {
		e := TraceEntry{Kind: "call", Result: c.result}.StoredOnce()
		if e.JSONOfBody != c.once {
			t.Errorf("%s: stored once %v, want %v", c.name, e.JSONOfBody, c.once)
		}
		if c.once && strings.Contains(string(e.Result), `"json"`) {
			t.Errorf("%s: the stored result still has json: %s", c.name, e.Result)
		}
		stored, _ := json.Marshal(e)
		var read TraceEntry
		if err := json.Unmarshal(stored, &read); err != nil {
			t.Fatal(err)
		}
		if string(read.Result) != string(c.result) || read.JSONOfBody {
			t.Errorf("%s: read back %s, want %s", c.name, read.Result, c.result)
		}
	}
	// A stored-once result changed outside keep (its body no string) is
	// left out, never guessed.
	var read TraceEntry
	if err := json.Unmarshal([]byte(`{"kind":"call","result":{"body":1},"jsonOfBody":true}`), &read); err != nil || read.Result != nil {
		t.Fatalf("a damaged stored-once result was read as %s (%v)", read.Result, err)
	}
}

// A write's arguments stored once are filled in where an entry says they
// are as before.
func TestTraceEntriesFillArgumentsStoredOnce(t *testing.T) {
	var es TraceEntries
	raw := `[{"kind":"mutation","method":"http.request","args":{"url":"u"}},{"kind":"call","method":"files.read","args":{"path":"p"}},{"kind":"mutation","method":"http.request","argsAsBefore":true}]`
	if err := json.Unmarshal([]byte(raw), &es); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(es[2].Args); string(b) != `{"url":"u"}` || es[2].ArgsAsBefore {
		t.Fatalf("the third entry's arguments: %s", b)
	}
}
