package script

import (
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// webhookScript is a workflow of one webhook whose declaration is decl.
func webhookScript(decl string) string {
	return `export default Keep.workflow({
  name: "hooks",
  topics: { "push": {} },
  webhooks: {
    github: { publishes: ["push"], ` + decl + ` },
  },
  consumers: { c: Keep.consumer({ subscribe: ["push"], async prepare() { return { reservations: [] } } }) },
})`
}

const githubHook = `verify: { hmac: { header: "X-Hub-Signature-256", prefix: "sha256=", secret: "GITHUB_SECRET" } },
    dedupe: { header: "X-GitHub-Delivery" },
    handler: async (ctx, req) => {
      const id = ctx.registerInput({ source: "http", type: "webhook", id: req.headers["x-github-delivery"], title: "push " + req.json.after })
      await ctx.publish("push", { inputId: id, payload: req.json })
    }`

func TestAWebhookIsDeclaredAndRead(t *testing.T) {
	t.Parallel()
	p, err := Compile("wf.js", webhookScript(githubHook))
	if err != nil {
		t.Fatal(err)
	}
	if ps := Validate(p, known); kt.HasErrors(ps) {
		t.Fatalf("problems %v", ps)
	}
	w, problems, ok := p.Decl.Webhook("github")
	if !ok || len(problems) > 0 {
		t.Fatalf("webhook github: %v %v", ok, problems)
	}
	want := Verify{Kind: VerifyHMAC, Header: "X-Hub-Signature-256", Prefix: "sha256=", Secret: "GITHUB_SECRET", Tolerance: DefaultTolerance}
	if w.Verify != want || w.Dedupe != (Dedupe{Header: "X-GitHub-Delivery"}) || strings.Join(w.Publishes, ",") != "push" {
		t.Fatalf("webhook %+v", w)
	}
	an, err := p.Analysis()
	if err != nil || !contains(an.Handlers, "webhooks.github.handler") || len(an.Inputs) != 1 || an.Inputs[0].Source != "http" {
		t.Fatalf("analysis: %v handlers %v inputs %+v", err, an.Handlers, an.Inputs)
	}
	if _, _, ok := p.Decl.Webhook("gitlab"); ok {
		t.Fatal("a webhook the script does not declare was found")
	}
	p, err = Compile("wf.js", webhookScript(`verify: { stripe: { secret: "S", tolerance: 60 } }, dedupe: { json: "id" }, handler: async () => {}`))
	if err != nil {
		t.Fatal(err)
	}
	w, problems, _ = p.Decl.Webhook("github")
	if len(problems) > 0 || w.Verify.Kind != VerifyStripe || w.Verify.Tolerance != time.Minute || w.Dedupe.JSON != "id" {
		t.Fatalf("stripe webhook %+v %v", w, problems)
	}
}

// TestWebhookValidation: each mistake is an error naming the webhook and
// the field, and what to write.
func TestWebhookValidation(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, decl, want string }{
		{"no verify", `handler: async () => {}`, "webhooks.github: the webhook has no verify"},
		{"unknown kind", `verify: { hmac256: { secret: "S" } }, handler: async () => {}`, `webhooks.github: verify: keep knows no kind "hmac256"; the kinds are hmac, slack, stripe, token`},
		{"two kinds", `verify: { hmac: { header: "X", secret: "S" }, token: { header: "X", secret: "S" } }, handler: async () => {}`, "verify must be an object with exactly one kind"},
		{"missing header", `verify: { hmac: { secret: "S" } }, handler: async () => {}`, "webhooks.github: verify.hmac needs header, a string"},
		{"unknown field", `verify: { token: { header: "X-Token", secret: "S", secrte: "T" } }, handler: async () => {}`, `verify.token has no field "secrte" (its fields: header, prefix, secret)`},
		{"a value for a secret name", `verify: { slack: { secret: "xoxb 123 abc" } }, handler: async () => {}`, "verify.slack.secret names the secret (set with keep secret set NAME), not its value"},
		{"bad tolerance", `verify: { stripe: { secret: "S", tolerance: "5m" } }, handler: async () => {}`, "verify.stripe.tolerance is how many seconds"},
		{"bad dedupe", `verify: { token: { header: "X", secret: "S" } }, dedupe: { body: "id" }, handler: async () => {}`, "dedupe says where a delivery's id is"},
		{"no handler", `verify: { token: { header: "X", secret: "S" } }`, "webhooks.github: the webhook has no handler function"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ps := problems(t, webhookScript(c.decl))
			found := false
			for _, p := range ps {
				if p.Severity == "error" && strings.Contains(p.String(), c.want) {
					found = true
				}
			}
			if !found {
				t.Fatalf("want an error with %q, got %v", c.want, ps)
			}
		})
	}
	ps := problems(t, `export default Keep.workflow({ name: "x", topics: { a: {} }, webhooks: { hook: { verify: { token: { header: "X", secret: "S" } }, handler: async () => {} } }, consumers: { c: Keep.consumer({ subscribe: ["a"], async prepare() {} }) } })`)
	if !strings.Contains(joinProblems(ps), "webhooks.hook: the webhook must declare a non-empty publishes") || !strings.Contains(joinProblems(ps), `topic "a" has no writer`) {
		t.Fatalf("a webhook without publishes: %v", ps)
	}
	// Two writers of a topic: a webhook counts as one.
	ps = problems(t, `export default Keep.workflow({ name: "x", topics: { a: { from: "api" } }, webhooks: { hook: { publishes: ["a"], verify: { token: { header: "X", secret: "S" } }, handler: async () => {} } } })`)
	if !strings.Contains(joinProblems(ps), `has 2 writers (the event API (from: "api"), webhooks.hook)`) {
		t.Fatalf("two writers: %v", ps)
	}
}

func joinProblems(ps []kt.Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}

// A webhook's handler that writes would fail every delivery: keep
// validate says so at the call's line.
func TestAWebhookThatWritesIsRefused(t *testing.T) {
	t.Parallel()
	p, err := Compile("wf.js", webhookScript(`verify: { token: { header: "X", secret: "S" } },
    handler: async (ctx, req) => { await ctx.http.request({ method: "POST", url: "https://x.example/a", json: req.json }) }`))
	if err != nil {
		t.Fatal(err)
	}
	writes := func(tool, method string, args map[string]any) bool { return args["method"] == "POST" }
	ps := Check(p, Connectors{Tools: known, Writes: writes})
	want := "webhooks.github.handler writes (ctx.http.request("
	for _, pr := range ps {
		if pr.Severity == "error" && strings.Contains(pr.Message, want) && pr.Line == 6 {
			return
		}
	}
	t.Fatalf("want an error at line 6 with %q, got %v", want, ps)
}
