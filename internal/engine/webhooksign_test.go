package engine

import (
	"context"
	"testing"
	"time"

	"github.com/keep-run/keep/internal/script"
)

// SignHook is verifyHook's inverse: a request it signs passes, the same
// request with another body or under another secret does not.
func TestSignHookPassesVerification(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	e := &Engine{now: func() time.Time { return now }, secret: func(context.Context, string) (string, error) { return "s3cret", nil }}
	for _, vf := range []script.Verify{
		{Kind: script.VerifyHMAC, Header: "X-Hub-Signature-256", Prefix: "sha256=", Secret: "gh"},
		{Kind: script.VerifyToken, Header: "Authorization", Prefix: "Bearer ", Secret: "tok"},
		{Kind: script.VerifyStripe, Secret: "st", Tolerance: 5 * time.Minute},
		{Kind: script.VerifySlack, Secret: "sl", Tolerance: 5 * time.Minute},
	} {
		wh := script.Webhook{Name: "w", Verify: vf}
		h := Hook{Body: []byte(`{"id":1}`)}
		if err := SignHook(wh, "s3cret", &h, now); err != nil {
			t.Fatal(err)
		}
		if why, msg, err := e.verifyHook(context.Background(), wh, h, e.now()); err != nil || why != "" {
			t.Errorf("%s: signed, refused: %s %s %v", vf.Kind, why, msg, err)
		}
		other := Hook{Body: []byte(`{"id":2}`)}
		if err := SignHook(wh, "another", &other, now); err != nil {
			t.Fatal(err)
		}
		if why, _, _ := e.verifyHook(context.Background(), wh, other, e.now()); why != WhyBadSig {
			t.Errorf("%s: signed with another secret, answered %q", vf.Kind, why)
		}
	}
}
