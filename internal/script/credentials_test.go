package script

import (
	"strings"
	"testing"
)

func TestCredentialsAreFoundInLiteralsOnly(t *testing.T) {
	src := "// a comment: Bearer not-a-literal-123456\n" + `const KEY = "sk-live-0123456789abcdef"
export default Keep.workflow({ name: "w", consumers: { c: Keep.consumer({ subscribe: ["t"],
  async mutate(ctx, p) {
    await ctx.http.request({ method: "POST", url: "https://user:hunter22@api.example/x?api_key=abc123456",
      headers: { "Authorization": "Bearer tok_9f8e7d6c5b4a", "X-Api-Key": KEY, token: ` + "`raw-${p.id}-tail`" + `, "X-Sig": "Bearer {secret:SIG}" },
      json: { title: "hello world", password: 'p4ssw0rd!' } })
  } }) } })`
	c := FindCredentials(src)
	masked := c.Placeholders(src)
	for _, leak := range []string{"sk-live-0123456789abcdef", "hunter22", "abc123456", "tok_9f8e7d6c5b4a", "p4ssw0rd!", "raw-"} {
		if strings.Contains(masked, leak) {
			t.Errorf("%q is still in what goes to the model:\n%s", leak, masked)
		}
	}
	for _, kept := range []string{"hello world", "Bearer {secret:SIG}", "Bearer not-a-literal-123456", "{keep-masked:"} {
		if !strings.Contains(masked, kept) {
			t.Errorf("%q is missing:\n%s", kept, masked)
		}
	}
	if back := c.Restore(masked); back != src {
		t.Fatalf("restored:\n%s\nwant:\n%s", back, src)
	}
	if h := c.Hide(src); strings.Contains(h, "tok_9f8e7d6c5b4a") || !strings.Contains(h, "[redacted]") {
		t.Fatalf("hidden:\n%s", h)
	}
}

// A webhook's verify names its secret (keep secret set NAME): the name is
// no credential, and keep validate says nothing of it; a secret property
// elsewhere still is one.
func TestAWebhookSecretsNameIsNoCredential(t *testing.T) {
	src := `export default Keep.workflow({ name: "w", topics: { a: {} },
  webhooks: { gh: { publishes: ["a"], verify: { hmac: { header: "X-Hub-Signature-256", prefix: "sha256=", secret: "GITHUB_WEBHOOK_SECRET" } }, handler: async () => {} } },
  consumers: { c: Keep.consumer({ subscribe: ["a"], async prepare() { return { reservations: [] } },
    async mutate(ctx) { await ctx.http.request({ method: "POST", url: "https://x.example", json: { secret: "s3cr3t-value-123" } }) } }) } })`
	masked := FindCredentials(src).Placeholders(src)
	if !strings.Contains(masked, `secret: "GITHUB_WEBHOOK_SECRET"`) || strings.Contains(masked, "s3cr3t-value-123") {
		t.Fatalf("masked:\n%s", masked)
	}
}
