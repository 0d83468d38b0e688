package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// analyzed is a workflow whose mutate body is given.
func analyzed(mutate string) string {
	return `export default Keep.workflow({
  name: "reader",
  topics: { "a": {} },
  producers: { p: { publishes: ["a"], schedule: { interval: "5m" }, handler: async (ctx) => {
    const inputId = ctx.registerInput({ source: "files", type: "file", id: "1", title: "one" })
    await ctx.publish("a", { messageId: "1", inputId, payload: {} })
  } } },
  consumers: { c: Keep.consumer({ subscribe: ["a"],
    async prepare(ctx) { const [e] = await ctx.peek("a"); return { reservations: e ? [{ topic: "a", ids: [e.messageId] }] : [] } },
    async mutate(ctx, p) {
      ` + mutate + `
    },
  }) },
})
`
}

// keep validate refuses what the analysis cannot follow, on the line, with
// how to write it instead (issue 22 #4: a request by a built name, the old
// write left in a comment, passed both text checks).
func TestValidateRefusesWhatTheReadingCannotFollow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct{ name, mutate, want string }{
		{"built names", `// await ctx.files.write({ path: "x", content: "y" })
      await ctx["ht" + "tp"]["req" + "uest"]({ method: "POST", url: "https://example.org/", json: p })`,
			`.js:12: error: consumers.c.mutate: ctx["ht" + "tp"] reaches ctx by a computed name, which keep cannot follow: write the name, as in ctx.http.request({ ... })`},
		{"a name in a variable", `const m = "write"; await ctx.files[m]({ path: "x", content: "y" })`,
			`.js:11: error: consumers.c.mutate: ctx.files[m] reaches ctx by a computed name`},
		{"ctx in an object", `await Promise.resolve({ ctx }).then((o) => o.ctx.files.write({ path: "x", content: "y" }))`,
			`.js:11: error: consumers.c.mutate: ctx is put in an object, where keep can no longer see what is called on it: use ctx only as ctx.TOOL.METHOD(...)`},
		{"two writes", `await ctx.files.write({ path: "a", content: "1" })
      await ctx.files.write({ path: "b", content: "2" })`,
			`.js:12: error: consumers.c.mutate: consumers.c.mutate can write twice: ctx.files.write({path: "a", content: "1"}) (line 11) and then ctx.files.write({path: "b", content: "2"}) (line 12)`},
	}
	for _, c := range cases {
		f := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".js")
		os.WriteFile(f, []byte(analyzed(c.mutate)), 0o644)
		r := keep(t, "validate", f)
		if r.code != ExitInvalid || !strings.Contains(r.out, c.want) {
			t.Fatalf("%s: exit %d\n%s%s\nwant %q", c.name, r.code, r.out, r.err, c.want)
		}
	}
}

// What a workflow must be granted is what it calls however it reaches it,
// and nothing written in a comment or a string.
func TestGrantsFollowAliasesNotComments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := filepath.Join(dir, "wf.js")
	os.WriteFile(f, []byte(analyzed(`// await ctx.gmail.send({ to: "x" })
      const note = "ctx.slack.postMessage({})"
      const { files: { write } } = ctx
      await write({ path: "out/" + p.data, content: note })`)), 0o644)
	if r := keep(t, "validate", f); r.code != 0 {
		t.Fatalf("validate: %d %s %s", r.code, r.out, r.err)
	}
	r := keep(t, "deploy", "--data", filepath.Join(dir, "data"), f)
	if r.code != 0 || !strings.Contains(r.out, "not yet granted: files.write, source:files") {
		t.Fatalf("deploy: %d %s %s", r.code, r.out, r.err)
	}
	if strings.Contains(r.out, "gmail") || strings.Contains(r.out, "slack") {
		t.Fatalf("a comment or a string asked for a grant:\n%s", r.out)
	}
}
