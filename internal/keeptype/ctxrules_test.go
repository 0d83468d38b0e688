package keeptype

import "testing"

func TestCtxRules(t *testing.T) {
	for _, p := range CtxPhases {
		if _, ok := ctxRules[p]; !ok {
			t.Errorf("phase %s has no row in ctxRules", p)
		}
	}
	for c, want := range map[CtxCall]string{
		CallRegisterInput: "a producer or a webhook's handler",
		CallPublish:       "a producer or a webhook's handler or next",
		CallEvents:        "prepare",
		CallWrite:         "mutate or withItem's handler",
		CallWithItem:      "a task's run",
	} {
		if got := CtxAllowedIn(c); got != want {
			t.Errorf("CtxAllowedIn(%s) = %q, want %q", c, got, want)
		}
	}
	if CtxAllows(CtxMutate, CallRead) || CtxAllows(CtxNext, CallReadByID) || CtxAllows(CtxTask, CallWrite) || !CtxAllows(CtxItem, CallWrite) {
		t.Fatal("the table lost a rule of SPEC §3")
	}
}
