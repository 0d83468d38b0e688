package webhooks

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/testbin"
)

// Attacks of the holds of issue 41 (branch ak3): through keep serve, its
// listener and a real sink.

// within polls cond for at most 10 s: false when it never held (a held
// delivery keep serve's pass of each second would have taken by then).
func within(cond func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// A delivery held unverified for its webhook's secret is taken once a
// version that verifies the webhook with another secret, which is set, is
// deployed: its reason is gone (the secret it waited for is no longer the
// one it needs), and it is verified with the new declaration's secret. It
// is not left held for a secret nothing uses any more.
func TestADeliveryHeldForASecretTheWebhookNoLongerUsesIsTaken(t *testing.T) {
	k := heldSetup(t)
	k.serve()
	good := secrets["GITHUB_SECRET"]
	k.wantHeld(k.to("gh", "renamed", good), "keep secret set GITHUB_SECRET")
	if out, err := k.keep(good, "secret", "set", "GH_RENAMED"); err != nil {
		t.Fatalf("keep secret set: %v\n%s", err, out)
	}
	k.write("wf2.js", strings.Replace(k.heldSource(false), `secret: "GITHUB_SECRET"`, `secret: "GH_RENAMED"`, 1))
	if out, err := k.keep("", "deploy", "--grant", k.path("wf2.js")); err != nil {
		t.Fatalf("keep deploy: %v\n%s", err, out)
	}
	if !within(func() bool { st, _ := k.held().statusOf("d-renamed"); return st == "accepted" }) {
		st, reason := k.held().statusOf("d-renamed")
		t.Fatalf("the delivery held for GITHUB_SECRET, which the deployed version no longer uses (it verifies with GH_RENAMED, set), was not taken: %s %q; held: %+v", st, reason, k.held().Held)
	}
	testbin.WaitFor(t, "its write", func() bool { return k.writesTo("/write/renamed") >= 1 }, k.logs)
	time.Sleep(2 * time.Second)
	if n := k.writesTo("/write/renamed"); n != 1 {
		t.Fatalf("written %d times", n)
	}
}

// A delivery held unverified whose webhook a redeploy verifies another
// way (a token in place of GitHub's HMAC, the same secret) is verified
// at its take with the declaration of the version that takes it: the
// unsigned-for-that-kind request is refused and recorded, never taken
// unverified.
func TestADeliveryHeldUnverifiedIsVerifiedWithTheKindDeployedSince(t *testing.T) {
	k := heldSetup(t)
	k.serve()
	good := secrets["GITHUB_SECRET"]
	// An unsigned sender: held unverified like any other.
	body := []byte(`{"id": "forged", "Verified": true}`)
	a := k.post("/hooks/held/gh", body, map[string]string{"X-GitHub-Delivery": "d-forged", "Verified": "true", "X-Hub-Signature-256": "sha256=00"})
	k.wantHeld(a, "keep secret set GITHUB_SECRET")
	k.write("wf2.js", strings.Replace(k.heldSource(false), `hmac: { header: "X-Hub-Signature-256", prefix: "sha256=", secret: "GITHUB_SECRET" }`, `token: { header: "Verified", secret: "GITHUB_SECRET" }`, 1))
	if out, err := k.keep("", "deploy", "--grant", k.path("wf2.js")); err != nil {
		t.Fatalf("keep deploy: %v\n%s", err, out)
	}
	if out, err := k.keep(good, "secret", "set", "GITHUB_SECRET"); err != nil {
		t.Fatalf("keep secret set: %v\n%s", err, out)
	}
	testbin.WaitFor(t, "the forged delivery to be judged", func() bool { st, _ := k.held().statusOf("d-forged"); return st == "refused" }, k.logs)
	if _, reason := k.held().statusOf("d-forged"); !strings.Contains(reason, "held, then verified once the secret was set") {
		t.Fatalf("refused, but not for its verification: %q", reason)
	}
	time.Sleep(2 * time.Second)
	if n := k.writesTo("/write/forged"); n != 0 {
		t.Fatalf("an unsigned delivery was written %d times", n)
	}
}

// Deliveries to a workflow whose stored script is damaged are bounded per
// workflow (keepHeld = 100, whatever webhook names they use); the one past
// the bound is answered 503 with Retry-After, says neither the damage nor
// a declared name, and is recorded refused. None of the answers names the
// damage or the secret.
func TestPastTheBoundADamagedWorkflowsSenderHearsAnError(t *testing.T) {
	k, good := heldServedWithItsSecret(t)
	_ = k.cmd.Process.Signal(syscall.SIGKILL)
	_ = k.cmd.Wait()
	k.flipScript("held", "GITHUB_SECRET", "GITHUB_SECREU")
	k.serve()
	for i := 0; i < 100; i++ {
		name := "gh"
		if i%2 == 1 {
			name = fmt.Sprint("made-up-", i) // anyone's to make up: the workflow's bound
		}
		body := []byte(fmt.Sprintf(`{"id": "b%d"}`, i))
		a := k.post("/hooks/held/"+name, body, map[string]string{"X-GitHub-Delivery": fmt.Sprint("d-b", i), "X-Hub-Signature-256": "sha256=" + hexMAC(good, string(body))})
		k.expect(a, http.StatusAccepted, `"status":"held"`)
		for _, leak := range []string{"damaged", "GITHUB_SECRE", "integrity", "hash"} {
			if strings.Contains(a.body, leak) {
				t.Fatalf("the sender of a delivery to a damaged workflow was told %q: %s", leak, a.body)
			}
		}
	}
	body := []byte(`{"id": "over"}`)
	req, _ := http.NewRequest(http.MethodPost, k.hooks+"/hooks/held/gh", strings.NewReader(string(body)))
	req.Header.Set("X-GitHub-Delivery", "d-over")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hexMAC(good, string(body)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("past the bound of a damaged workflow: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	v := k.held()
	if len(v.Held) != 100 {
		t.Fatalf("%d held, want 100", len(v.Held))
	}
	refused := false
	for _, d := range v.Deliveries {
		if d.Status == "refused" && strings.Contains(d.Reason, "keep holds 100 deliveries of workflow held while its stored script is damaged") {
			refused = true
		}
	}
	if !refused {
		t.Fatalf("the refusal past the bound is not recorded: %+v", v.Deliveries[:3])
	}
}

// A delivery held for a webhook no version declared yet, in a workflow
// whose stored script is then damaged, is held again for the damage
// (keep webhooks says so) rather than failing keep serve's take of that
// workflow at every pass (a warning each second, and a person's take of
// any other delivery of it never tried); it is taken as before once the
// damage is gone.
func TestADeliveryHeldForADeployInADamagedWorkflowIsHeldForTheDamage(t *testing.T) {
	k, _ := heldServedWithItsSecret(t)
	k.write("aaa.js", strings.Replace(k.heldSource(false), `name: "held"`, `name: "aaa"`, 1)+"\n// marker zzzz\n")
	if out, err := k.keep("", "deploy", "--grant", k.path("aaa.js")); err != nil {
		t.Fatalf("keep deploy aaa: %v\n%s", err, out)
	}
	k.wantHeldIn("aaa", k.post("/hooks/aaa/later", []byte(`{"id": "early"}`), map[string]string{"X-GitHub-Delivery": "d-early"}), "declares no webhook")
	_ = k.cmd.Process.Signal(syscall.SIGKILL)
	_ = k.cmd.Wait()
	k.flipScript("aaa", "zzzz", "zzzy")
	k.serve()
	if !within(func() bool {
		v := k.heldOf("aaa")
		return len(v.Held) == 1 && strings.HasPrefix(v.Held[0].HeldFor, "damaged:")
	}) {
		t.Fatalf("the delivery held for a deploy of a now damaged workflow is not held for the damage: %+v; keep said:\n%s", k.heldOf("aaa").Held, k.logs)
	}
	if strings.Contains(k.logs.String(), "take held webhook deliveries") {
		t.Fatalf("keep serve's take failed on the damaged workflow:\n%s", k.logs)
	}
	// Fixed by a version that declares it: taken once, verified.
	k.write("aaa2.js", strings.Replace(k.heldSource(true), `name: "held"`, `name: "aaa"`, 1))
	if out, err := k.keep("", "deploy", "--grant", k.path("aaa2.js")); err != nil {
		t.Fatalf("keep deploy aaa over the damage: %v\n%s", err, out)
	}
	// Unsigned (it was held before its webhook was declared): verified at its take, and refused.
	testbin.WaitFor(t, "the unsigned delivery to be verified at its take", func() bool {
		st, _ := k.heldOf("aaa").statusOf("d-early")
		return st == "refused"
	}, k.logs)
	if n := k.writesTo("/write/early"); n != 0 {
		t.Fatalf("an unsigned delivery was written %d times", n)
	}
}
