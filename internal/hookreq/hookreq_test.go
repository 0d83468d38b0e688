package hookreq

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
)

// Sign is Check's inverse: a request it signs passes, the same request
// with another body, under another secret or signed too long ago does not.
func TestSignPassesCheck(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, vf := range []script.Verify{
		{Kind: script.VerifyHMAC, Header: "X-Hub-Signature-256", Prefix: "sha256=", Secret: "gh"},
		{Kind: script.VerifyToken, Header: "Authorization", Prefix: "Bearer ", Secret: "tok"},
		{Kind: script.VerifyStripe, Secret: "st", Tolerance: 5 * time.Minute},
		{Kind: script.VerifySlack, Secret: "sl", Tolerance: 5 * time.Minute},
	} {
		wh := script.Webhook{Name: "w", Verify: vf}
		h := Hook{Body: []byte(`{"id":1}`)}
		if err := Sign(wh, "s3cret", &h, now); err != nil {
			t.Fatal(err)
		}
		if why := Check(vf, h, "s3cret", now); why != "" {
			t.Errorf("%s: signed, refused: %s", vf.Kind, why)
		}
		other := Hook{Body: []byte(`{"id":2}`)}
		if err := Sign(wh, "another", &other, now); err != nil {
			t.Fatal(err)
		}
		if why := Check(vf, other, "s3cret", now); why == "" {
			t.Errorf("%s: signed with another secret, passed", vf.Kind)
		}
		changed := h
		changed.Body = []byte(`{"id":3}`)
		if why := Check(vf, changed, "s3cret", now); why == "" && vf.Kind != script.VerifyToken {
			t.Errorf("%s: body changed after signing, passed", vf.Kind)
		}
		if vf.Tolerance > 0 {
			if why := Check(vf, h, "s3cret", now.Add(vf.Tolerance+time.Minute)); why == "" {
				t.Errorf("%s: signed %s ago (tolerance %s), passed", vf.Kind, vf.Tolerance+time.Minute, vf.Tolerance)
			}
		}
	}
	if why := Check(script.Verify{Kind: "rot13"}, Hook{}, "s", now); why == "" {
		t.Error("an unknown verify kind passed")
	}
}

// A dedupe json id is the id as sent: integers past 2^53 stay apart (as
// floats they were one), and a number written another way is the same id.
func TestDeliveryIDReadsJSONNumbersAsSent(t *testing.T) {
	dd := script.Dedupe{JSON: "data.id"}
	for body, want := range map[string]string{
		`{"data":{"id":9007199254740993}}`: "9007199254740993",
		`{"data":{"id":9007199254740992}}`: "9007199254740992",
		`{"data":{"id":-7}}`:               "-7",
		`{"data":{"id":1.0}}`:              "1",
		`{"data":{"id":1e3}}`:              "1000",
		`{"data":{"id":"ch_1"}}`:           "ch_1",
	} {
		got, err := DeliveryID(dd, Hook{Name: "w", Body: []byte(body)})
		if err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", body, got, err, want)
		}
	}
	for _, body := range []string{`{"data":{"id":1e999}}`, `{"data":{"id":1}} x`, `{"data":{"id":[1]}}`} {
		if got, err := DeliveryID(dd, Hook{Name: "w", Body: []byte(body)}); err == nil {
			t.Errorf("%s: id %q, want a refusal", body, got)
		}
	}
}

// A webhook's body reaches its handler parsed (req.json) only within the
// bound the event API holds a payload to (kt.MaxPayloadDepth): a handler
// that passes it on stays within what it may return. Deeper, req.json is
// null and the body is there as text.
func TestRequestParsesABodyOnlyWithinThePayloadBound(t *testing.T) {
	for _, c := range []struct {
		depth  int
		parsed bool
	}{{kt.MaxPayloadDepth, true}, {kt.MaxPayloadDepth + 1, false}} {
		body := strings.Repeat("[", c.depth) + strings.Repeat("]", c.depth)
		raw, err := Request(script.Webhook{Name: "w"}, Hook{Method: "POST", Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		var req struct {
			JSON json.RawMessage `json:"json"`
			Body string          `json:"body"`
		}
		if err := json.Unmarshal(raw, &req); err != nil {
			t.Fatal(err)
		}
		if got := string(req.JSON) != "null"; got != c.parsed || req.Body != body {
			t.Errorf("a body %d levels deep: req.json parsed %v, want %v (body kept: %v)", c.depth, got, c.parsed, req.Body == body)
		}
	}
}
