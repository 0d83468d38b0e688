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

// Issue 42 #4 on the item page and the topics page: the same table says
// what Reprocess, Skip and a topic's skip-pending risk, safest first.
func TestItemAndTopicChoicesSayTheirRisk(t *testing.T) {
	t.Parallel()
	for _, uncertain := range []bool{false, true} {
		var got []string
		for _, ch := range ItemChoices(uncertain) {
			got = append(got, fmt.Sprintf("{%s %s}", ch.Action, ch.Risk))
		}
		if s := fmt.Sprint(got); s != "[{skip missing} {reprocess twice}]" {
			t.Errorf("ItemChoices(%v) = %s, want skip before reprocess", uncertain, s)
		}
	}
	if ItemChoices(true)[1].Says == ItemChoices(false)[1].Says {
		t.Error("Reprocess of an item with an unconfirmed write does not say it may write twice")
	}
	if c := ChoiceIn(ScopeTopic, Resolution(ActSkipPending), false); c.Risk != RiskMissing || c.Says == "unknown choice" {
		t.Errorf("skip-pending = %+v, want a missing write's risk and its sentence", c)
	}
	if c := ChoiceIn(ScopeItem, "delete", false); c.Risk != RiskTwice || c.Action != "delete" {
		t.Errorf("an unknown action = %+v, want the most risk", c)
	}
}
