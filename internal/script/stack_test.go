package script

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// Issue 11 #16: the prelude's own frames are never shown as lines of the
// script: a throw inside withItem names the script's line only.
func TestPreludeFramesAreNotShownAsScriptLines(t *testing.T) {
	t.Parallel()
	p := compile(t, `export default Keep.workflow({ name: "t", tasks: { t: Keep.task({ schedule: { interval: "5m" }, async run(ctx, state) {
  await ctx.withItem("a", "A", async (ctx) => { null.x })
} }) } })`)
	defer p.Release()
	var stack string
	_, _ = p.Invoke(Invocation{Kind: kt.HandlerTask, Name: "t", Phase: "run", Args: []json.RawMessage{json.RawMessage(`null`)},
		Tools: map[string][]string{}, Limits: Limits{Timeout: time.Minute, MemoryLimit: 32 << 20},
		Host: func(m string, a json.RawMessage) (json.RawMessage, error) {
			if m == "item.fail" {
				var info struct{ Stack string }
				_ = json.Unmarshal(a, &info)
				stack = info.Stack
			}
			return json.RawMessage(`{"isDone":false}`), nil
		}})
	if !strings.Contains(stack, "<") {
		t.Fatalf("no raw stack from the script: %q", stack)
	}
	clean := p.CleanStack(stack)
	if clean != "at <anonymous> (wf.js:2)" {
		t.Fatalf("cleaned stack %q (raw %q): want only the script's own line", clean, stack)
	}
}
