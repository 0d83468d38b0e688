package script

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	kt "github.com/keep-run/keep/internal/keeptype"
)

// WebhookDecl is one webhook as the script declares it (issue 26):
// webhooks: { NAME: { publishes, verify, dedupe, handler } }. Verify and
// dedupe are kept as the script wrote them; Parse reads them, for keep
// validate and for the engine alike.
type WebhookDecl struct {
	Publishes    []string        `json:"publishes"`
	PublishesSet bool            `json:"publishesRaw"`
	Handler      bool            `json:"handler"`
	Verify       json.RawMessage `json:"verify"`
	Dedupe       json.RawMessage `json:"dedupe"`
}

// The kinds of a webhook's verify, each the form one sender signs with.
const (
	VerifyHMAC   = "hmac"   // { header, prefix, secret }: hex HMAC-SHA256 of the body (GitHub's X-Hub-Signature-256)
	VerifyStripe = "stripe" // { secret, tolerance }: Stripe-Signature t=…,v1=… over "t.body"
	VerifySlack  = "slack"  // { secret, tolerance }: X-Slack-Signature v0=… over "v0:ts:body"
	VerifyToken  = "token"  // { header, prefix, secret }: the header carries the secret itself
)

// VerifyKinds are the kinds keep knows, sorted.
var VerifyKinds = []string{VerifyHMAC, VerifySlack, VerifyStripe, VerifyToken}

// DefaultTolerance is how far a signed timestamp (Stripe's, Slack's) may
// be from keep's clock when the webhook does not say: both senders
// document five minutes.
const DefaultTolerance = 5 * time.Minute

// Verify is how a webhook's requests are checked.
type Verify struct {
	Kind      string
	Header    string        // hmac, token: the header that carries the signature or the token
	Prefix    string        // hmac, token: what the header's value starts with ("sha256=", "Bearer ")
	Secret    string        // the name of the secret (keep secret set NAME)
	Tolerance time.Duration // stripe, slack: the timestamp's tolerance
}

// Dedupe says where a delivery's id is: a header, or a dotted path into
// the JSON body; neither: the hash of the body.
type Dedupe struct {
	Header string
	JSON   string
}

// Webhook is a webhook's declaration, read and checked.
type Webhook struct {
	Name      string
	Publishes []string
	Verify    Verify
	Dedupe    Dedupe
}

// verifyFields are the fields each kind takes, and which are required.
var verifyFields = map[string]struct{ all, required []string }{
	VerifyHMAC:   {[]string{"header", "prefix", "secret"}, []string{"header", "secret"}},
	VerifyStripe: {[]string{"secret", "tolerance"}, []string{"secret"}},
	VerifySlack:  {[]string{"secret", "tolerance"}, []string{"secret"}},
	VerifyToken:  {[]string{"header", "prefix", "secret"}, []string{"header", "secret"}},
}

// Parse reads a webhook's declaration. Each problem names the field and
// says what to write instead; a webhook with problems is not served.
func (d WebhookDecl) Parse(name string) (Webhook, []string) {
	w := Webhook{Name: name, Publishes: d.Publishes}
	var out []string
	if !validName.MatchString(name) {
		out = append(out, fmt.Sprintf("the webhook's name %q is part of its URL (/hooks/WORKFLOW/NAME): use only letters, digits, '.', '_' and '-' (at most 100)", name))
	}
	if !d.Handler {
		out = append(out, "the webhook has no handler function: add handler: async (ctx, req) => { ... }")
	}
	if len(d.Publishes) == 0 {
		out = append(out, "the webhook must declare a non-empty publishes: [\"topic\"]")
	}
	v, problems := parseVerify(d.Verify)
	w.Verify, out = v, append(out, problems...)
	dd, problems := parseDedupe(d.Dedupe)
	w.Dedupe, out = dd, append(out, problems...)
	return w, out
}

