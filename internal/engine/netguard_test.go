package engine_test

import (
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testsink"
)

// A script that writes to a loopback address keep.toml does not allow
// (here: another local service; in the attack of issue 23, keep serve's own
// API) sends nothing: the run waits for a person, with the keep.toml line
// that would allow it, and is not retried on its own.
func TestAWriteToAnUndeclaredLocalServiceIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := testsink.New() // not in keep.toml's allow
	defer other.Close()
	wf := e.deploy(strings.ReplaceAll(hookScript("", ""), "%SINK%", other.URL))
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusApproval || r.ErrorClass != kt.ClassPermission {
		t.Fatalf("run %s (%s), want paused:approval (permission): %s", r.Status, r.ErrorClass, r.ErrorMessage)
	}
	for _, want := range []string{"was not sent", "loopback", `[connectors.http] allow = ["` + other.Host() + `"]`} {
		if !strings.Contains(r.ErrorMessage, want) {
			t.Fatalf("the card's error does not say %q: %s", want, r.ErrorMessage)
		}
	}
	e.settle() // nothing retries it
	if got := e.open(wf); got.ID != r.ID || got.Status != kt.StatusApproval {
		t.Fatalf("after another pass: %s %s", got.ID, got.Status)
	}
	if other.Requests() != 0 {
		t.Fatalf("the undeclared service got %d requests", other.Requests())
	}
	// A try again without allowing it is refused again, and sends nothing.
	e.resolve(r.ID, kt.ResolveTryAgain)
	e.settle()
	if other.Requests() != 0 || e.open(wf).Status != kt.StatusApproval {
		t.Fatalf("after try again: %d requests, %s", other.Requests(), e.open(wf).Status)
	}
}

// Reads are refused the same way: a producer that asks the cloud metadata
// service for credentials gets nothing, and no packet leaves.
func TestAReadOfTheMetadataServiceIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wf := e.deploy(`export default Keep.workflow({ name: "meta", topics: { "t": {} },
  producers: { p: { publishes: ["t"], schedule: { interval: "1h" }, handler: async (ctx) => {
    await ctx.http.request({ url: "http://169.254.169.254/latest/meta-data/iam/security-credentials/" })
  } } } })`)
	e.settle()
	r := e.open(wf)
	if r.Status != kt.StatusApproval || !strings.Contains(r.ErrorMessage, "cloud-metadata") {
		t.Fatalf("run %s: %s", r.Status, r.ErrorMessage)
	}
}
