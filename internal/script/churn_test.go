package script

import (
	"encoding/json"
	"strconv"
	"strings"
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

// A long but finite chain of promise jobs is a handler's right: QuickJS
// stops one drain of its job queue after 2^20 jobs to give the host a turn,
// and the invocation goes on draining (it failed with "quickjs: aborted
// draining after 1048576 pending jobs" before). Only the time limit ends a
// chain that never ends (testdata/hostile/cpu-loop-microtasks.js).
func TestAChainOfMoreThanOneDrainsJobsFinishes(t *testing.T) {
	t.Parallel()
	const awaits = 700000 // two jobs or more each: past the cap of one drain
	p := compile(t, isolationScript(`let n = 0; for (let i = 0; i < `+strconv.Itoa(awaits)+`; i++) await Promise.resolve(i).then(() => { n += 1 }); return { n }`))
	defer p.Release()
	out, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
		Tools: map[string][]string{}, Limits: Limits{Timeout: 5 * time.Minute, MemoryLimit: 32 << 20},
		Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil }})
	if err != nil {
		t.Fatalf("a chain of %d awaited promises: %v", awaits, err)
	}
	var got struct{ N int }
	if err := json.Unmarshal(out.Value, &got); err != nil || got.N != awaits {
		t.Fatalf("a chain of %d awaited promises returned %s (%v), want n = %d", awaits, out.Value, err, awaits)
	}
}

// Without a time limit nothing else would end a chain that never ends:
// the drain's cap does, with a message that says what the script did.
func TestAnEndlessChainWithoutATimeLimitEndsAtTheDrainsCap(t *testing.T) {
	t.Parallel()
	p := compile(t, isolationScript(`const spin = () => { Promise.resolve().then(spin) }; spin(); await new Promise(() => {})`))
	defer p.Release()
	_, err := p.Invoke(Invocation{Kind: kt.HandlerProducer, Name: "p", Phase: "handler", Args: []json.RawMessage{json.RawMessage(`null`)},
		Tools: map[string][]string{}, Limits: Limits{MemoryLimit: 32 << 20},
		Host: func(string, json.RawMessage) (json.RawMessage, error) { return nil, nil }})
	if err == nil || !strings.Contains(err.Error(), "never ran out") {
		t.Fatalf("an endless chain of promises without a time limit: %v, want the drain's cap named", err)
	}
}