func parseVerify(raw json.RawMessage) (Verify, []string) {
	example := `verify: { hmac: { header: "X-Hub-Signature-256", prefix: "sha256=", secret: "GITHUB_WEBHOOK_SECRET" } }`
	var m map[string]json.RawMessage
	if isNull(raw) {
		return Verify{}, []string{"the webhook has no verify: every request to it is checked before its handler sees it; add one of " + strings.Join(VerifyKinds, ", ") + ", e.g. " + example}
	}
	if json.Unmarshal(raw, &m) != nil || len(m) != 1 {
		return Verify{}, []string{"verify must be an object with exactly one kind (" + strings.Join(VerifyKinds, ", ") + "), e.g. " + example}
	}
	var v Verify
	for kind, body := range m {
		v.Kind = kind
		spec, ok := verifyFields[kind]
		if !ok {
			return v, []string{fmt.Sprintf("verify: keep knows no kind %q; the kinds are %s", kind, strings.Join(VerifyKinds, ", "))}
		}
		var f map[string]any
		if json.Unmarshal(body, &f) != nil || f == nil {
			return v, []string{fmt.Sprintf("verify.%s must be an object with %s", kind, strings.Join(spec.all, ", "))}
		}
		var out []string
		for _, k := range sortedKeys(f) {
			if !slices.Contains(spec.all, k) {
				out = append(out, fmt.Sprintf("verify.%s has no field %q (its fields: %s)", kind, k, strings.Join(spec.all, ", ")))
			}
		}
		for _, k := range spec.required {
			if s, _ := f[k].(string); strings.TrimSpace(s) == "" {
				out = append(out, fmt.Sprintf("verify.%s needs %s, a string", kind, k))
			}
		}
		str := func(k string) string {
			s, isStr := f[k].(string)
			if !isStr && f[k] != nil {
				out = append(out, fmt.Sprintf("verify.%s.%s must be a string", kind, k))
			}
			return s
		}
		v.Header, v.Prefix, v.Secret = str("header"), str("prefix"), str("secret")
		if v.Secret != "" {
			if err := kt.CheckSecretName(v.Secret); err != nil {
				out = append(out, fmt.Sprintf("verify.%s.secret names the secret (set with keep secret set NAME), not its value: %v", kind, err))
			}
		}
		v.Tolerance = DefaultTolerance
		if t, set := f["tolerance"]; set {
			secs, isNum := t.(float64)
			if !isNum || secs < 1 || secs > 86400 {
				out = append(out, fmt.Sprintf("verify.%s.tolerance is how many seconds a signed timestamp may be from keep's clock: a number from 1 to 86400 (default %d)", kind, int(DefaultTolerance.Seconds())))
			} else {
				v.Tolerance = time.Duration(secs * float64(time.Second))
			}
		}
		return v, out
	}
	return v, nil
}

func parseDedupe(raw json.RawMessage) (Dedupe, []string) {
	if isNull(raw) {
		return Dedupe{}, nil
	}
	bad := []string{`dedupe says where a delivery's id is: { header: "X-GitHub-Delivery" } or { json: "id" } (a dotted path into the JSON body); without dedupe, the body's hash is its id`}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil || len(m) != 1 {
		return Dedupe{}, bad
	}
	var d Dedupe
	for k, v := range m {
		s, ok := v.(string)
		if !ok || strings.TrimSpace(s) == "" {
			return d, bad
		}
		switch k {
		case "header":
			d.Header = s
		case "json":
			d.JSON = s
		default:
			return d, bad
		}
	}
	return d, nil
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// Webhook returns the named webhook of the declaration, read; ok is false
// when the script declares none of that name.
func (d Declaration) Webhook(name string) (Webhook, []string, bool) {
	wd, ok := d.Webhooks[name]
	if !ok {
		return Webhook{}, nil, false
	}
	w, problems := wd.Parse(name)
	return w, problems, true
}

// WebhookNames lists the declared webhooks, sorted.
func (d Declaration) WebhookNames() []string {
	names := make([]string, 0, len(d.Webhooks))
	for n := range d.Webhooks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
