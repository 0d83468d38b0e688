// Package hookreq is a webhook request as its listener received it (Hook)
// and what can be judged of it alone, with no state: its signature (Check,
// and Sign, its inverse, for keep test), its delivery id as the webhook's
// dedupe names it, the handler's req, Slack's URL challenge. The listener
// builds a Hook; the engine's delivery judges it (issue 41: the pure half
// of intake, below the engine, so the engine and intake share it).
package hookreq

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	kt "github.com/keep-run/keep/internal/keeptype"
	"github.com/keep-run/keep/internal/script"
)

// Hook is one request to a webhook (POST /hooks/{wf}/{name}) as its
// listener received it.
type Hook struct {
	Workflow, Name string
	Method         string
	Header         http.Header
	Query          url.Values
	Body           []byte
	// TooLarge: the body was over the workflow's webhook_max_body and was
	// not read (Body is empty); the delivery is refused.
	TooLarge bool
	// Verified: keep verified it with its webhook's secret (on receipt, or
	// at the take of a delivery held unverified). Stored with a held
	// delivery's request, so that its take does not verify it again: its
	// secret may have been rotated since, and the sender signs only what
	// it sends from then on. Set by intake, never from the request.
	Verified bool `json:",omitempty"`
}

// Why says, beside a delivery's status, what the sender is answered.
type Why string

const (
	WhyAccepted  Why = "accepted"  // committed: 2xx
	WhyDuplicate Why = "duplicate" // accepted before: 2xx, nothing changed
	WhyNotFound  Why = "not-found" // no such workflow or webhook: not recorded
	WhyTooLarge  Why = "too-large" // over webhook_max_body
	WhyBadSig    Why = "bad-sig"   // verification failed
	WhyNoSecret  Why = "no-secret" // keep lacks the secret to verify with: the sender retries once it is set
	WhyBadInput  Why = "bad-input" // verified, but without the delivery id dedupe names
	WhyFailed    Why = "failed"    // the handler failed: the sender retries
	WhyChallenge Why = "challenge" // Slack's URL verification, answered with its challenge (Reply): not recorded
	WhyHeld      Why = "held"      // kept for a reason of keep's own (kt.DeliveryHeld): 202, taken once it is gone
	WhyHeldFull  Why = "held-full" // would be held, but its webhook holds keep's bound already (intake's keepHeld), or the hold could not be written: the sender retries
)

// Delivered is what keep made of a delivery.
type Delivered struct {
	Status     kt.DeliveryStatus // "" when nothing was recorded (WhyNotFound)
	Why        Why
	DeliveryID string
	// Record is the id of the delivery's record (0 when none was made):
	// what a sender can quote to the workflow's owner (`keep webhooks WF`).
	Record int64
	Inputs int
	Events int
	// Message is the owner's text: why, in full (as the record says it).
	// The listener answers a sender with it only where it says nothing
	// the sender did not send (hooks).
	Message string
	// Reply, when set, is the body the sender must get instead of keep's
	// answer (WhyChallenge).
	Reply json.RawMessage
}

