package webhooks

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/testbin"
)

// A new delivery whose handler a deploy overtakes (a version becomes
// active between its start and its commit) is held for the new version
// and answered 202, not 503: GitHub does not send it again. The held-taker
// takes it with the new version: accepted, written once at the sink.
func TestADeliveryOvertakenByADeployIsHeldAndTakenWithTheNewVersion(t *testing.T) {
	k := setup(t)
	k.serve()
	got := make(chan answer, 1)
	go func() {
		got <- k.post("/hooks/hooks/slow", []byte(`{"id":"over"}`), map[string]string{"X-Token": secrets["GITHUB_SECRET"]})
	}()
	select {
	case <-k.reading:
	case <-time.After(30 * time.Second):
		t.Fatalf("the handler did not run; keep said:\n%s", k.logs)
	}
	src, err := readFile(k.path("wf.js"))
	if err != nil {
		t.Fatal(err)
	}
	k.write("wf2.js", src+"\n// version 2\n")
	if out, err := k.keep("", "deploy", "--grant", k.path("wf2.js")); err != nil {
		t.Fatalf("keep deploy: %v\n%s", err, out)
	}
	k.unblock()
	// Held (the reason is the record's; the taker may have taken it already).
	k.expect(<-got, http.StatusAccepted, `"status":"held"`)
	testbin.WaitFor(t, "the overtaken delivery to be taken with the new version", func() bool {
		st, _ := k.heldOf("hooks").statusOf("over")
		return st == "accepted"
	}, k.logs)
	testbin.WaitFor(t, "its write", func() bool { return k.writes("slow.job") >= 1 }, k.logs)
	time.Sleep(2 * time.Second) // a second take would write by now
	if n := k.writes("slow.job"); n != 1 {
		t.Fatalf("the overtaken delivery was written %d times", n)
	}
	if v := k.heldOf("hooks"); len(v.Held) != 0 {
		t.Fatalf("still held: %+v", v.Held)
	}
	k.expect(k.post("/hooks/hooks/slow", []byte(`{"id":"over"}`), map[string]string{"X-Token": secrets["GITHUB_SECRET"]}), http.StatusOK, `"status":"duplicate"`)
}

// A delivery verified on receipt and held for the grant is not verified
// again when it is taken: its secret rotated meanwhile (GitHub's new
// secret signs only what it sends from then on), it is still taken,
// accepted and written once — not refused as "held unverified". So is one
// held unverified, verified once its secret was set, then held for the
// grant: it was verified at that take.
func TestADeliveryVerifiedOnReceiptIsNotVerifiedAgainAfterTheSecretRotates(t *testing.T) {
	k := heldSetup(t)
	k.serve()
	good := secrets["GITHUB_SECRET"]
	k.wantHeld(k.to("gh", "early", good), "keep secret set GITHUB_SECRET")
	if out, err := k.keep(good, "secret", "set", "GITHUB_SECRET"); err != nil {
		t.Fatalf("keep secret set: %v\n%s", err, out)
	}
	testbin.WaitFor(t, "the delivery held unverified to be verified and held for the grant", func() bool {
		v := k.held()
		return len(v.Held) == 1 && strings.HasPrefix(v.Held[0].HeldFor, "grant:source:http@")
	}, k.logs)
	k.wantHeld(k.to("gh", "rot", good), "source:http")
	if out, err := k.keep("rotated-secret-value", "secret", "set", "GITHUB_SECRET"); err != nil {
		t.Fatalf("keep secret set: %v\n%s", err, out)
	}
	if out, err := k.keep("", "grant", "held", "--yes"); err != nil {
		t.Fatalf("keep grant: %v\n%s", err, out)
	}
	testbin.WaitFor(t, "the held deliveries to be settled", func() bool { return len(k.held().Held) == 0 }, k.logs)
	for _, id := range []string{"early", "rot"} {
		if st, reason := k.held().statusOf("d-" + id); st != "accepted" {
			t.Fatalf("delivery %s, verified before its secret rotated, taken after: %s %q", id, st, reason)
		}
	}
	testbin.WaitFor(t, "their writes", func() bool { return k.writesTo("/write/rot") >= 1 && k.writesTo("/write/early") >= 1 }, k.logs)
	time.Sleep(2 * time.Second)
	for _, id := range []string{"early", "rot"} {
		if n := k.writesTo("/write/" + id); n != 1 {
			t.Errorf("delivery %s written %d times", id, n)
		}
	}
}

// A new delivery to a workflow whose stored script is damaged is held
// (202, its record saying the stored script is damaged), not answered 500
// with nothing recorded; it is taken once the damage is gone — the row
// restored beside keep, or the workflow deployed again, as the damage's
// message says — and written once.
func TestADeliveryToADamagedWorkflowIsHeldUntilTheDamageIsGone(t *testing.T) {
	for _, redeploy := range []bool{false, true} {
		name := "restored"
		if redeploy {
			name = "redeployed"
		}
		t.Run(name, func(t *testing.T) { heldWhileDamaged(t, redeploy) })
	}
}

func heldWhileDamaged(t *testing.T, redeploy bool) {
	k, good := heldServedWithItsSecret(t)
	k.write("aaa.js", strings.Replace(k.heldSource(false), `name: "held"`, `name: "aaa"`, 1)+"\n// marker zzzz\n")
	if out, err := k.keep("", "deploy", "--grant", k.path("aaa.js")); err != nil {
		t.Fatalf("keep deploy aaa: %v\n%s", err, out)
	}
	_ = k.cmd.Process.Signal(syscall.SIGKILL)
	_ = k.cmd.Wait()
	k.flipScript("aaa", "zzzz", "zzzy")
	k.serve()

	body := []byte(`{"id": "dmg"}`)
	a := k.post("/hooks/aaa/gh", body, map[string]string{"X-GitHub-Delivery": "d-dmg", "X-Hub-Signature-256": "sha256=" + hexMAC(good, string(body))})
	k.wantHeldIn("aaa", a, "stored script is damaged")
	v := k.heldOf("aaa")
	if len(v.Held) != 1 || !strings.HasPrefix(v.Held[0].HeldFor, "damaged:") || !strings.Contains(v.Held[0].Reason, "damaged") {
		t.Fatalf("keep webhooks aaa shows: %+v", v.Held)
	}
	time.Sleep(2 * time.Second) // not taken while the damage is there
	if v := k.heldOf("aaa"); len(v.Held) != 1 || k.writesTo("/write/dmg") != 0 {
		t.Fatalf("taken while damaged: held %+v, %d writes", v.Held, k.writesTo("/write/dmg"))
	}

	if redeploy {
		if out, err := k.keep("", "deploy", "--grant", k.path("aaa.js")); err != nil {
			t.Fatalf("keep deploy aaa over the damage: %v\n%s", err, out)
		}
	} else {
		k.flipScript("aaa", "zzzy", "zzzz")
	}
	testbin.WaitFor(t, "the held delivery to be taken once the damage is gone", func() bool {
		st, _ := k.heldOf("aaa").statusOf("d-dmg")
		return st == "accepted"
	}, k.logs)
	testbin.WaitFor(t, "its write", func() bool { return k.writesTo("/write/dmg") >= 1 }, k.logs)
	time.Sleep(2 * time.Second)
	if n := k.writesTo("/write/dmg"); n != 1 {
		t.Fatalf("written %d times", n)
	}
}
