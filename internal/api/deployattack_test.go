package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// activeVersion is the label of a workflow's active version, as the API shows it ("" when
// it is not deployed).
func (r *rig) activeVersion(wf string) string {
	r.t.Helper()
	code, obj, _ := r.call("GET", "/api/v1/workflows/"+wf, nil, nil)
	if code == http.StatusNotFound {
		return ""
	}
	if code != 200 {
		r.t.Fatalf("GET workflow %s: %d %v", wf, code, obj)
	}
	if st, ok := obj["status"].(map[string]any); ok {
		if v, ok := st["version"].(string); ok {
			return v
		}
	}
	r.t.Fatalf("GET workflow %s: no version in %v", wf, obj)
	return ""
}

// TestARefusedReprocessChoiceDeploysNothing (bad input: a clear error and
// stored state unchanged): a major deploy whose --reprocess names keys it
// cannot reprocess is refused, and no version was recorded.
func TestARefusedReprocessChoiceDeploysNothing(t *testing.T) {
	t.Parallel()
	t.Run("a new workflow, an unknown key", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, "")
		src := strings.ReplaceAll(ordersScript, "%SINK%", r.sink.URL)
		code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": src, "file": "orders.js", "kind": "major", "reprocess": "nosuch", "grant": true}, nil)
		if code < 400 || code >= 500 {
			t.Errorf("deploy with --reprocess of an unknown key answered %d %v, want a 4xx refusal", code, obj)
		}
		if v := r.activeVersion("orders"); v != "" {
			t.Errorf("the refused deploy (%d %v) left workflow orders deployed at version %s", code, obj, v)
		}
	})
	t.Run("a key named twice", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, "")
		r.deploy(ordersScript, "orders.js")
		r.postOrder("1", 1)
		r.settle()
		before := r.activeVersion("orders")
		src := strings.ReplaceAll(ordersScript, "%SINK%", r.sink.URL) + "\n// v2"
		code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": src, "file": "orders.js", "kind": "major", "reprocess": "api:order.placed:1,api:order.placed:1", "grant": true}, nil)
		after := r.activeVersion("orders")
		if code != 200 && after != before {
			t.Errorf("deploy answered %d %v, yet version %s replaced %s", code, obj, after, before)
		}
		if code == 200 && obj["reprocessed"] != float64(1) {
			t.Errorf("deploy answered %v: reprocessed %v, want 1 (one item named twice)", obj, obj["reprocessed"])
		}
		r.settle()
		// One write for the post, one for the one reprocess asked.
		if ws := r.sink.Writes(); code == 200 && len(ws) != 2 {
			t.Errorf("the sink saw %d writes, want 2 (the post's and one reprocess): %v", len(ws), ws)
		}
	})
}

// TestADeployNamedOutsideTheNameRulesIsRefused (bad input: a clear error,
// nothing stored): a name given with the deploy (keep deploy --name) is
// held to the rule a declared name is — letters, digits, '.', '_', '-' —
// else the workflow could not be named in the API's paths again.
func TestADeployNamedOutsideTheNameRulesIsRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	src := strings.ReplaceAll(ordersScript, "%SINK%", r.sink.URL)
	for _, name := range []string{"a/b", "two words", "caf\u00e9\u200b"} {
		code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": src, "file": "orders.js", "name": name, "grant": true}, nil)
		if code != http.StatusBadRequest && code != http.StatusUnprocessableEntity {
			t.Errorf("deploy named %q answered %d %v, want a refusal", name, code, obj)
		}
	}
	r.noWorkflows("after refused deploys")
}

