package keeptype

import (
	"bytes"
	"encoding/json"
)

// A read's answer is stored once in a run's trace (issue 44). An HTTP
// read answers its body twice: as the text the server sent (`body`) and
// parsed (`json`); a 53 KB feed cost 108 KB a poll. The trace keeps the
// body, and the parsed form is made again whenever the trace is read
// (TraceEntry.UnmarshalJSON), so every reader — a dry run, the
// Maintainer's replay, the trace view, a card — sees the answer exactly
// as the script saw it. The rule is lossless by construction:
// StoredOnce drops `json` only when WholeResult gives back the very bytes
// it was given, and keeps the answer whole otherwise.

// StoredOnce returns e with its result stored once: when the result is an
// object whose `json` is its string `body` parsed (null when the body is
// not JSON), `json` is left out and JSONOfBody set. Any other entry is
// returned as it is.
func (e TraceEntry) StoredOnce() TraceEntry {
	if e.JSONOfBody || len(e.Result) == 0 || e.Result[0] != '{' {
		return e
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(e.Result, &obj) != nil {
		return e
	}
	if _, ok := obj["json"]; !ok {
		return e
	}
	if _, ok := obj["body"]; !ok {
		return e
	}
	delete(obj, "json")
	compact, err := json.Marshal(obj)
	if err != nil {
		return e
	}
	c := e
	c.Result, c.JSONOfBody = compact, true
	if whole, ok := c.WholeResult(); !ok || !bytes.Equal(whole, e.Result) {
		return e
	}
	return c
}

// WholeResult is the result as the read answered it: for an entry stored
// once (JSONOfBody), its `json` made again from its `body`; ok is false
// when a stored-once result is not an object with a string body (changed
// outside keep).
func (e TraceEntry) WholeResult() (json.RawMessage, bool) {
	if !e.JSONOfBody {
		return e.Result, true
	}
	var obj map[string]any
	if json.Unmarshal(e.Result, &obj) != nil {
		return nil, false
	}
	body, ok := obj["body"].(string)
	if !ok {
		return nil, false
	}
	var parsed any
	if len(bytes.TrimSpace([]byte(body))) == 0 || json.Unmarshal([]byte(body), &parsed) != nil {
		parsed = nil
	}
	obj["json"] = parsed
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, false
	}
	return b, true
}

// traceEntryFields is TraceEntry without its methods: what is stored.
type traceEntryFields TraceEntry

// UnmarshalJSON reads an entry as stored and gives its result whole
// (WholeResult), so that no reader sees the stored-once form. A result
// that cannot be made whole is left out, as one past keep's bounds is: a
// dry run that makes that read stops there.
func (e *TraceEntry) UnmarshalJSON(b []byte) error {
	var f traceEntryFields
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*e = TraceEntry(f)
	if e.JSONOfBody {
		whole, ok := e.WholeResult()
		if !ok {
			whole = nil
		}
		e.Result, e.JSONOfBody = whole, false
	}
	return nil
}

// StoredTraceEntries decodes a trace's entries as stored, results left
// stored once: what the engine appends to and stores again.
func StoredTraceEntries(raw json.RawMessage) ([]TraceEntry, error) {
	var fs []traceEntryFields
	if err := json.Unmarshal(raw, &fs); err != nil {
		return nil, err
	}
	out := make([]TraceEntry, len(fs))
	for i, f := range fs {
		out[i] = TraceEntry(f)
	}
	return out, nil
}

// TraceEntries are a trace's entries as people and the Maintainer read
// them: decoded (UnmarshalJSON), every entry is whole — its result
// (TraceEntry.UnmarshalJSON) and its arguments (ArgsAsBefore: taken from
// the entry they were stored on once).
type TraceEntries []TraceEntry

// UnmarshalJSON decodes the entries and makes each whole.
func (es *TraceEntries) UnmarshalJSON(b []byte) error {
	var list []TraceEntry
	if err := json.Unmarshal(b, &list); err != nil {
		return err
	}
	last := map[string]any{}
	for i := range list {
		e := &list[i]
		switch {
		case e.ArgsAsBefore:
			e.Args, e.ArgsAsBefore = last[e.Method], false
		case e.Args != nil:
			last[e.Method] = e.Args
		}
	}
	*es = list
	return nil
}

// SameArgs says whether the arguments a and b are the same JSON.
func SameArgs(a, b any) bool {
	if a == nil || b == nil {
		return false
	}
	x, err := json.Marshal(a)
	if err != nil {
		return false
	}
	y, err := json.Marshal(b)
	return err == nil && bytes.Equal(x, y)
}
