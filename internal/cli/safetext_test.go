package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSafeTextEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	w := newSafeText(&b)
	in := "a\tb\n\x1b]0;pwned\x07\x1b[2J\rX\x7f é \u0085\u009b\u202e€"
	// cut inside é and inside €: a sequence split across writes stays whole
	for _, part := range []string{in[:18], in[18:27], in[27 : len(in)-1], in[len(in)-1:]} {
		w.Write([]byte(part))
	}
	w.Write([]byte{0x9b, '['}) // a lone 8-bit CSI
	w.Flush()
	want := `a` + "\t" + `b` + "\n" + `\x1b]0;pwned\x07\x1b[2J\x0dX\x7f é \u0085\u009b\u202e€\x9b[`
	if b.String() != want {
		t.Fatalf("got  %q\nwant %q", b.String(), want)
	}
}

// A title and an error carrying terminal escapes print as text in every
// command that shows them, and --json stays the same JSON.
func TestStoredTextCannotDriveTheTerminal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	src := `export default Keep.workflow({ name: "esc", topics: { "t": {} },
  producers: { p: { publishes: ["t"], schedule: { interval: "1h" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "system", type: "schedule", id: "a", title: "Job \u001b]0;pwned\u0007\u001b[2J\rX\u009b31m" })
    await ctx.publish("t", { messageId: "a", inputId, payload: {} })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["t"],
    async prepare(ctx) { const [e] = await ctx.peek("t"); if (!e) return { reservations: [] }; throw new Error("boom \u001b[31mred\r\u001b[1Ahidden") },
    async mutate(ctx) {} }) } })`
	if err := os.WriteFile(filepath.Join(dir, "wf.js"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	r := keep(t, "run", "--data", data, filepath.Join(dir, "wf.js"))
	all.WriteString(r.out + r.err)
	for _, args := range [][]string{{"status"}, {"inputs", "esc"}, {"runs", "esc"}} {
		r := keep(t, append(args, "--data", data)...)
		all.WriteString(r.out + r.err)
	}
	out := all.String()
	if strings.ContainsAny(out, "\x1b\r\x07") || strings.Contains(out, "\u009b") {
		t.Fatalf("a control character reached the terminal:\n%q", out)
	}
	if !strings.Contains(out, `\x1b[31mred\x0d`) || !strings.Contains(out, `Job \x1b]0;pwned\x07`) {
		t.Fatalf("the error is not shown escaped:\n%s", out)
	}
	j := keep(t, "inputs", "esc", "--data", data, "--json")
	var v any
	if err := json.Unmarshal([]byte(j.out), &v); err != nil || !strings.Contains(j.out, `\u001b]0;pwned`) {
		t.Fatalf("--json: %v\n%s", err, j.out)
	}
}
