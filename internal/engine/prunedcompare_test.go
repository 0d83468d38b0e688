package engine

import (
	"testing"

	"github.com/keep-run/keep/internal/connector"
	khttp "github.com/keep-run/keep/internal/connector/http"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/netguard"
)

// TestAPrunedWriteIsASignificantChange (issue 44, attack): an applied
// write whose params the retention dropped, met again with another
// payload. docs/design.md says it is judged a significant change (a card,
// never passed silently); the method's comparePayload was asked with {}
// for the old payload instead, and http.request called a request that
// only changes its headers "minor" (replayed silently), since the old
// json and body it compared were gone. A pruned row is significant.
func TestAPrunedWriteIsASignificantChange(t *testing.T) {
	m := khttp.New(netguard.New(nil)).Methods["request"]
	headersOnly := map[string]any{"headers": map[string]any{"X-Kind": "other"}}
	applied := kt.Mutation{Status: kt.MutationApplied, Params: []byte(`{"method":"POST","url":"https://a.example/x","json":{"id":"a"}}`)}
	if got := comparePayloads(m, applied, headersOnly); got != connector.Significant {
		t.Fatalf("kept params, another json: %s, want significant", got)
	}
	applied.Params, applied.PrunedAt = []byte(`{}`), 1
	if got := comparePayloads(m, applied, headersOnly); got != connector.Significant {
		t.Fatalf("pruned params: %s, want significant (nothing to compare with)", got)
	}
}
