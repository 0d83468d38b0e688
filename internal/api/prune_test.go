package api_test

import "testing"

// TestPruneNeedsProof: POST /api/v1/prune changes state, so a request
// without the instance secret or the token is refused (401) as every
// action is; with the secret it answers what it pruned, and a bad
// dryRun is a 400 naming it.
func TestPruneNeedsProof(t *testing.T) {
	t.Parallel()
	r := newRig(t, "")
	if code, obj, _ := r.call("POST", "/api/v1/prune", nil, map[string]string{"Authorization": ""}); code != 401 || errorCode(obj) != "unauthorized" {
		t.Fatalf("a prune without proof: %d %v", code, obj)
	}
	code, obj, _ := r.call("POST", "/api/v1/prune?dryRun=1", nil, nil)
	if code != 200 || obj["dryRun"] != true || obj["kinds"] == nil {
		t.Fatalf("a dry run with the secret: %d %v", code, obj)
	}
	if code, obj, _ := r.call("POST", "/api/v1/prune?dryRun=maybe", nil, nil); code != 400 || errorCode(obj) != "bad_request" {
		t.Fatalf("dryRun=maybe: %d %v", code, obj)
	}
}
