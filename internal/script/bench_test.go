package script

import (
	"encoding/json"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// BenchmarkHandlerCall measures one handler invocation: a fresh VM with the
// memory limit, the prelude and the compiled script loaded, one host call,
// the result checked and returned. The script is compiled once, outside the loop.
func BenchmarkHandlerCall(b *testing.B) {
	p, err := Compile("wf.js", okScript)
	if err != nil {
		b.Fatal(err)
	}
	host := func(m string, a json.RawMessage) (json.RawMessage, error) {
		if m == "files.read" {
			return json.RawMessage(`{"content":"hello"}`), nil
		}
		return nil, nil
	}
	inv := Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`{"n":1}`)},
		Tools: map[string][]string{"files": {"read"}}, Host: host, Limits: Limits{Timeout: 5 * time.Second, MemoryLimit: 64 << 20}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.Invoke(inv); err != nil {
			b.Fatal(err)
		}
	}
}
