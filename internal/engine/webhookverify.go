package engine

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
)

// verifyHook checks a request against its webhook's verify, with the
// secret the declaration names: "" when it passes, else why it is refused
// and a sentence saying so (never the secret, never the signature
// expected). Comparisons take the same time whatever matches
// (hmac.Equal, subtle.ConstantTimeCompare). An error is keep's own (the
// store), not the request's.
func (e *Engine) verifyHook(ctx context.Context, wh script.Webhook, h Hook) (Why, string, error) {
	vf := wh.Verify
	if e.secret == nil {
		return WhyNoSecret, fmt.Sprintf("webhook %s is verified with the secret %s, and this keep opens no secrets; run keep serve", wh.Name, vf.Secret), nil
	}
	secret, err := e.secret(ctx, vf.Secret)
	if errors.Is(err, kt.ErrNotFound) {
		return WhyNoSecret, fmt.Sprintf("webhook %s is verified with the secret %s, which keep does not have: set it with `keep secret set %s` (its value on standard input); the sender's retries get through once it is set", wh.Name, vf.Secret, vf.Secret), nil
	}
	if err != nil {
		return "", "", fmt.Errorf("open the secret %s of webhook %s: %w", vf.Secret, wh.Name, err)
	}
	var why string
	switch vf.Kind {
	case script.VerifyHMAC:
		why = checkHMAC(h, vf, secret)
	case script.VerifyStripe:
		why = checkStripe(h, vf, secret, e.wallNow())
	case script.VerifySlack:
		why = checkSlack(h, vf, secret, e.wallNow())
	case script.VerifyToken:
		why = checkToken(h, vf, secret)
	default:
		why = fmt.Sprintf("verify kind %q is not one keep knows", vf.Kind)
	}
	if why == "" {
		return "", "", nil
	}
	return WhyBadSig, fmt.Sprintf("%s verification failed: %s", vf.Kind, why), nil
}

func macOf(secret string, parts ...string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// hexEqual compares a hex signature a sender sent with the one expected.
func hexEqual(sent string, want []byte) bool {
	got, err := hex.DecodeString(strings.TrimSpace(sent))
	return err == nil && hmac.Equal(got, want)
}

// checkHMAC: the header is prefix + hex(HMAC-SHA256(secret, body)) (GitHub's X-Hub-Signature-256).
func checkHMAC(h Hook, vf script.Verify, secret string) string {
	sig := h.Header.Get(vf.Header)
	switch {
	case sig == "":
		return "the request has no " + vf.Header + " header"
	case !strings.HasPrefix(sig, vf.Prefix):
		return fmt.Sprintf("the %s header does not start with %q", vf.Header, vf.Prefix)
	case !hexEqual(strings.TrimPrefix(sig, vf.Prefix), macOf(secret, string(h.Body))):
		return "the signature does not match the body (signed with another secret, or the body was changed on the way)"
	}
	return ""
}

// checkStripe: Stripe-Signature is t=TIMESTAMP,v1=SIG[,v1=SIG…] with SIG
// hex(HMAC-SHA256(secret, "TIMESTAMP.body")), the timestamp within the
// tolerance of keep's clock (a replayed old request is refused).
func checkStripe(h Hook, vf script.Verify, secret string, now time.Time) string {
	header := h.Header.Get("Stripe-Signature")
	if header == "" {
		return "the request has no Stripe-Signature header"
	}
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	if why := checkTimestamp("Stripe-Signature's t", ts, vf.Tolerance, now); why != "" {
		return why
	}
	if len(sigs) == 0 {
		return "the Stripe-Signature header has no v1 signature"
	}
	want := macOf(secret, ts, ".", string(h.Body))
	ok := false
	for _, s := range sigs {
		if hexEqual(s, want) {
			ok = true
		}
	}
	if !ok {
		return "no v1 signature matches the body (signed with another endpoint's secret, or the body was changed on the way)"
	}
	return ""
}

// checkSlack: X-Slack-Signature is v0=hex(HMAC-SHA256(secret,
// "v0:TIMESTAMP:body")) with X-Slack-Request-Timestamp's TIMESTAMP within
// the tolerance.
func checkSlack(h Hook, vf script.Verify, secret string, now time.Time) string {
	ts, sig := h.Header.Get("X-Slack-Request-Timestamp"), h.Header.Get("X-Slack-Signature")
	if why := checkTimestamp("X-Slack-Request-Timestamp", ts, vf.Tolerance, now); why != "" {
		return why
	}
	switch {
	case sig == "":
		return "the request has no X-Slack-Signature header"
	case !strings.HasPrefix(sig, "v0="):
		return "the X-Slack-Signature header does not start with \"v0=\""
	case !hexEqual(strings.TrimPrefix(sig, "v0="), macOf(secret, "v0:", ts, ":", string(h.Body))):
		return "the signature does not match the body (signed with another app's signing secret, or the body was changed on the way)"
	}
	return ""
}

// checkToken: the header is prefix + the secret itself (compared as
// hashes, so neither the length nor a prefix of the secret shows in the time taken).
func checkToken(h Hook, vf script.Verify, secret string) string {
	got := h.Header.Get(vf.Header)
	if got == "" {
		return "the request has no " + vf.Header + " header"
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(vf.Prefix+secret))
	if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		return "the " + vf.Header + " header does not carry the token"
	}
	return ""
}

// checkTimestamp refuses a signed timestamp (Unix seconds) that is missing
// or further from now than tol.
func checkTimestamp(what, ts string, tol time.Duration, now time.Time) string {
	if ts == "" {
		return "the request has no " + what
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return what + " is not a Unix time in seconds"
	}
	off := now.Sub(time.Unix(secs, 0))
	if off > tol || off < -tol {
		return fmt.Sprintf("%s is %s from keep's clock, more than the tolerance of %s (an old request sent again, or a clock that is off)", what, off.Round(time.Second).Abs(), tol)
	}
	return ""
}

// SignHook signs h as a sender that holds the secret would, in the format
// wh's verify declares (the inverse of verifyHook, beside it so the two
// cannot drift): keep test delivers a case's webhook requests so, and they
// pass the same verification as in production.
func SignHook(wh script.Webhook, secret string, h *Hook, now time.Time) error {
	if h.Header == nil {
		h.Header = http.Header{}
	}
	vf := wh.Verify
	ts := strconv.FormatInt(now.Unix(), 10)
	switch vf.Kind {
	case script.VerifyHMAC:
		h.Header.Set(vf.Header, vf.Prefix+hex.EncodeToString(macOf(secret, string(h.Body))))
	case script.VerifyToken:
		h.Header.Set(vf.Header, vf.Prefix+secret)
	case script.VerifyStripe:
		h.Header.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(macOf(secret, ts, ".", string(h.Body))))
	case script.VerifySlack:
		h.Header.Set("X-Slack-Request-Timestamp", ts)
		h.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(macOf(secret, "v0:", ts, ":", string(h.Body))))
	default:
		return fmt.Errorf("verify kind %q is not one keep knows", vf.Kind)
	}
	return nil
}
