package engine

import (
	"encoding/json"
	"strings"
	"testing"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// The pieces of CompareUnseen that make inputs and judge targets (issue
// 39); what they add up to is tried through keep serve in test/maintainer.

func TestATargetsShapeTakesOutWhatVariesPerInput(t *testing.T) {
	ev := []kt.Event{{Payload: json.RawMessage(`{"id":"ab12","name":"ann"}`)}}
	for _, c := range []struct{ target, want string }{
		{"POST http://h:80/write/order-2", "POST http://h:80/write/order-*"},
		{"POST http://h:80/write/order-1003", "POST http://h:80/write/order-*"},
		{"POST http://h:80/attacker/order-2", "POST http://h:80/attacker/order-*"},
		{"POST http://h:80/u/ann/ab12?to=x&z=1", "POST http://h:80/u/*/*?to&z"},
		{"gmail.send", "gmail.send"},
	} {
		if got := targetShape(c.target, ev); got != c.want {
			t.Errorf("targetShape(%q) = %q, want %q", c.target, got, c.want)
		}
	}
}

func TestAMadeInputsMessageIdAgreesWithItsPayload(t *testing.T) {
	evs := []kt.Event{{Topic: "job", MessageID: "job-1", Attempt: 1, Payload: json.RawMessage(`{"id":"1","customer":"ann"}`)}}
	seen := maxSeen([][]kt.Event{evs, {{Payload: json.RawMessage(`{"id":"3"}`)}}})
	found := map[string]bool{}
	for _, v := range variantsOf(evs, seen, map[string]any{"note": "x"}) {
		for _, ev := range v.events {
			var p map[string]any
			json.Unmarshal(ev.Payload, &p)
			if id, _ := p["id"].(string); id != "1" && ev.MessageID != "job-"+id && !strings.HasPrefix(ev.MessageID, "job-"+id+"-") {
				t.Errorf("%s: messageId %s, id %s", v.name, ev.MessageID, id)
			}
			if p["id"] == "4" {
				found["past"] = true
			}
			if ev.Attempt > 1 {
				found["retried"] = true
			}
			if p["note"] == "x" {
				found["completed"] = true
			}
		}
		if strings.Contains(v.name, "among many") && len(v.events) < 10 {
			found["few"] = true
		}
	}
	if !found["past"] || !found["retried"] || !found["completed"] || found["few"] {
		t.Fatalf("variants: %v", found)
	}
	if got := replaceToken("job-1-10", "1", "4"); got != "job-4-10" {
		t.Fatalf("replaceToken: %s", got)
	}
}

func TestAReadIsMadeUnseenInsideTheJSONItHolds(t *testing.T) {
	raw := json.RawMessage(`{"content":"[{\"id\":\"1\",\"customer\":\"ann\"},{\"id\":\"2\"}]"}`)
	seen := readsSeen(json.RawMessage(`{"entries":[]}`))
	seen["content[].id"] = 3
	out := changeRead(raw, "past", seen)
	var r struct{ Content string }
	json.Unmarshal(out, &r)
	var jobs []map[string]any
	if err := json.Unmarshal([]byte(r.Content), &jobs); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if len(jobs) != 2 || jobs[0]["id"] != "4" || jobs[1]["id"] != "4" || jobs[1]["customer"] != "ann" {
		t.Fatalf("changed: %v (ids past any seen, the second completed with the first's customer)", jobs)
	}
}
