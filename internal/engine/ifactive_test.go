package engine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/keep-run/keep/internal/control"
	kt "github.com/keep-run/keep/internal/keeptype"
)

// TestARepairCheckedAgainstAnOvertakenVersionDeploysNothing (the
// Maintainer's path, control.DeployOptions.IfActive): a repair checked
// against version 1.0 is refused once 1.1 is active, saying so, and no
// version is added; checked against the active one, it deploys.
func TestARepairCheckedAgainstAnOvertakenVersionDeploysNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := `export default Keep.workflow({
  name: "rep",
  tasks: { t: Keep.task({ schedule: { interval: "1h" }, async run(ctx) {} }) },
})`
	v1, err := control.DeployAndGrant(e.ctx(), e.k.Engine, "wf.js", src, control.DeployOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v11, err := control.DeployAndGrant(e.ctx(), e.k.Engine, "wf.js", src+"\n// a person's fix", control.DeployOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = control.Deploy(e.ctx(), e.k.Engine, "wf.js", src+"\n// the repair", control.DeployOptions{Name: "rep", Kind: kt.DeployMinor, IfActive: v1.Version.ID, KeepTest: true})
	var ae *kt.ActionError
	if !errors.As(err, &ae) || ae.Code != kt.CodeNotApplicable || !strings.Contains(ae.Msg, "1.1") {
		t.Errorf("a repair of an overtaken version: %v, want a refusal naming 1.1", err)
	}
	if n, a := e.versionCount("rep"), e.activeVersion("rep"); n != 2 || a != "1.1" {
		t.Errorf("after the refused repair: %d versions, %s active; want 2, 1.1", n, a)
	}
	res, err := control.Deploy(e.ctx(), e.k.Engine, "wf.js", src+"\n// the repair", control.DeployOptions{Name: "rep", Kind: kt.DeployMinor, IfActive: v11.Version.ID, KeepTest: true})
	if err != nil || res.Version.Label() != "1.2" {
		t.Errorf("a repair of the active version: %v %s, want 1.2", err, res.Version.Label())
	}
}