// TestDeploysAtOnceNumberEachVersionOnce (no version silently lost): six
// versions of one workflow deployed at once, some minor and some major,
// each answered 200 is one version of its own number, one active, and the
// workflow's handlers as the active one declares.
func TestDeploysAtOnceNumberEachVersionOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	r.deploy(ordersScript, "orders.js")
	src := strings.ReplaceAll(ordersScript, "%SINK%", r.sink.URL)
	var wg sync.WaitGroup
	const n = 6
	codes, bodies, errs := make([]int, n), make([]string, n), make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := map[string]any{"script": src + fmt.Sprintf("\n// version %d", i), "file": "orders.js", "grant": true}
			if i%2 == 1 {
				body["kind"], body["reprocess"] = "major", "none"
			}
			codes[i], bodies[i], errs[i] = r.postRaw("/api/v1/workflows", body)
		}()
	}
	wg.Wait()
	labels := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if codes[i] != 200 {
			t.Errorf("deploy %d: %d %s", i, codes[i], bodies[i])
			continue
		}
		var rep struct{ Version string }
		_ = json.Unmarshal([]byte(bodies[i]), &rep)
		if labels[rep.Version] {
			t.Errorf("version %s answered twice", rep.Version)
		}
		labels[rep.Version] = true
	}
	_, _, vs := r.call("GET", "/api/v1/workflows/orders/versions", nil, nil)
	if len(vs) != len(labels)+1 {
		t.Errorf("%d versions stored, want %d (the first and each deploy answered 200): %v", len(vs), len(labels)+1, vs)
	}
	active := 0
	for _, v := range vs {
		if v.(map[string]any)["active"] == true {
			active++
		}
	}
	if active != 1 {
		t.Errorf("%d active versions: %v", active, vs)
	}
	r.postOrder("after", 9)
	r.settle()
	r.sinkSaw(1, "after the deploys")
}

// TestAScriptTheAnalysisRefusesDeploysNothing (bad input: a clear error
// naming the file and line, nothing stored).
func TestAScriptTheAnalysisRefusesDeploysNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	bad := `export default Keep.workflow({
  name: "bad",
  tasks: { t: Keep.task({ schedule: { interval: "1h" }, async run(ctx) {
    await ctx.nosuch.call()
  } }) },
})`
	code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": bad, "file": "bad.js"}, nil)
	msg := errorMessage(obj)
	if code < 400 || code >= 500 || !strings.Contains(msg, "bad.js") || !strings.Contains(msg, "4") {
		t.Errorf("a refused script answered %d %v, want a 4xx naming bad.js and its line 4", code, obj)
	}
	r.noWorkflows("after a refused deploy")
}

// noWorkflows fails the test if the API lists a workflow, when says after what.
func (r *rig) noWorkflows(when string) {
	r.t.Helper()
	if _, _, list := r.call("GET", "/api/v1/workflows", nil, nil); len(list) != 0 {
		r.t.Errorf("%s the API lists %v", when, list)
	}
}

// TestAWorkflowIsReachableByItsName (a clear error, or a workflow people
// can act on): a declared name the rule takes is one the API's paths can
// name again — pause answers for it.
func TestAWorkflowIsReachableByItsName(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	for _, name := range []string{".", ".."} {
		src := strings.Replace(strings.ReplaceAll(ordersScript, "%SINK%", r.sink.URL), `name: "orders"`, fmt.Sprintf("name: %q", name), 1)
		if code, _, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": src, "file": "orders.js", "grant": true}, nil); code != 200 {
			continue // refused: held
		}
		if code, obj, _ := r.call("POST", "/api/v1/workflows/"+name+"/pause", nil, nil); code != 200 {
			t.Errorf("workflow %q was deployed and its pause answers %d %v", name, code, obj)
		}
	}
}

// TestAMajorDeployWhoseItemIsBusyDeploysNothing (bad input: a clear
// error and stored state unchanged): --reprocess naming an item a run is
// processing right now is refused, and the refused deploy left no version.
func TestAMajorDeployWhoseItemIsBusyDeploysNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	root := inboxWith(t, "a")
	src := strings.ReplaceAll(itemWorkflow(`await ctx.http.request({ method: "POST", url: "%SINK%/write/" + id, json: { n: 1 } })`), "%SINK%", r.sink.URL)
	if code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": src, "file": "items.js", "grant": true, "filesRoot": root}, nil); code != 200 {
		t.Fatalf("deploy: %d %v", code, obj)
	}
	r.settle()
	// Attempt 2 of email:a, its run held inside its write.
	if code, obj, _ := r.call("POST", "/api/v1/items/email:a/reprocess", nil, nil); code != 200 {
		t.Fatalf("reprocess: %d %v", code, obj)
	}
	held, release := r.sink.HoldWrite()
	settled := make(chan error, 1)
	go func() { settled <- r.k.Scheduler.RunUntilIdle(t.Context()) }()
	<-held
	code, obj, _ := r.call("POST", "/api/v1/workflows", map[string]any{"script": src + "\n// v2", "file": "items.js", "kind": "major", "reprocess": "email:a", "grant": true, "filesRoot": root}, nil)
	release()
	if err := <-settled; err != nil {
		t.Fatal(err)
	}
	if v := r.activeVersion("items"); code != 200 && v != "1.0" {
		t.Errorf("the deploy answered %d %v, yet version %s is active", code, obj, v)
	}
}