// Check checks h against vf with the secret it names: "" when it passes,
// else why not (never the secret, never the signature expected).
// Comparisons take the same time whatever matches (hmac.Equal,
// subtle.ConstantTimeCompare); a signed timestamp is judged against now.
func Check(vf script.Verify, h Hook, secret string, now time.Time) string {
	switch vf.Kind {
	case script.VerifyHMAC:
		return checkHMAC(h, vf, secret)
	case script.VerifyStripe:
		return checkStripe(h, vf, secret, now)
	case script.VerifySlack:
		return checkSlack(h, vf, secret, now)
	case script.VerifyToken:
		return checkToken(h, vf, secret)
	}
	return fmt.Sprintf("verify kind %q is not one keep knows", vf.Kind)
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

// Sign signs h as a sender that holds the secret would, in the format
// wh's verify declares (the inverse of Check, beside it so the two
// cannot drift): keep test delivers a case's webhook requests so, and they
// pass the same verification as in production.
func Sign(wh script.Webhook, secret string, h *Hook, now time.Time) error {
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

// DeliveryID is a delivery's id as its webhook's dedupe says: a header, a
// dotted path into the JSON body, or the body's hash. An id too long to
// store is its hash.
func DeliveryID(dd script.Dedupe, h Hook) (string, error) {
	var id string
	switch {
	case dd.Header != "":
		id = strings.TrimSpace(h.Header.Get(dd.Header))
		if id == "" {
			return "", fmt.Errorf("the request has no %s header, which webhook %s's dedupe names as its delivery id", dd.Header, h.Name)
		}
	case dd.JSON != "":
		// Numbers are read as written: a 64-bit id past 2^53 read as a
		// float would be its neighbour's id, and its delivery a duplicate.
		var v any
		dec := json.NewDecoder(strings.NewReader(string(h.Body)))
		dec.UseNumber()
		if !json.Valid(h.Body) || dec.Decode(&v) != nil {
			return "", fmt.Errorf("the body is not JSON, so it has no %q, which webhook %s's dedupe names as its delivery id", dd.JSON, h.Name)
		}
		for _, k := range strings.Split(dd.JSON, ".") {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		switch x := v.(type) {
		case string:
			id = x
		case json.Number:
			id = x.String() // an integer as sent
			if strings.ContainsAny(id, ".eE") {
				f, err := x.Float64() // as before: 1.0 and 1e0 are the id 1
				if id = ""; err == nil {
					id = strconv.FormatFloat(f, 'f', -1, 64)
				}
			}
		}
		if strings.TrimSpace(id) == "" {
			return "", fmt.Errorf("the JSON body has no %q (a string or a number), which webhook %s's dedupe names as its delivery id", dd.JSON, h.Name)
		}
	default:
		sum := sha256.Sum256(h.Body)
		return "sha256:" + hex.EncodeToString(sum[:]), nil
	}
	if len(id) > kt.MaxIDChars || !utf8.ValidString(id) {
		sum := sha256.Sum256([]byte(id))
		return "sha256:" + hex.EncodeToString(sum[:]), nil
	}
	return id, nil
}

// Request is the handler's req: method, headers (lower-case names, the
// values of a repeated header joined by ", "), query (the first value of
// each name), json (the body parsed, or null: not JSON, or nested deeper
// than kt.MaxPayloadDepth, as the event API refuses a payload) and body
// (its text). A token webhook's token
// header is left out: it is the secret itself.
func Request(wh script.Webhook, h Hook) (json.RawMessage, error) {
	headers := map[string]string{}
	for k, vs := range h.Header {
		if wh.Verify.Kind == script.VerifyToken && strings.EqualFold(k, wh.Verify.Header) {
			continue
		}
		headers[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	query := map[string]string{}
	for k, vs := range h.Query {
		if len(vs) > 0 {
			query[k] = vs[0]
		}
	}
	var parsed json.RawMessage = []byte("null")
	if kt.JSONDepth(h.Body) <= kt.MaxPayloadDepth && json.Valid(h.Body) {
		parsed = h.Body
	}
	return json.Marshal(map[string]any{"method": h.Method, "headers": headers, "query": query, "json": parsed, "body": string(h.Body)})
}

// SlackChallenge is the challenge of Slack's URL verification
// ({"type": "url_verification", "challenge": "…"}) sent to a webhook
// verified as Slack's; only a verified request gets here.
func SlackChallenge(wh script.Webhook, h Hook) (string, bool) {
	if wh.Verify.Kind != script.VerifySlack {
		return "", false
	}
	var m struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
	}
	if json.Unmarshal(h.Body, &m) != nil || m.Type != "url_verification" || m.Challenge == "" {
		return "", false
	}
	return m.Challenge, true
}
