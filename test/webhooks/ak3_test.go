package webhooks

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
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

// A sender that did not hear the answer to a delivery keep held (a kill -9
// of keep serve between the hold's commit and its answer is that) sends
// it again: both are held, for the damage of the workflow's stored
// script; once it is restored the first is accepted, the second a
// duplicate, and the work is written once.
func TestADamagedWorkflowsDeliverySentTwiceIsTakenOnce(t *testing.T) {
	k, good := heldServedWithItsSecret(t)
	if out, err := k.keep("", "grant", "held", "--yes"); err != nil {
		t.Fatalf("keep grant: %v\n%s", err, out)
	}
	_ = k.cmd.Process.Signal(syscall.SIGKILL)
	_ = k.cmd.Wait()
	k.flipScript("held", "GITHUB_SECRET", "GITHUB_SECREU")
	k.serve()
	a := k.to("gh", "twice", good)
	k.wantHeld(a, "stored script is damaged")
	_ = k.cmd.Process.Signal(syscall.SIGKILL) // the sender did not hear it: it sends it again
	_ = k.cmd.Wait()
	k.serve()
	k.wantHeld(k.to("gh", "twice", good), "stored script is damaged")
	if n := len(k.held().Held); n != 2 {
		t.Fatalf("%d held, want both copies", n)
	}
	k.flipScript("held", "GITHUB_SECREU", "GITHUB_SECRET")
	testbin.WaitFor(t, "both copies to be taken", func() bool { return len(k.held().Held) == 0 }, k.logs)
	testbin.WaitFor(t, "its write", func() bool { return k.writesTo("/write/twice") >= 1 }, k.logs)
	time.Sleep(2 * time.Second)
	if n := k.writesTo("/write/twice"); n != 1 {
		t.Fatalf("written %d times", n)
	}
	got := map[string]int{}
	for _, d := range k.held().Deliveries {
		if d.Delivery == "d-twice" {
			got[d.Status]++
		}
	}
	if got["accepted"] != 1 || got["duplicate"] != 1 || len(got) != 2 {
		t.Fatalf("the two copies came to %v, want one accepted and one duplicate", got)
	}
}

// Deploys of a workflow one after another while signed deliveries arrive
// (some overtaken while their handler runs: held for the new version):
// every delivery is answered 200 or 202, and each is accepted once and
// written once at the sink — none lost, none doubled.
func TestADeployStormLosesAndDoublesNoDelivery(t *testing.T) {
	k, good := heldServedWithItsSecret(t)
	if out, err := k.keep("", "grant", "held", "--yes"); err != nil {
		t.Fatalf("keep grant: %v\n%s", err, out)
	}
	// Eight deploys, one after another; four senders post signed
	// deliveries until the last is done, each at most perSender of them:
	// every record must fit in one listing (keep webhooks --limit 1000),
	// and a loaded machine deploys slowly (1,310 deliveries once).
	const deploys, senders, perSender = 8, 4, 200
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= deploys; i++ {
			k.write("storm.js", k.heldSource(false)+fmt.Sprintf("\n// storm %d\n", i))
			if out, err := k.keep("", "deploy", k.path("storm.js")); err != nil {
				t.Errorf("keep deploy %d: %v\n%s", i, err, out)
			}
		}
	}()
	sent := make(chan []string, senders)
	var mu sync.Mutex
	told := map[string]string{}
	for s := 0; s < senders; s++ {
		go func(s int) {
			var mine []string
			for i := 0; ; i++ {
				select {
				case <-done:
					sent <- mine
					return
				default:
				}
				if i == perSender {
					<-done
					sent <- mine
					return
				}
				mine = append(mine, fmt.Sprintf("s%d-%d", s, i))
				a := k.to("gh", fmt.Sprintf("s%d-%d", s, i), good)
				mu.Lock()
				told[fmt.Sprintf("s%d-%d", s, i)] = fmt.Sprintf("%d %s", a.code, a.body)
				mu.Unlock()
				if a.err != nil || (a.code != http.StatusOK && a.code != http.StatusAccepted) {
					t.Errorf("a delivery during the storm got %d %s (%v)", a.code, a.body, a.err)
				}
			}
		}(s)
	}
	var ids []string
	for s := 0; s < senders; s++ {
		ids = append(ids, <-sent...)
	}
	t.Logf("%d deliveries during %d deploys", len(ids), deploys)
	testbin.WaitFor(t, "every delivery to be taken", func() bool { return len(k.held().Held) == 0 }, k.logs)
	for _, id := range ids {
		if !within(func() bool { return k.writesTo("/write/"+id) >= 1 }) {
			st, reason := k.held().statusOf("d-" + id)
			out, _ := k.keep("", "webhooks", "held", "--json", "--limit", "1000")
			t.Fatalf("delivery %s was never written: the sender was told %s; its record %s %q; keep webhooks held:\n%s", id, told[id], st, reason, out)
		}
	}
	time.Sleep(2 * time.Second)
	accepted := map[string]int{}
	for _, d := range k.held().Deliveries {
		if d.Status == "accepted" {
			accepted[d.Delivery]++
		}
	}
	for _, id := range ids {
		if w := k.writesTo("/write/" + id); w != 1 || accepted["d-"+id] != 1 {
			t.Errorf("delivery %s: written %d times, accepted %d times", id, w, accepted["d-"+id])
		}
	}
}
