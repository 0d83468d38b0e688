package keeptype

import (
	"fmt"
	"testing"
)

// Issue 42 #4: the choices on a blocked run come safest first; on a write
// whose outcome is unknown, sending again is the riskiest, whatever order
// the engine offered them in.
func TestChoicesComeSafestFirst(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		offered   []string
		uncertain bool
		want      string
	}{
		{[]string{"try-again", "didnt-happen", "skip", "reprocess"}, true, "[{try-again none} {skip missing} {didnt-happen twice} {reprocess twice}]"},
		{[]string{"reprocess", "didnt-happen", "skip"}, true, "[{skip missing} {reprocess twice} {didnt-happen twice}]"},
		{[]string{"approve", "skip"}, false, "[{approve none} {skip missing}]"},
		{[]string{"reprocess", "try-again"}, false, "[{try-again none} {reprocess twice}]"},
	} {
		var got []string
		for _, ch := range Choices(c.offered, c.uncertain) {
			if ch.Says == "" || ch.Risk.Label() == "" {
				t.Errorf("%s says nothing of its risk", ch.Action)
			}
			got = append(got, fmt.Sprintf("{%s %s}", ch.Action, ch.Risk))
		}
		if s := fmt.Sprint(got); s != c.want {
			t.Errorf("Choices(%v, uncertain %v) = %s, want %s", c.offered, c.uncertain, s, c.want)
		}
	}
	if ChoiceOf(ResolveReprocess, true).Says == ChoiceOf(ResolveReprocess, false).Says {
		t.Error("Reprocess on an uncertain write does not say it sends a new write with a new key")
	}
}
