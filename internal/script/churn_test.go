package script

import (
	"encoding/json"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// A script that allocates and frees a lot, but never holds much, is not
// out of memory.
func TestChurnIsNotOutOfMemory(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"strings":    `let n = 0; for (let i = 0; i < 300000; i++) { const s = "x".repeat(1000) + i; n += s.length } return { n }`,
		"objects":    `let n = 0; for (let i = 0; i < 300000; i++) { const o = { a: [i, i + 1, { b: "c" + i }] }; n += o.a.length } return { n }`,
		"microtasks": `let n = 0; for (let i = 0; i < 200000; i++) await Promise.resolve(i).then((v) => { n += 1 }); return { n }`,
		"json":       `let n = 0; const big = { list: Array.from({ length: 2000 }, (_, i) => ({ i, s: "v" + i })) }; for (let i = 0; i < 300; i++) n += JSON.parse(JSON.stringify(big)).list.length; return { n }`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := compile(t, isolationScript(body))
			defer p.Release()
			_, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
				Tools: map[string][]string{}, Limits: Limits{Timeout: 5 * time.Minute, MemoryLimit: 32 << 20},
				Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil }})
			if err != nil {
				t.Fatalf("%v", err)
			}
		})
	}
}
