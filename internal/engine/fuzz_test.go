package engine

import (
	"encoding/json"
	"testing"
)

func FuzzDecodePrepareResult(f *testing.F) {
	for _, s := range []string{
		`{"reservations":[{"topic":"a","ids":["1","2"]}],"data":{"x":1},"ui":{"title":"t"},"wakeAt":123}`,
		`{"reservations":[]}`, `{"reservations":null}`, `{"reservations":"a"}`, `{"reservations":[{"topic":1}]}`,
		`[]`, `null`, `42`, `{"wakeAt":"2026-01-01T00:00:00Z","selectionId":"s"}`, `{"reservations":[{"topic":"a","ids":[1]}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		pr, err := DecodePrepareResult(json.RawMessage(raw))
		if err != nil {
			return
		}
		for _, r := range pr.Reservations {
			if r.Topic == "" {
				t.Fatalf("accepted a reservation without a topic: %s", raw)
			}
		}
	})
}

// FuzzIdentity checks that identity hashing is stable under key order and
// distinct for distinct targets.
func FuzzIdentity(f *testing.F) {
	f.Add(`{"url":"http://x/a","method":"POST"}`, "sub", "in1")
	f.Add(`{"path":"out/a.txt"}`, "", "in2")
	f.Add(`{"a":{"b":[1,2,{"c":null}]},"z":true}`, "k", "")
	f.Fuzz(func(t *testing.T, identityJSON, subkey, input string) {
		var id map[string]any
		if json.Unmarshal([]byte(identityJSON), &id) != nil || id == nil {
			return
		}
		// The same object written with its keys in reverse order.
		var keys []string
		for k := range id {
			keys = append(keys, k)
		}
		reversed := "{"
		for i := len(keys) - 1; i >= 0; i-- {
			kb, _ := json.Marshal(keys[i])
			vb, _ := json.Marshal(id[keys[i]])
			reversed += string(kb) + ":" + string(vb)
			if i > 0 {
				reversed += ","
			}
		}
		reversed += "}"
		var id2 map[string]any
		if err := json.Unmarshal([]byte(reversed), &id2); err != nil {
			t.Fatalf("rebuild %s: %v", reversed, err)
		}
		a := Identity{Workflow: "wf", Handler: "c", Tool: "http", Method: "request", Params: id, Subkey: subkey}.ItemKey([]string{input, "other"}, 1)
		b := Identity{Workflow: "wf", Handler: "c", Tool: "http", Method: "request", Params: id2, Subkey: subkey}.ItemKey([]string{"other", input}, 1)
		if a != b {
			t.Fatalf("identity depends on key or input order: %s vs %s", identityJSON, reversed)
		}
		if canonical(id) != canonical(id2) {
			t.Fatalf("canonical JSON differs: %s vs %s", canonical(id), canonical(id2))
		}
		// A different target, attempt, subkey or item gives a different identity.
		changed := map[string]any{}
		for k, v := range id {
			changed[k] = v
		}
		changed["__target"] = "different"
		for name, other := range map[string]string{
			"target":  Identity{Workflow: "wf", Handler: "c", Tool: "http", Method: "request", Params: changed, Subkey: subkey}.ItemKey([]string{input, "other"}, 1),
			"attempt": Identity{Workflow: "wf", Handler: "c", Tool: "http", Method: "request", Params: id, Subkey: subkey}.ItemKey([]string{input, "other"}, 2),
			"subkey":  Identity{Workflow: "wf", Handler: "c", Tool: "http", Method: "request", Params: id, Subkey: subkey + "x"}.ItemKey([]string{input, "other"}, 1),
			"item":    Identity{Workflow: "wf", Handler: "c", Tool: "http", Method: "request", Params: id, Subkey: subkey}.ItemKey([]string{input + "x", "other"}, 1),
			"handler": Identity{Workflow: "wf", Handler: "d", Tool: "http", Method: "request", Params: id, Subkey: subkey}.ItemKey([]string{input, "other"}, 1),
		} {
			if other == a {
				t.Fatalf("a different %s gives the same identity", name)
			}
		}
	})
}

func TestCanonicalDistinguishesNesting(t *testing.T) {
	t.Parallel()
	pairs := [][2]string{
		{`{"a":"b"}`, `{"a":["b"]}`},
		{`{"a":{"b":1}}`, `{"a":[["b",1]]}`},
		{`{"a":1}`, `{"a":"1"}`},
		{`{"__sorted":[["a",1]]}`, `{"a":1}`},
	}
	for _, p := range pairs {
		var x, y any
		json.Unmarshal([]byte(p[0]), &x)
		json.Unmarshal([]byte(p[1]), &y)
		if canonical(x) == canonical(y) {
			t.Errorf("%s and %s have the same canonical form %s", p[0], p[1], canonical(x))
		}
	}
}
