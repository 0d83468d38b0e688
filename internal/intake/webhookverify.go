package intake

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keep-run/keep/internal/hookreq"
	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
)

// verifyHook checks a request against its webhook's verify, with the
// secret the declaration names: "" when it passes, else why it is refused
// and a sentence saying so (never the secret, never the signature
// expected). Comparisons take the same time whatever matches
// (hookreq.Check). An error is keep's own (the
// store), not the request's.
func (k *Webhooks) verifyHook(ctx context.Context, wh script.Webhook, h hookreq.Hook, now time.Time) (hookreq.Why, string, error) {
	vf := wh.Verify
	if !k.e.OpensSecrets() {
		return hookreq.WhyNoSecret, fmt.Sprintf("webhook %s is verified with the secret %s, and this keep opens no secrets; run keep serve", wh.Name, vf.Secret), nil
	}
	secret, err := k.e.OpenSecret(ctx, vf.Secret)
	if errors.Is(err, kt.ErrNotFound) {
		return hookreq.WhyNoSecret, fmt.Sprintf("webhook %s is verified with the secret %s, which keep does not have: set it with `keep secret set %s` (its value on standard input)", wh.Name, vf.Secret, vf.Secret), nil
	}
	if err != nil {
		return "", "", fmt.Errorf("open the secret %s of webhook %s: %w", vf.Secret, wh.Name, err)
	}
	why := hookreq.Check(vf, h, secret, now)
	if why == "" {
		return "", "", nil
	}
	return hookreq.WhyBadSig, fmt.Sprintf("%s verification failed: %s", vf.Kind, why), nil
}
