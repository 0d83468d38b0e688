package engine_test

import (
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/testotlp"
)

// Mutate run in prepare's invocation: its calls (a read by id, the write)
// are children of the run's mutate span, none of prepare's; a prepare
// whose selection is refused has no mutate span and mutate's read is not
// made.
func TestFusedMutatesCallsAreUnderTheMutateSpan(t *testing.T) {
	t.Parallel()
	for name, ret := range map[string]string{"served": okRet, "refused": strings.Replace(okRet, `topic: "job"`, `topic: "other"`, 1)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, col := tracedEnv(t, "")
			wf := e.deploy(fusedCase(ret, readWrite))
			e.settle()
			var consumerID string
			for _, r := range e.runs(wf) {
				if r.Handler == "c" {
					consumerID = r.ID
				}
			}
			spans := flushed(e, col)
			consumer, ok := runSpans(t, spans)[consumerID]
			if !ok {
				t.Fatalf("no span of the consumer run")
			}
			prep := phase(t, spans, consumer, "prepare")
			if got := names(testotlp.Children(spans, prep)); strings.Contains(strings.Join(got, ","), "http.request") {
				t.Errorf("prepare's children %v hold mutate's calls", got)
			}
			if name == "refused" {
				if m := testotlp.Named(testotlp.Children(spans, consumer), "mutate"); len(m) != 0 {
					t.Errorf("a refused prepare has a mutate span: %v", names(testotlp.Children(spans, consumer)))
				}
				if consumer.Attrs["keep.run.status"] != string(kt.StatusFailedLogic) {
					t.Errorf("run span status %q", consumer.Attrs["keep.run.status"])
				}
				return
			}
			mut := phase(t, spans, consumer, "mutate")
			got := names(testotlp.Children(spans, mut))
			if len(got) != 2 || got[0] != "call http.request" || got[1] != "call http.request" {
				t.Errorf("mutate's children %v, want its read and its write", got)
			}
			if consumer.Attrs["keep.run.status"] != string(kt.StatusCommitted) {
				t.Errorf("run span status %q", consumer.Attrs["keep.run.status"])
			}
		})
	}
}
